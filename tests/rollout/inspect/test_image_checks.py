"""``check`` on runs with images, and the same samples in Tinker, verl and TRL.

One charts run is collected through the HF policy on the tiny Qwen2-VL with the real
Qwen2.5 vocabulary (``support/vision_runs.py``: the oracle's actions, the model's own
logprobs and image stamps). It passes ``check``; each kind of image corruption a
converter or a hand edit makes fails it, naming where; and its samples reach each
trainer's own data structures with the pixels and placeholder counts the model used,
shown by the model's forward pass on the handed-off inputs reproducing the sampled
logprobs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from support.vision_runs import PAD, ForcedOracle, collect_charts, tiny_vlm_policy
from support.vocab import shared_vocabulary

from agentenvs.envs.vision.images import decode, png_bytes
from agentenvs.rollout.collect.image_files import ImageFiles
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore, read_store
from agentenvs.rollout.data.training_data import samples_from_records
from agentenvs.rollout.inspect.check import Check, check_file
from agentenvs.rollout.inspect.image_checks import check_handoff_images
from agentenvs.rollout.trainers.jsonl.handoff import read_samples_jsonl, write_samples_jsonl


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("images") / "charts.jsonl"
    result = collect_charts(ForcedOracle(tiny_vlm_policy()), store, groups=2, group_size=2)
    assert not result.failed, result.failed[0].error
    turns = [tr for r in result.ok for t in r.group.trajectories for tr in t.transitions]
    assert max(len(tr.images) for tr in turns) >= 2  # the tools' pictures are in the context
    return store


def copy_store(store: Path, target: Path) -> Path:
    target.write_bytes(store.read_bytes())
    files = ImageFiles(store).root
    for path in files.rglob("*.png"):
        destination = ImageFiles(target).root / path.relative_to(files)
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(path.read_bytes())
    return target


def failures(report, check: Check | None = None):
    return [
        f for f in report.findings if f.status == "fail" and (check is None or f.check == check)
    ]


def rewrite(store: Path, edit) -> None:
    """Edit the stored records as objects (as a converter would) and write them back."""
    records = read_store(store).records
    edit(records)
    store.unlink()
    writer = TrajectoryStore(store)
    for record in records:
        writer.append(record)


def first_image_turn(records: list[GroupRecord], minimum: int = 2):
    for record in records:
        for t, traj in enumerate(record.group.trajectories):
            for turn, tr in enumerate(traj.transitions):
                if len(tr.images) >= minimum:
                    return record, t, turn, traj
    raise AssertionError("no turn with enough images")


def test_the_run_passes_check(run):
    report = check_file(run, tokenizer=shared_vocabulary("qwen2.5"))
    assert report.ok, failures(report)
    details = " | ".join(f.detail for f in report.findings)
    assert "each placeholder run is its recorded count" in details
    assert "confirmed by the model itself" in details and "stored images decode" in details


@pytest.mark.parametrize("delta", [-1, 1], ids=["one-short", "one-long"])
def test_a_placeholder_run_one_short_or_long_fails(run, tmp_path, delta):
    store = copy_store(run, tmp_path / "run.jsonl")
    where = {}

    def edit(records):
        record, t, turn, traj = first_image_turn(records, minimum=1)
        image = traj.transitions[turn].images[0]
        where["at"] = f"group {record.key} traj {t} turn {turn}"
        for tr in traj.transitions[turn:]:  # every later context holds the same run
            tokens = list(tr.ob)
            if delta < 0:
                del tokens[image.offset]
            else:
                tokens.insert(image.offset, PAD)
            tr.ob = tokens

    rewrite(store, edit)
    report = check_file(store)
    found = [f for f in failures(report, Check.FIXED_TRAJECTORY) if "placeholder run" in f.detail]
    assert found and found[0].where == where["at"]
    assert f"is {16 + delta} long" in found[0].detail or "long; recorded" in found[0].detail


def test_a_recorded_count_that_follows_the_run_still_fails(run, tmp_path):
    """Run and count both one short (a converter that re-counted): the processor's count
    for that image and the model's own digest of the turn both disagree."""
    store = copy_store(run, tmp_path / "run.jsonl")

    def edit(records):
        _, _, turn, traj = first_image_turn(records, minimum=1)
        image = traj.transitions[turn].images[0]
        for tr in traj.transitions[turn:]:
            tokens = list(tr.ob)
            del tokens[image.offset]
            tr.ob = tokens
            tr.images = tuple(
                dataclasses.replace(p, tokens=p.tokens - 1) if p.offset == image.offset
                else (p.shifted(-1) if p.offset > image.offset else p)
                for p in tr.images
            )  # fmt: skip

    rewrite(store, edit)
    details = [f.detail for f in failures(check_file(store))]
    assert any("its processor gives" in d for d in details)


