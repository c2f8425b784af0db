"""The wire format of one trajectory: how a trajectory travels as JSON.

The store's records (``rollout/collect/records.py``), the env server and its remote
client (``envs/serving``, ``envs/remote``), Ray actors and verl's agent loop all move
trajectories in this one form, so it sits on the ground floor: it imports nothing of
the project but the trajectory types.

Observations are delta-encoded: a transition whose observation extends the previous
context (observation + action) stores only its new tokens (``ob_prefix`` tokens are
the previous context's, ``ob_new`` follow), so a long multi-turn episode costs linear,
not quadratic, space, and the prefix property training data relies on is visible in
the data itself.
"""

from __future__ import annotations

from typing import Any

from agentenvs.envs.types import TokensWithLogprobs, Trajectory, Transition


def trajectory_to_json(traj: Trajectory) -> dict[str, Any]:
    transitions = []
    context: list[int] = []
    for tr in traj.transitions:
        n = len(context)
        if n and len(tr.ob) >= n and tr.ob[:n] == context:
            prefix, new = n, tr.ob[n:]
        else:
            prefix, new = 0, tr.ob
        transitions.append(
            {
                "ob_prefix": prefix,
                "ob_new": list(new),
                "ac": list(tr.ac.tokens),
                "logprobs": None if tr.ac.logprobs is None else list(tr.ac.logprobs),
                "sampler_stop": tr.ac.stop_reason,
                "reward": tr.reward,
                "done": tr.episode_done,
                "metrics": dict(tr.metrics),
                "logs": dict(tr.logs),
            }
        )
        context = list(tr.ob) + list(tr.ac.tokens)
    return {
        "transitions": transitions,
        "final_ob": list(traj.final_ob),
        "stop_reason": traj.stop_reason,
    }


def trajectory_from_json(data: dict[str, Any]) -> Trajectory:
    transitions = []
    context: list[int] = []
    for turn, item in enumerate(data["transitions"]):
        prefix = int(item["ob_prefix"])
        if prefix > len(context):
            raise ValueError(
                f"turn {turn}: ob_prefix {prefix} is longer than the context ({len(context)})"
            )
        ob = context[:prefix] + list(item["ob_new"])
        logprobs = item.get("logprobs")
        logprobs = None if logprobs is None else list(logprobs)  # siblings share stored lists
        ac = TokensWithLogprobs(list(item["ac"]), logprobs, item["sampler_stop"])
        transitions.append(
            Transition(
                ob=ob,
                ac=ac,
                reward=float(item["reward"]),
                episode_done=bool(item["done"]),
                metrics=dict(item.get("metrics", {})),
                logs=dict(item.get("logs", {})),
            )
        )
        context = ob + ac.tokens
    return Trajectory(transitions, list(data.get("final_ob", [])), data.get("stop_reason"))
