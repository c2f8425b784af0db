"""``python -m agentenvs.rollout.cli``: the ``agentenvs`` command."""

from agentenvs.rollout.cli import main

main()