def test_an_image_swapped_between_turns_fails(run, tmp_path):
    store = copy_store(run, tmp_path / "run.jsonl")
    where = {}

    def edit(records):
        record, t, turn, traj = first_image_turn(records, minimum=2)
        first, second = traj.transitions[turn].images[:2]
        where["at"] = f"group {record.key} traj {t} turn {turn}"
        for tr in traj.transitions[turn:]:  # the chart and the crop trade places everywhere
            tr.images = tuple(
                dataclasses.replace(p, image=second.image if p.image == first.image else
                                    first.image if p.image == second.image else p.image)
                for p in tr.images
            )  # fmt: skip

    rewrite(store, edit)
    found = [f for f in failures(check_file(store)) if "not the ones" in f.detail]
    assert found and found[0].where == where["at"]


def test_an_image_re_derived_at_another_size_fails(run, tmp_path):
    store = copy_store(run, tmp_path / "run.jsonl")
    records = read_store(store).records
    _, _, turn, traj = first_image_turn(records, minimum=1)
    image = traj.transitions[turn].images[0].image
    path = ImageFiles(store).path_of(image.sha256)
    smaller = decode(path.read_bytes()).resize((image.width // 2, image.height // 2))
    path.write_bytes(png_bytes(smaller))  # a pipeline that resized before training
    found = [f for f in failures(check_file(store)) if "stored image" in f.detail]
    assert found and image.sha256 in found[0].where


def test_an_image_position_in_the_loss_fails_the_handoff(run, tmp_path):
    samples, _ = samples_from_records(read_store(run).latest())
    target = samples[0]
    position = target.images[0].offset + 2
    target.loss_mask[position] = 1
    handoff = tmp_path / "samples.jsonl"
    write_samples_jsonl(samples, handoff)
    report = check_file(handoff, reference=run)
    found = [f for f in failures(report, Check.LOSS_INPUTS) if "image position" in f.detail]
    assert found and found[0].where.endswith(f"token {position}")
    clean = samples_from_records(read_store(run).latest())[0]
    write_samples_jsonl(clean, handoff)
    assert read_samples_jsonl(handoff)[0].images == clean[0].images
    clean_report = check_file(handoff, reference=run)
    assert clean_report.ok, failures(clean_report)


# --------------------------------------------------------------------------- trainers


@pytest.fixture(scope="module")
def samples(run):
    made, _ = samples_from_records(read_store(run).latest())
    assert all(s.images for s in made) and all(s.has_logprobs for s in made)
    return made


def sampled_logprobs(sample, model_logprobs) -> tuple[list[float], list[float]]:
    """The model's logprobs on the sample's trained tokens, and the sampled ones."""
    trained = [i for i, m in enumerate(sample.loss_mask) if m]
    got = [float(model_logprobs[i - 1, sample.tokens[i]]) for i in trained]
    return got, [sample.logprobs[i] for i in trained]


def test_tinker_datums_equal_the_cookbooks_with_image_chunks(run, samples):
    from tinker_cookbook.rl.data_processing import trajectory_to_data

    from agentenvs.rollout.trainers.tinker.images import (
        received,
        to_cookbook_image_group,
        to_tinker_image_datums,
    )

    datums = to_tinker_image_datums(samples, run)
    assert check_handoff_images("tinker", [received(d) for d in datums], samples).status == "pass"
    records = read_store(run).latest()
    theirs = []
    for record in records:
        group = to_cookbook_image_group(record.group, run)
        for traj, advantage in zip(
            group.trajectories_G, record.extra.get("advantages") or [0.0] * 2, strict=True
        ):
            theirs += trajectory_to_data(traj, advantage)
    assert len(theirs) == len(datums)
    for ours, cookbook in zip(datums, theirs, strict=True):
        assert ours.model_input == cookbook.model_input  # the same chunks, images included
        for key in ("target_tokens", "logprobs", "advantages", "mask"):
            assert np.allclose(
                ours.loss_fn_inputs[key].to_numpy(), cookbook.loss_fn_inputs[key].to_numpy()
            ), key
    other = samples[0].images[0]
    tampered = [d for d in datums]
    chunk = next(c for c in tampered[0].model_input.chunks if c.type == "image")
    object.__setattr__(chunk, "data", ImageFiles(run).read(samples[0].images[-1].image.sha256))
    assert other.image.sha256 != samples[0].images[-1].image.sha256
    finding = check_handoff_images("tinker", [received(d) for d in tampered], samples)
    assert finding.status == "fail" and "tinker" in finding.detail


def test_verl_rows_carry_the_recorded_pixels_and_reproduce_the_logprobs(run, samples):
    from verl import DataProto

    from agentenvs.rollout.trainers.verl.handoff import to_tensordict, to_verl_batch
    from agentenvs.rollout.trainers.verl.images import (
        received,
        verl_image_fields,
        verl_position_ids,
    )

    tokenizer = shared_vocabulary("qwen2.5")
    batch = to_verl_batch(samples, tokenizer.pad_token_id)
    fields = verl_image_fields(samples, run)
    proto = DataProto(batch=to_tensordict(batch), non_tensor_batch=fields)
    assert check_handoff_images("verl", received(batch, fields, samples), samples).status == "pass"
    model = tiny_vlm_policy().sampler.model
    positions = verl_position_ids(batch, fields, model.model.get_rope_index, PAD)
    assert positions.shape == (len(samples), 4, batch["input_ids"].shape[1])
    for row, sample in enumerate(samples):
        inputs = proto.non_tensor_batch["multi_modal_inputs"][row]  # as verl's actor reads them
        ids, mask = batch["input_ids"][row : row + 1], batch["attention_mask"][row : row + 1]
        start = int((mask[0] == 0).sum())
        with torch.inference_mode():
            logits = model(
                input_ids=ids, attention_mask=mask,
                position_ids=positions[row : row + 1, 1:].transpose(0, 1),
                pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"],
                mm_token_type_ids=(ids == PAD).int(),
            ).logits[0, start:]  # fmt: skip
        got, want = sampled_logprobs(sample, torch.log_softmax(logits.float(), -1))
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-3


def test_trl_batch_split_by_trl_reproduces_the_logprobs(run, samples):
    from trl.trainer.utils import split_pixel_values_by_grid

    from agentenvs.rollout.trainers.trl.images import received, trl_image_batch

    batch = trl_image_batch(samples, run)
    assert batch["num_images"] == [len(s.images) for s in samples]
    assert check_handoff_images("trl", received(batch, samples), samples).status == "pass"
    split = split_pixel_values_by_grid(dict(batch))  # TRL's own per-sample cut
    model = tiny_vlm_policy().sampler.model
    for sample, pixels, grid in zip(
        samples, split["pixel_values"], split["image_grid_thw"], strict=True
    ):
        ids = torch.tensor([sample.tokens])
        with torch.inference_mode():
            logits = model(input_ids=ids, pixel_values=pixels, image_grid_thw=grid,
                           mm_token_type_ids=(ids == PAD).int()).logits[0]  # fmt: skip
        got, want = sampled_logprobs(sample, torch.log_softmax(logits.float(), -1))
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-3
    wrong = dict(batch, num_images=list(reversed(batch["num_images"])))
    if wrong["num_images"] != batch["num_images"]:
        assert check_handoff_images("trl", received(wrong, samples), samples).status == "fail"


def test_stored_lines_name_images_by_hash_only(run):
    line = json.loads(run.read_text().splitlines()[0])
    placements = [p for traj in line["trajectories"] for tr in traj["transitions"]
                  for p in tr.get("images", [])]  # fmt: skip
    assert placements and all(set(p) == {"offset", "tokens", "pad", "sha256", "width",
                                          "height", "grid", "processor"} for p in placements)  # fmt: skip
    assert any("image_prefix" in tr for traj in line["trajectories"] for tr in traj["transitions"])


def test_the_same_tokens_over_other_pixels_start_a_new_sample(run):
    """A context whose tokens extend the sample but whose picture changed is another
    context: the sample cutter starts a new sample there instead of merging."""
    from agentenvs.rollout.data.samples import trajectory_to_samples

    records = read_store(run).latest()
    _, _, turn, traj = first_image_turn(records, minimum=2)
    assert len(trajectory_to_samples(traj, 1.0)) == 1
    later = traj.transitions[turn]
    other = later.images[1].image
    later.images = (dataclasses.replace(later.images[0], image=other), *later.images[1:])
    cut = trajectory_to_samples(traj, 1.0)
    assert len(cut) == 2 and cut[1].images == list(later.images)


def test_replay_re_runs_the_chart_episodes_and_agrees(run):
    """charts declares deterministic episodes: ``check --replay`` makes each episode again
    from its record and steps it with the recorded actions (pictures and rewards equal)."""
    report = check_file(run, tokenizer=shared_vocabulary("qwen2.5"), replay=True)
    said = [f for f in report.findings if f.detail.startswith("replay")]
    assert said and all(f.status == "pass" for f in said), said
    assert report.ok, failures(report)


def test_replay_catches_a_reward_the_episode_never_gave(run, tmp_path):
    store = copy_store(run, tmp_path / "reward.jsonl")

    def edit(records):
        final = records[0].group.trajectories[0].transitions[-1]
        final.reward = final.reward + 0.5

    rewrite(store, edit)
    report = check_file(store, tokenizer=shared_vocabulary("qwen2.5"), replay=True)
    assert not report.ok
    assert any("replay" in f.detail for f in failures(report)), failures(report)


def test_replay_catches_pictures_the_env_never_showed(run, tmp_path):
    """The chart and its crop trade places and every witness is rewritten to match (a
    converter that re-derives its records): the record agrees with itself, so only a
    replay, which asks the env what it shows, can tell."""
    from agentenvs.envs.wire import placements_digest

    store = copy_store(run, tmp_path / "picture.jsonl")

    def edit(records):
        _, _, turn, traj = first_image_turn(records, minimum=2)
        first, second = traj.transitions[turn].images[:2]
        swap = {first.image: second.image, second.image: first.image}
        for tr in traj.transitions[turn:]:
            tr.images = tuple(dataclasses.replace(p, image=swap.get(p.image, p.image)) for p in tr.images)  # fmt: skip
            if tr.images:  # the collector's and the engine's witnesses alike
                for witness in ("images_seen", "policy/images"):
                    if witness in tr.logs:
                        tr.logs[witness] = placements_digest(tr.images)

    rewrite(store, edit)
    tokenizer = shared_vocabulary("qwen2.5")
    static = [
        f for f in failures(check_file(store, tokenizer=tokenizer)) if "not the ones" in f.detail
    ]
    assert not static, static  # the record agrees with itself
    report = check_file(store, tokenizer=tokenizer, replay=True)
    assert any("replay" in f.detail and "pictures" in f.detail for f in failures(report))
