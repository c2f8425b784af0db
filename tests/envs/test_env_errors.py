"""Every error the envs raise on purpose shares one root and keeps its builtin base."""

from __future__ import annotations

import pytest

from agentenvs.envs.alfworld.pool import (
    ALFWorldWorkerError,
    EngineError,
    WorkerCrashed,
    WorkerTimeout,
)
from agentenvs.envs.data_files import DataError
from agentenvs.envs.errors import AgentEnvsError, is_transient
from agentenvs.envs.registry import EnvConfigError, UnknownEnvError
from agentenvs.envs.retool.env import SandboxFailure
from agentenvs.envs.retool.problems import load_problems
from agentenvs.envs.search_r1.corpus import CorpusError
from agentenvs.envs.search_r1.questions import load_tasks
from agentenvs.envs.search_r1.retrievers.base import QueryRejected, RetrieverError
from agentenvs.envs.types import ForkUnsupported


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (UnknownEnvError, KeyError),
        (EnvConfigError, ValueError),
        (DataError, ValueError),
        (CorpusError, ValueError),
        (RetrieverError, RuntimeError),
        (QueryRejected, RuntimeError),
        (SandboxFailure, RuntimeError),
        (ALFWorldWorkerError, RuntimeError),
        (WorkerCrashed, RuntimeError),
        (WorkerTimeout, RuntimeError),
        (EngineError, RuntimeError),
        (ForkUnsupported, RuntimeError),
    ],
)
def test_error_derives_from_the_root_and_its_builtin(error: type, builtin: type) -> None:
    assert issubclass(error, AgentEnvsError) and issubclass(error, builtin)


def test_one_data_error_serves_every_environment(tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "1"}\nnot json\n')
    with pytest.raises(DataError, match="line 2"):
        load_problems(bad)
    with pytest.raises(DataError, match=r"bad\.jsonl:2: not JSON"):
        load_tasks(bad)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (SandboxFailure("the sandbox session failed"), True),
        (WorkerCrashed("worker died"), True),
        (EngineError("the engine refused the game"), False),
        (QueryRejected("query too long"), False),
        (KeyError("oops"), False),
    ],
)
def test_infrastructure_faults_are_retried_and_env_bugs_are_not(error, transient) -> None:
    # The collector retries only what is_transient says is of the moment: a sandbox or
    # worker that died, not a bug in the env's own code (issue 30: a KeyError in step).
    assert is_transient(error) is transient
