"""``check --rescore MODEL``: recorded logprobs against a teacher-forced pass of the model.

A tiny random model over the real Qwen2.5 vocabulary samples a guess-number run (its
logprobs are the model's own, in float32). Rescoring that run with the same saved
model passes; with the logprobs of one action rotated by one position (lengths,
signs and every other invariant intact) it fails and names the token, also on a
store that predates collection records, where nothing else can see it; a model
with other weights fails the clean run. A client upstream of the record that
re-encodes the sampled text, copies logprobs from another answer or reports them at
another temperature writes a self-consistent store; rescore fails it in every form.
"""

from __future__ import annotations

import pytest
from support.corruptions import read_lines, write_forms, write_lines
from support.vocab import shared_vocabulary
from support.vocab.runs import collect_store

from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.data.training_data import samples_from_records
from agentenvs.rollout.inspect.check import check_file
from agentenvs.rollout.inspect.rescore import load_rescorer
from agentenvs.rollout.policies.hf import HFPolicy
from agentenvs.rollout.policies.tiny_model import build_tiny_model
from agentenvs.rollout.trainers.jsonl.handoff import write_samples_jsonl

LIMITS = {"max_turns": 3, "max_tokens_per_turn": 10, "on_truncated_action": "pass"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tok = shared_vocabulary("qwen2.5")
    folder = tmp_path_factory.mktemp("rescore")
    model = build_tiny_model(tok, hidden_size=16, seed=1).eval()
    model.save_pretrained(folder / "model")
    tok.save_pretrained(folder / "model")  # the CLI loads the store's tokenizer from here
    other = build_tiny_model(tok, hidden_size=16, seed=2)
    other.save_pretrained(folder / "other")
    store = collect_store(
        tok, "guess_number", folder / "run.jsonl",
        overrides={"tasks": 1, "limits": LIMITS},
        policy=HFPolicy(model, tok, max_tokens=10, seed=7), group_size=2,
    )  # fmt: skip
    samples, meta = samples_from_records(list(TrajectoryStore(store).read()))
    handoff = folder / "samples.jsonl"
    write_samples_jsonl(
        samples, handoff, extra={"advantage_estimator": meta[0]["advantage_estimator"]}
    )
    return tok, store, handoff, folder


def _rescore(report):
    return [f for f in report.findings if f.detail.startswith("rescore")]


def _rotate_store(lines):
    tr = lines[0]["trajectories"][1]["transitions"][0]
    tr["logprobs"] = [*tr["logprobs"][1:], tr["logprobs"][0]]
    return lines


def test_rescore_passes_the_model_own_run(run):
    tok, store, handoff, folder = run
    rescorer = load_rescorer(str(folder / "model"))
    for report in (
        check_file(store, tokenizer=tok, rescorer=rescorer),
        check_file(handoff, tokenizer=tok, rescorer=rescorer),
    ):
        assert report.ok, [f for f in report.findings if f.status == "fail"]
        (found,) = _rescore(report)
        assert found.status == "pass" and "within tolerance" in found.detail


def test_rescore_catches_shifted_logprobs_even_without_a_collection_record(run, tmp_path):
    tok, store, handoff, folder = run
    rescorer = load_rescorer(str(folder / "model"))
    lines = _rotate_store(read_lines(store))
    for line in lines:
        line.pop("collected")  # a store from before collection records: only rescore sees it
    bad = write_lines(lines, tmp_path / "bad.jsonl")
    assert check_file(bad, tokenizer=tok).ok  # the data's own invariants all hold
    report = check_file(bad, tokenizer=tok, rescorer=rescorer)
    (found,) = _rescore(report)
    assert found.status == "fail", found
    traj = lines[0]["trajectories"][1]["transitions"][0]
    first = len(traj["ob_new"])
    assert found.where.startswith(f"group {lines[0]['key']} traj 1 sample 0 token ")
    assert first <= int(found.where.rsplit(" ", 1)[1]) < first + len(traj["ac"])

    samples = read_lines(handoff)
    line = next(ln for ln in samples if ln["traj_index"] == 1)
    span = [i for i, m in enumerate(line["loss_mask"]) if m]
    lp = line["logprobs"]
    lp[span[0] : span[-1] + 1] = [*lp[span[0] + 1 : span[-1] + 1], lp[span[0]]]
    line.pop("collected")
    shifted = check_file(write_lines(samples, tmp_path / "bad-samples.jsonl"), rescorer=rescorer)
    assert [f.status for f in _rescore(shifted)] == ["fail"]


def test_rescore_with_other_weights_fails_and_a_temperature_is_not_judged(run, tmp_path):
    tok, store, _, folder = run
    other = check_file(store, tokenizer=tok, rescorer=load_rescorer(str(folder / "other")))
    assert [f.status for f in _rescore(other)] == ["fail"]
    lines = read_lines(store)
    for line in lines:
        line["provenance"]["sampling"] = {"temperature": 0.7}
    hot = write_lines(lines, tmp_path / "hot.jsonl")
    report = check_file(hot, rescorer=load_rescorer(str(folder / "model")))
    assert [f.status for f in _rescore(report)] == ["skip"]


def test_an_unknown_sampler_dtype_is_refused(run):
    _, _, _, folder = run
    with pytest.raises(ValueError, match="no measured noise"):
        load_rescorer(str(folder / "model"), dtype="int8")


def test_cli_rescore(run, tmp_path):
    import json

    from typer.testing import CliRunner

    from agentenvs.rollout.cli import app

    _, store, _, folder = run
    bad = write_lines(_rotate_store(read_lines(store)), tmp_path / "bad.jsonl")
    runner = CliRunner()
    for path, code in ((store, 0), (bad, 1)):
        result = runner.invoke(
            app,
            ["check", str(path), "--json", "--rescore", str(folder / "model"),
             "--tokenizer", str(folder / "model")],
        )  # fmt: skip
        assert result.exit_code == code, result.output
        # (transformers' loading progress goes to stderr, which the runner mixes in)
        last = result.output.strip().splitlines()[-1]
        payload = json.loads(last[last.index('{"') :])
        (found,) = [f for f in payload["findings"] if f["detail"].startswith("rescore")]
        assert found["status"] == ("pass" if code == 0 else "fail")
    refused = runner.invoke(
        app, ["check", str(store), "--rescore", str(folder / "model"), "--rescore-dtype", "int8"]
    )
    assert refused.exit_code == 2 and "no measured noise" in refused.output


# ---- a policy client upstream of the record (issue 45): only the model can tell ----------


class _BuggyClient:
    """The sampler (the tiny model) behind a client with one bug: its answers keep their
    lengths and signs, so the store is self-consistent."""

    def __init__(self, policy, bug: str, tok, model) -> None:
        self.policy, self.bug, self.tok, self.model = policy, bug, tok, model
        self.previous: list[float] = []
        self.changed = 0

    async def __call__(self, observation, stop, *, max_tokens=None):
        out = await self.policy(observation, stop, max_tokens=max_tokens)
        tokens, logprobs = list(out.tokens), list(out.logprobs)
        if self.bug == "reencoded":  # the client re-tokenized the text it was sent
            tokens = self.tok.encode(self.tok.decode(tokens), add_special_tokens=False)
            logprobs = (logprobs + logprobs[-1:] * len(tokens))[: len(tokens)]
        elif self.bug == "copied" and self.previous:  # logprobs of the previous answer
            logprobs = (self.previous * len(tokens))[: len(tokens)]
        elif self.bug == "temperature":  # logprobs of the distribution at temperature 0.5
            logprobs = _logprobs_at(self.model, list(observation) + tokens, len(observation), 0.5)
        self.previous = list(out.logprobs)
        self.changed += tokens != list(out.tokens) or logprobs != list(out.logprobs)
        return TokensWithLogprobs(tokens, logprobs, out.stop_reason)


def _logprobs_at(model, sequence: list[int], start: int, temperature: float) -> list[float]:
    import torch

    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([sequence])).logits[0].float() / temperature
        logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[i - 1, sequence[i]]) for i in range(start, len(sequence))]


