"""``agentenvs eval ENV --policy ... --split test``: an evaluation run ``compare`` accepts.

It is ``agentenvs rollout`` with what an evaluation must hold still held still
(:mod:`agentenvs.rollout.compare.eval_plan`): a fixed panel of the split's first
tasks, the budget of the config (or of ``--preset``), greedy sampling by default,
one trajectory per task unless asked, and no training-only knobs (no tree
rollouts, no ``--new-run`` into another run's file). Rerunning the same command
resumes; the same command with other settings into the same file is refused.
The options are ``rollout``'s (:mod:`~.options`), and the run is its
(:func:`~.rollout_run.run_interruptibly` of a :class:`~agentenvs.rollout.collect.spec.RunSpec`).
"""

from __future__ import annotations

from pathlib import Path

from agentenvs.rollout.cli.common import friendly_errors, parse_assignments
from agentenvs.rollout.cli.flag_groups import (
    LimitFlags,
    OutputFlags,
    PanelFlags,
    PolicyFlags,
    with_flag_groups,
)
from agentenvs.rollout.cli.options import EnvName, OutFile, Sets


@with_flag_groups
def eval_command(
    env: EnvName,
    policy: PolicyFlags,
    panel: PanelFlags,
    limits: LimitFlags,
    output: OutputFlags,
    out_file: OutFile = None,
    sets: Sets = None,
) -> None:
    """Evaluate a policy on a fixed panel of ENV's SPLIT with a fixed budget (resumable)."""
    from agentenvs.rollout.cli.rollout_run import run_interruptibly
    from agentenvs.rollout.cli.run_report import report_run
    from agentenvs.rollout.cli.run_spec import collect_options, split_sampling
    from agentenvs.rollout.collect.spec import DatasetSpec, EnvSpec, RunSpec, StoreSpec
    from agentenvs.rollout.compare.eval_plan import plan_eval

    split = panel.split
    out_path = out_file or Path("out") / f"{env}-eval-{split}.jsonl"
    with friendly_errors(debug=output.debug):
        plan = plan_eval(
            env,
            policy=policy.policy,
            split=split,
            preset=panel.preset,
            tasks=panel.tasks,
            group_size=panel.group_size,
            overrides=parse_assignments(sets or [], "--set"),
            policy_options=parse_assignments(policy.policy_opts or [], "--policy-opt"),
        )
        chosen, sampling = split_sampling(policy.policy, plan.policy_options)
        spec = RunSpec(
            env=EnvSpec(env, plan.overrides),
            dataset=DatasetSpec(split, plan.tasks, plan.group_size),
            policy=chosen,
            sampling=sampling,
            tokenizer=policy.tokenizer,
            limits=collect_options(limits, output),
            store=StoreSpec(out_path),
            provenance=plan.provenance,
        )
        run = run_interruptibly(spec)
    sampling_note = "deterministic" if plan.deterministic else "sampled (not deterministic)"
    report_run(
        run,
        output,
        f"{env} eval: {policy.policy} policy on {split}",
        extra={"eval": plan.provenance["eval"]},
        notes=[
            f"panel: the first {plan.tasks} of {split}'s tasks, group size {plan.group_size}, "
            f"{sampling_note}; compare it with `agentenvs compare {out_path} OTHER`"
        ],
    )
