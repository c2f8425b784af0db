"""``agentenvs check`` on a gateway capture: it passes whole, and fails each way it can be spoiled.

One capture, made through :class:`PolicyGateway` the way a harness's requests make it: a
main agent's tool loop, a sub-agent with its own system prompt in the middle, and the
main agent continuing after it (three segments, one of them a branch). The intact store
passes with 100% of the sampled tokens delivered; each corruption, at the magnitude a
converter or a hand edit produces (one turn re-tokenized, one segment dropped, one
observation token moved into the loss), fails with the gateway finding naming it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from support.corruption_runs import Writers
from support.corruptions import (
    FORMS,
    form_files,
    handoff_mask_on_observation,
    read_lines,
    write_forms,
    write_handoff,
    write_lines,
)
from support.gateway_helpers import BASH_TOOL, ScriptPolicy, hermes_call, qwen3

from agentenvs.envs.harness.conversation import ChatRequest
from agentenvs.envs.harness.segments import SEGMENT_LOG
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.gateway.policy_gateway import GatewayOptions, PolicyGateway
from agentenvs.rollout.inspect.check import check_file


def script(prompt: str) -> str:
    if "sub-agent" in prompt:
        return "The bug is in calc.py."
    if prompt.count("<tool_response>") >= 2:
        return "Fixed."
    if "<tool_response>" in prompt:
        return hermes_call("bash", {"command": "sed -i s/-/+/ calc.py"}, "Now the fix.")
    return hermes_call("bash", {"command": "ls"}, "First, the files.")


async def capture(path: Path) -> Path:
    """A store of two captured episodes (see the module docstring)."""
    gateway = PolicyGateway(
        ScriptPolicy(qwen3(), script),
        GatewayOptions(tokenizer=qwen3(), store=TrajectoryStore(path)),
    )

    async def ask(key: str, messages: list[dict]) -> Any:
        session = gateway.session(key)
        turn = session.tree.prepare(ChatRequest(messages=list(messages), tools=[BASH_TOOL]))
        return await session.runner.run(session.tree, turn)

    def echo(reply: Any) -> dict:
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
        return {"role": "assistant", "content": reply.content, "tool_calls": calls}

    for key in ("ep0", "ep1"):
        main = [
            {"role": "system", "content": "You fix bugs."},
            {"role": "user", "content": "Fix calc.py."},
        ]
        for _ in range(2):
            reply = await ask(key, main)
            tool = {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "calc.py"}
            main += [echo(reply), tool]
            if len(main) == 4:  # a sub-agent between the main agent's turns
                await ask(
                    key,
                    [
                        {"role": "system", "content": "You are a sub-agent."},
                        {"role": "user", "content": "Find it."},
                    ],
                )
        await ask(key, main)
        await gateway.finish(key, reward=1.0)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    return asyncio.run(capture(tmp_path_factory.mktemp("gateway") / "capture.jsonl"))


def gateway_findings(path: Path, **kwargs: Any) -> tuple[bool, list[str]]:
    report = check_file(path, tokenizer=qwen3(), **kwargs)
    details = [f"{f.status}: {f.detail}" for f in report.findings if "gateway" in f.detail]
    return report.ok, details


def edited(store: Path, tmp_path: Path, edit: Any) -> Path:
    """The store with ``edit(transitions)`` applied to the first episode, written back."""
    lines = read_lines(store)
    record = GroupRecord.from_json(copy.deepcopy(lines[0]))
    edit(record.group.trajectories[0].transitions)
    lines[0] = json.loads(json.dumps(record.to_json()))
    return write_lines(lines, tmp_path / "edited.jsonl")


def test_the_intact_capture_passes_with_every_token_delivered(store: Path) -> None:
    ok, details = gateway_findings(store)
    assert ok, details
    assert details == [
        "pass: gateway captures: 2 episodes, 4 segments, 8 turns; links, prefixes and sampled "
        f"tokens hold; delivered 100.0% ({details[0].split('(')[1].split(' of ')[0]} of "
        f"{details[0].split(' of ')[1].split(' ')[0]} sampled tokens)"
    ]
    first = GroupRecord.from_json(read_lines(store)[0]).group.trajectories[0].transitions
    # segment-major: the main agent's three turns, then the sub-agent's.
    assert [t.logs[SEGMENT_LOG] for t in first] == [0, 0, 0, 1]


def test_a_retokenized_turn_fails(store: Path, tmp_path: Path) -> None:
    tok = qwen3()

    def retokenize(transitions: list) -> None:
        # A trainer that re-encoded the main agent's text: its first reply, and the same
        # tokens inside the later turns' observations.
        old = transitions[0].ac.tokens
        new = tok.encode(tok.decode(old), add_special_tokens=False)
        assert new != old
        cut = len(transitions[0].ob)
        transitions[0].ac.tokens = new
        transitions[0].ac.logprobs = [-0.5] * len(new)
        for later in transitions[1:3]:
            later.ob = later.ob[:cut] + new + later.ob[cut + len(old) :]

    ok, details = gateway_findings(edited(store, tmp_path, retokenize))
    assert not ok
    assert details == [
        "fail: gateway capture: turn 0: its action is not the tokens the gateway sampled "
        "(re-tokenized or edited)"
    ]


@pytest.mark.parametrize("segment", [1, 0], ids=["sub-agent", "main"])
def test_a_dropped_segment_fails(store: Path, tmp_path: Path, segment: int) -> None:
    def drop(transitions: list) -> None:
        transitions[:] = [t for t in transitions if t.logs[SEGMENT_LOG] != segment]
        if transitions and segment == 1:  # a careful dropper even moves the episode's end
            transitions[-1].episode_done = True

    ok, details = gateway_findings(edited(store, tmp_path, drop))
    assert not ok
    expected = (
        "the last turn carries no total of sampled tokens"
        if segment == 1
        else "a turn was dropped or changed"
    )
    assert len(details) == 1 and expected in details[0], details


def test_an_observation_token_moved_into_the_loss_fails(store: Path, tmp_path: Path) -> None:
    def train_observation(transitions: list) -> None:
        # The first token of the tool result that follows turn 0 becomes part of turn
        # 0's action: the sequence is unchanged, but that token would be trained on.
        context = len(transitions[0].ob) + len(transitions[0].ac.tokens)
        transitions[0].ac.tokens = [*transitions[0].ac.tokens, transitions[1].ob[context]]
        transitions[0].ac.logprobs = [*transitions[0].ac.logprobs, -0.5]

    ok, details = gateway_findings(edited(store, tmp_path, train_observation))
    assert not ok
    assert "turn 0: its action is not the tokens the gateway sampled" in details[0]


def test_a_handoff_training_an_observation_token_fails_against_its_capture(
    store: Path, tmp_path: Path
) -> None:
    handoff = write_handoff(store, tmp_path / "samples.jsonl")
    assert check_file(handoff, tokenizer=qwen3(), reference=store).ok
    lines = read_lines(handoff)
    where = handoff_mask_on_observation(lines, qwen3())
    report = check_file(write_lines(lines, handoff), tokenizer=qwen3(), reference=store)
    assert not report.ok
    assert any(f.status == "fail" and where in f.where for f in report.findings), where


@pytest.fixture(scope="module")
def forms(store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The capture handed to every trainer form: JSONL, verl batch, Tinker and PyTRIO datums."""
    return write_forms(store, tmp_path_factory.mktemp("gateway-forms"), qwen3())


@pytest.mark.parametrize("form", FORMS)
def test_every_handoff_of_the_capture_passes_check(forms: dict[str, Path], form: str) -> None:
    checked, reference = form_files(forms, form)
    report = check_file(checked, tokenizer=qwen3(), reference=reference)
    assert report.ok, [f for f in report.findings if f.status == "fail"]


def _train_an_observation_token(batch: dict[str, Any]) -> dict[str, Any]:
    """A padder bug: the first masked-out position inside a response is trained."""
    mask = batch["response_mask"]
    for row in range(mask.shape[0]):
        length = int(batch["attention_mask"][row, batch["prompts"].shape[1] :].sum())
        zeros = (mask[row, :length] == 0).nonzero()
        if len(zeros):
            mask[row, int(zeros[0][0])] = 1
            return batch
    raise AssertionError("no observation token inside any response of the capture")


def test_a_verl_batch_training_an_observation_token_fails_against_its_capture(
    store: Path, tmp_path: Path
) -> None:
    paths = write_forms(store, tmp_path, qwen3(), Writers(verl=_train_an_observation_token))
    report = check_file(paths["verl"], tokenizer=qwen3(), reference=store)
    assert not report.ok, report.findings
