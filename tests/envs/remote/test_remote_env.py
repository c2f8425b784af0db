"""Remote environments under the collector, against real env servers on loopback:
the records equal the in-process ones token for token (plain, trees, streaming, the
`agentenvs rollout --env-server` command), groups spread over several servers, and
environment errors keep the in-process retry rules."""

from __future__ import annotations

import asyncio
import json
import pickle

import pytest
from support.env_servers import free_port, thread_server
from typer.testing import CliRunner

from agentenvs.envs.guess_number import GuessNumberConfig, GuessNumberEnv
from agentenvs.envs.registry import make
from agentenvs.envs.remote import RemoteDataset, RemoteEnv, ServerUnavailable
from agentenvs.envs.serving.app import ServedEnvs, create_app
from agentenvs.envs.text import TextEnv, TextStep
from agentenvs.envs.types import TransientError
from agentenvs.rollout.cli import app as cli
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.collect.streaming import collect_streaming
from agentenvs.rollout.collect.tree import BranchSchedule, as_trees
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.policies import make_policy
from agentenvs.rollout.tokenizer import load_tokenizer

pytestmark = pytest.mark.services

DIFFER_ONLY_IN = ("created",)
"""What a remote record may differ in from the in-process one: when it was written."""


class FlakyOnce(TransientError):
    pass


class BrokenGuessEnv(GuessNumberEnv):
    """Raises in its second step: a bug (ValueError), or with ``transient`` a hiccup
    that the first attempt of each group meets and its retry does not."""

    transient = False
    seen: set[int] = set()

    async def step(self, action_text: str, *, stop_reason) -> TextStep:  # type: ignore[override]
        if self.transient and self.secret not in self.seen:
            self.seen.add(self.secret)
            raise FlakyOnce("engine restarting")
        if not self.transient:
            raise ValueError(f"boom at secret {self.secret}")
        return await super().step(action_text, stop_reason=stop_reason)


class BrokenConfig(GuessNumberConfig):
    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return BrokenGuessEnv(self.secret(task_index, split), self.low, self.high)


class FlakyGuessEnv(BrokenGuessEnv):
    transient = True


class FlakyConfig(GuessNumberConfig):
    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return FlakyGuessEnv(self.secret(task_index, split), self.low, self.high)


@pytest.fixture(scope="module")
def builtin():
    return load_tokenizer("builtin")


def _served(builtin) -> ServedEnvs:
    return ServedEnvs(["guess_number", "alfworld", "broken", "flaky"], builtin,
                      classes={"broken": BrokenConfig, "flaky": FlakyConfig})  # fmt: skip


@pytest.fixture(scope="module")
def servers(builtin):
    with (
        thread_server(create_app(_served(builtin))) as a,
        thread_server(create_app(_served(builtin))) as b,
    ):
        yield [a, b]


def lines(path) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for name in DIFFER_ONLY_IN:
            record.pop(name)
        out[record["key"]] = record
    return out


def _collect(builders, path, **options):
    store = TrajectoryStore(path)
    result = asyncio.run(
        collect(
            builders,
            make_policy("scripted"),
            CollectOptions(progress=False, **options),
            store=store,
        )
    )
    return result, store


def _pair(env, builtin, servers, tmp_path, *, config=None, groups=4, group_size=2, wrap=None):
    """The same seeded run in process and on the servers: both stores."""
    config = dict(config or {})
    local = make(env, **config).dataset(builtin, group_size=group_size, n_groups=groups)
    local_builders = [local.get_batch(i)[0] for i in range(len(local))]
    remote = RemoteDataset.open(servers, env, group_size=group_size, config=config,
                                n_groups=groups, tokenizer=builtin)  # fmt: skip
    paths = []
    for name, builders in (("local", local_builders), ("remote", remote.builders)):
        builders = wrap(builders) if wrap else builders
        result, store = _collect(builders, tmp_path / f"{name}.jsonl", concurrency=3)
        assert len(result.ok) == groups, [r.error for r in result.failed]
        paths.append(store.path)
    return paths, remote


@pytest.mark.parametrize(
    ("env", "config"), [("guess_number", {}), ("alfworld", {"data": "shipped", "preset": "gigpo"})]
)
def test_remote_records_equal_the_in_process_ones(env, config, builtin, servers, tmp_path):
    (local, remote), dataset = _pair(env, builtin, servers, tmp_path, config=config)
    assert lines(remote) == lines(local)
    assert check_file(remote, tokenizer=builtin).ok
    # round-robin: both servers served groups
    assert {b.served_by for b in dataset.builders} == set(servers)