@pytest.fixture(scope="module")
def rescorer(run):
    return load_rescorer(str(run[3] / "model"))


@pytest.mark.parametrize("bug", ["reencoded", "copied", "temperature"])
def test_a_buggy_client_is_caught_by_rescore_in_every_form(run, rescorer, bug, tmp_path):
    """Each bug writes a self-consistent store (the checks without a model pass it); the
    rescore fails it in the store and in every hand-off form, naming a sampled token."""
    tok = run[0]
    model = build_tiny_model(tok, hidden_size=16, seed=1).eval()  # the run's own weights
    client = _BuggyClient(HFPolicy(model, tok, max_tokens=10, seed=7), bug, tok, model)
    store = collect_store(
        tok, "guess_number", tmp_path / "run.jsonl",
        overrides={"tasks": 1, "limits": LIMITS}, policy=client, group_size=2,
    )  # fmt: skip
    assert client.changed, "the bug changed nothing in this run"
    paths = write_forms(store, tmp_path, tok)
    assert check_file(store, tokenizer=tok).ok  # self-consistent: only the model can tell
    key = read_lines(store)[0]["key"]
    for form in ("store", "handoff", "verl", "tinker", "pytrio"):
        report = check_file(paths[form], tokenizer=tok, rescorer=rescorer)
        (found,) = _rescore(report)
        assert found.status == "fail", (form, found)
        assert found.where.startswith((f"group {key} traj ", "group 0 traj ")), found.where
        assert " sample " in found.where and " token " in found.where
