"""agentenvs.rollout: running envs with a policy, and turning trajectories into training data."""
