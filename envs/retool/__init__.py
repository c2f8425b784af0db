"""ReTool: multi-turn code-interpreter RL for math (arXiv 2504.11536).

Registered as ``retool`` (gymnasium ``agentenvs/ReTool-v0``); see
:class:`agentenvs.envs.retool.config.ReToolConfig` and ``docs/retool.md``.
"""

from agentenvs.envs.retool.config import ReToolConfig

__all__ = ["ReToolConfig"]
