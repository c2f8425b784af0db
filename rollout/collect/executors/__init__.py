"""Where a collection's groups run: in this process (the default) or in Ray actors.

The collector decides *what* runs (which groups, with what retries and timeouts)
and owns the store; an executor decides *where* each group's episodes run. Both
executors give the collector the same :class:`GroupRecord` for the same group, so
records, the store and resume do not depend on the choice.

``RayExecutor`` is imported lazily (``from ...executors.ray_executor import
RayExecutor``) so that Ray, an optional extra, is only needed by runs that use it.
"""

from agentenvs.rollout.collect.executors.base import GroupExecutor, GroupRunner
from agentenvs.rollout.collect.executors.in_process import InProcessExecutor
from agentenvs.rollout.collect.executors.spec import PolicySpec

__all__ = ["GroupExecutor", "GroupRunner", "InProcessExecutor", "PolicySpec"]
