"""``agentenvs rollout``: collect GROUPS x GROUP_SIZE episodes into a resumable store.

The flags (:mod:`~.options`, shared with ``eval``) become one
:class:`~agentenvs.rollout.collect.spec.RunSpec` (:mod:`~.run_spec`); the run is
:func:`~agentenvs.rollout.cli.rollout_run.run_rollout`.
"""

from __future__ import annotations

from agentenvs.rollout.cli.common import friendly_errors
from agentenvs.rollout.cli.flag_groups import (
    DatasetFlags,
    EnvFlags,
    ExecutorFlags,
    LimitFlags,
    OutputFlags,
    PolicyFlags,
    StoreFlags,
    with_flag_groups,
)
from agentenvs.rollout.cli.options import EnvName
from agentenvs.rollout.cli.tree_options import TreeFlags


@with_flag_groups
def rollout_command(
    env: EnvName,
    policy: PolicyFlags,
    dataset: DatasetFlags,
    env_flags: EnvFlags,
    limits: LimitFlags,
    store: StoreFlags,
    executor: ExecutorFlags,
    output: OutputFlags,
    tree: TreeFlags,
) -> None:
    """Run GROUPS groups of GROUP_SIZE episodes of ENV with a policy; store them as JSONL."""
    from agentenvs.rollout.cli.rollout_run import run_interruptibly
    from agentenvs.rollout.cli.run_report import report_run
    from agentenvs.rollout.cli.run_spec import rollout_spec

    with friendly_errors(debug=output.debug):
        schedule = tree.schedule()
        spec = rollout_spec(
            env, policy, dataset, env_flags, limits, store, executor, output, schedule
        )
        run = run_interruptibly(spec)
    report_run(run, output, f"{env}: {policy.policy} policy")
