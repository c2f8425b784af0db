"""Compare runs on the same test panel and budget (``agentenvs compare``, ``agentenvs eval``).

The last step of moving an experiment between trainers is checking that the
results still agree. Two numbers say nothing until the runs behind them are shown
to be comparable, so this package answers in that order: ``comparability`` names
every setting in which two runs differ (panel, split, config, budget, sampling,
renderer, template, group size, policy, weights), ``stats`` pairs them by task and
puts a seeded bootstrap interval on the difference, ``tables`` / ``plot_png`` /
``plot_page`` show it, and ``eval_plan`` fixes the panel and budget an evaluation
run records so that ``compare`` accepts it.
"""

from agentenvs.rollout.compare.comparability import Comparability, Difference, parse_allow
from agentenvs.rollout.compare.report import Comparison, compare_runs
from agentenvs.rollout.compare.runs import Run, load_run
from agentenvs.rollout.compare.settings import SETTING_NAMES

__all__ = [
    "SETTING_NAMES",
    "Comparability",
    "Comparison",
    "Difference",
    "Run",
    "compare_runs",
    "load_run",
    "parse_allow",
]