def test_tree_rollouts_fork_on_the_server_and_match(builtin, servers, tmp_path):
    schedule = BranchSchedule(branch_at=(1, 2), branch_factor=2)
    (local, remote), _ = _pair(
        "guess_number", builtin, servers, tmp_path, wrap=lambda b: as_trees(b, schedule)
    )
    stored = lines(remote)
    assert stored == lines(local)
    assert all(r["extra"]["tree"]["forks"] > 0 for r in stored.values())
    assert check_file(remote, tokenizer=builtin).ok


def test_streaming_collection_runs_remote_envs(builtin, servers):
    dataset = RemoteDataset.open(servers, "guess_number", group_size=2, n_groups=3,
                                 tokenizer=builtin)  # fmt: skip
    records, _ = asyncio.run(
        collect_streaming(dataset.builders, make_policy("scripted"), CollectOptions(concurrency=2))
    )
    assert sorted(r.status for r in records) == ["ok"] * 3


def test_the_rollout_command_runs_on_env_servers(builtin, servers, tmp_path):
    outs = {}
    for name, extra in (("local", []), ("remote", ["--env-server", ",".join(servers)])):
        outs[name] = tmp_path / f"{name}.jsonl"
        ran = CliRunner().invoke(cli, ["rollout", "guess_number", "--groups", "3",
                                       "--group-size", "2", "--out", str(outs[name]),
                                       "--no-progress", *extra])  # fmt: skip
        assert ran.exit_code == 0, ran.output
    assert lines(outs["remote"]) == lines(outs["local"])
    checked = CliRunner().invoke(cli, ["check", str(outs["remote"])])
    assert checked.exit_code == 0, checked.output  # `agentenvs check` itself passes
    mismatch = CliRunner().invoke(
        cli,
        [
            "rollout",
            "guess_number",
            "--env-server",
            servers[0],
            "--set",
            "bogus=1",
            "--out",
            str(tmp_path / "x.jsonl"),
        ],
    )
    assert mismatch.exit_code == 2 and "bogus" in mismatch.output  # refused before any request


def test_an_env_bug_fails_its_group_unretried_and_a_hiccup_is_retried(builtin, servers, tmp_path):
    broken = RemoteDataset.open(servers, "broken", group_size=1, n_groups=2, tokenizer=builtin)
    result, _ = _collect(broken.builders, tmp_path / "broken.jsonl", retries=2)
    assert len(result.failed) == 2
    for record in result.failed:
        assert record.attempts == 1  # a bug raises the same way on fresh envs
        assert "ValueError: boom" in record.error and "raised in step" in record.error
        assert "not retried" in record.error
    flaky = RemoteDataset.open(servers, "flaky", group_size=1, n_groups=2, tokenizer=builtin)
    result, _ = _collect(flaky.builders, tmp_path / "flaky.jsonl", retries=2)
    assert [r.attempts for r in result.ok] == [2, 2]


def test_a_dead_url_among_live_ones_gets_no_group(builtin, servers, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    dataset = RemoteDataset.open([dead, *servers], "guess_number", group_size=2, n_groups=3,
                                 tokenizer=builtin, call_retries=0)  # fmt: skip
    result, _ = _collect(dataset.builders, tmp_path / "s.jsonl")
    assert len(result.ok) == 3 and {b.served_by for b in dataset.builders} <= set(servers)
    with pytest.raises(ServerUnavailable, match="no env server answered"):
        RemoteDataset.open([dead], "guess_number", group_size=1, call_retries=0)


def test_builders_pickle_without_their_session_and_run_after(builtin, servers):
    dataset = RemoteDataset.open(servers, "guess_number", group_size=2, n_groups=1,
                                 tokenizer=builtin)  # fmt: skip
    builder = dataset.builders[0]

    async def open_and_copy():
        envs = await builder.make_envs()
        assert all(isinstance(e, RemoteEnv) for e in envs)
        copied = pickle.loads(pickle.dumps(builder))
        assert copied._group_id is None and copied._connection is None
        await builder.cleanup()
        again = await copied.make_envs()
        await copied.cleanup()
        return again

    assert len(asyncio.run(open_and_copy())) == 2


def test_a_tokenizer_other_than_the_servers_is_refused(servers, tokenizer):
    from agentenvs.envs.remote import RemoteEnvError
    from agentenvs.envs.tokenizer_fingerprint import tokenizer_key

    if tokenizer_key(tokenizer) == tokenizer_key(load_tokenizer("builtin")):
        other = load_tokenizer("builtin")
        other.chat_template = (other.chat_template or "") + "{# another template #}"
        tokenizer = other
    with pytest.raises(RemoteEnvError, match="renders with tokenizer"):
        RemoteDataset.open(servers, "guess_number", group_size=1, tokenizer=tokenizer)
