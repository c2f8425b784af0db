"""``agentenvs check`` for images: every placeholder run, count, hash and pixel, per turn.

A trajectory that shows images carries three facts per image (where its placeholder
run starts, how long it is, which pixels it stands for) and one recorded fact about
the processor (its settings, from which its grid and count follow). What goes wrong
in the field is each of these drifting from the others: a run one placeholder short
or long (a template or converter that expands twice, or not at all), an image moved
to another turn, a picture re-derived at another size before training. So, per turn:

* the placeholder runs in the tokens are exactly the recorded ones (no run a token
  short or long, no stray placeholder id), and each recorded count equals the one the
  recorded processor settings give an image of the recorded size;
* the placements equal what the policy was shown: the collector's ``images_seen``
  digest and, from a model policy, ``policy/images``, the digest of what the engine or
  model itself was given (runs found in the tokens it got, hashes of the pixels it
  decoded);
* every stored image decodes to the pixels its name says, at the recorded size;
* in training samples, no image position carries loss, advantage or logprob, and a
  hand-off's images (count and pixel hash, per sample) are the store's.

The checks read records and samples only; they return no finding at all for data
without images, so text runs report exactly as before.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from pathlib import Path

from agentenvs.envs.types import ImagePlacement, Transition
from agentenvs.envs.vision.images import ImageError
from agentenvs.envs.vision.processing import VisionSpec, VisionSpecError
from agentenvs.envs.vision.render import placeholder_runs
from agentenvs.envs.wire import IMAGES_SEEN_LOG, placements_digest
from agentenvs.rollout.collect.image_files import ImageFiles
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.data.samples import TrainingSample
from agentenvs.rollout.inspect.findings import Check, Finding
from agentenvs.rollout.inspect.sample_checks import _store_samples

ENGINE_WITNESS = "policy/images"
COLLECTOR_WITNESS = IMAGES_SEEN_LOG

Turn = tuple[str, Transition]
"""A turn with images and where it is (``group K traj T turn N``)."""


def image_turns(records: Sequence[GroupRecord]) -> Iterator[Turn]:
    for record in records:
        for t, traj in enumerate(record.group.trajectories if record.group else []):
            for turn, tr in enumerate(traj.transitions):
                if tr.images:
                    yield f"group {record.key} traj {t} turn {turn}", tr


def check_images(records: Sequence[GroupRecord], store: str | Path | None) -> list[Finding]:
    """Every image check on a store's records (none for a store without images)."""
    turns = list(image_turns(records))
    if not turns:
        return []
    return [
        check_placeholder_runs(turns),
        check_witnesses(turns),
        check_stored_pixels([p for _, tr in turns for p in tr.images], store),
    ]


@functools.cache
def _spec(key: str) -> VisionSpec:
    return VisionSpec.from_key(key)


def derived_count(placement: ImagePlacement) -> tuple[tuple[int, int, int], int]:
    """The grid and count the recorded processor settings give an image of the recorded
    size (``VisionSpecError`` for settings that cannot be read)."""
    spec = _spec(placement.processor)
    grid = spec.grid(placement.image.width, placement.image.height)
    return grid, spec.tokens(grid)


def run_problem(tokens: Sequence[int], images: Sequence[ImagePlacement]) -> str | None:
    """What is wrong with the placeholder runs of ``tokens`` against ``images``, if anything."""
    pads = sorted({p.pad for p in images})
    for pad in pads:
        runs = placeholder_runs(list(tokens), pad)
        expected = [(p.offset, p.tokens) for p in images if p.pad == pad]
        if runs == expected:
            continue
        for index, (got, want) in enumerate(zip(runs, expected, strict=False)):
            if got != want:
                return (
                    f"image {index}: the placeholder run at token {got[0]} is {got[1]} long; "
                    f"recorded: {want[1]} from token {want[0]}"
                )
        if len(runs) > len(expected):
            extra = runs[len(expected)]
            return f"a placeholder run no image records, {extra[1]} long at token {extra[0]}"
        return f"{len(expected)} images recorded, {len(runs)} placeholder runs in the tokens"
    return None


def count_problem(placement: ImagePlacement) -> str | None:
    try:
        grid, count = derived_count(placement)
    except (VisionSpecError, ValueError) as err:
        return f"unreadable processor settings {placement.processor!r}: {err}"
    if grid != placement.grid or count != placement.tokens:
        image = placement.image
        return (
            f"image {image.sha256[:12]} ({image.width}x{image.height}) records {placement.tokens} "
            f"positions (grid {placement.grid}); its processor gives {count} (grid {grid})"
        )
    return None


def check_placeholder_runs(turns: Sequence[Turn]) -> Finding:
    images = 0
    for where, tr in turns:
        problem = run_problem(tr.ob, tr.images)
        if problem is None:
            problem = next((p for p in map(count_problem, tr.images) if p), None)
        if problem is not None:
            return Finding(Check.FIXED_TRAJECTORY, "fail", problem, where)
        images += len(tr.images)
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"{images} image placements in {len(turns)} turns: each placeholder run is its "
        "recorded count, which its processor gives an image of its size",
    )


def check_witnesses(turns: Sequence[Turn]) -> Finding:
    """The stored placements against what the collector and the model were shown."""
    engine = unwitnessed = 0
    for where, tr in turns:
        digest = placements_digest(tr.images)
        seen = tr.logs.get(COLLECTOR_WITNESS)
        given = tr.logs.get(ENGINE_WITNESS)
        if seen is not None and seen != digest:
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                "the stored images of this turn are not the ones the collector passed to the "
                f"policy (placements digest {digest}, recorded {seen})",
                where,
            )
        if given is not None and given != digest:
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                "the stored images of this turn are not the ones the model was given "
                f"(placements digest {digest}, the engine's {given})",
                where,
            )
        engine += given is not None
        unwitnessed += seen is None and given is None
    if unwitnessed:
        return Finding(
            Check.FIXED_TRAJECTORY,
            "warn",
            f"{unwitnessed} of {len(turns)} image turns record no digest of what the policy "
            "was shown (not compared)",
        )
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"{len(turns)} image turns are what the policy was shown; {engine} of them "
        "confirmed by the model itself (policy/images)",
    )


def check_stored_pixels(placements: Sequence[ImagePlacement], store: str | Path | None) -> Finding:
    """Each distinct image the records name decodes, from beside the store, to the
    pixels and size recorded."""
    if store is None:
        return Finding(Check.FIXED_TRAJECTORY, "skip", "no store folder to read the images from")
    files = ImageFiles(store)
    distinct = {p.image.sha256: p.image for p in placements}
    for image in distinct.values():
        try:
            files.ref(image, verify=True)
        except ImageError as err:
            return Finding(
                Check.FIXED_TRAJECTORY, "fail", f"stored image: {err}", f"image {image.sha256}"
            )
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"{len(distinct)} stored images decode to the pixels and sizes their records name",
    )


# ----------------------------------------------------------------------------- samples


def trained_image_position(sample: TrainingSample) -> int | None:
    """The first image position that carries loss, advantage or logprob, if any."""
    for placement in sample.images:
        for position in range(max(0, placement.offset - 1), min(len(sample), placement.end + 1)):
            if (
                sample.loss_mask[position]
                or sample.advantages[position]
                or sample.logprobs[position]
            ):
                return position
    return None


def check_sample_images(
    samples: Sequence[TrainingSample],
    keys: Sequence[str] | None = None,
    store: str | Path | None = None,
) -> list[Finding]:
    """Training samples: runs against placements, counts against the processor, no
    image position trained (nor its vision start and end tokens), the pixels beside
    ``store`` (the store the samples came from). None for samples without images."""
    shown = [(i, s) for i, s in enumerate(samples) if s.images]
    if not shown:
        return []

    def where(i: int, sample: TrainingSample) -> str:
        key = f"group {keys[i]} " if keys else f"group {sample.group_index} "
        return f"{key}traj {sample.traj_index} sample {sample.sample_index}"

    runs = Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"{sum(len(s.images) for _, s in shown)} images in {len(shown)} samples: each "
        "placeholder run is its recorded, processor-derived count",
    )
    trained = Finding(
        Check.LOSS_INPUTS, "pass", f"no image position trained in {len(shown)} samples"
    )
    for i, sample in shown:
        problem = run_problem(sample.tokens, sample.images) or next(
            (p for p in map(count_problem, sample.images) if p), None
        )
        if problem is not None and runs.status == "pass":
            runs = Finding(Check.FIXED_TRAJECTORY, "fail", problem, where(i, sample))
        position = trained_image_position(sample)
        if position is not None and trained.status == "pass":
            trained = Finding(
                Check.LOSS_INPUTS,
                "fail",
                "an image position (its placeholder run or vision markup) carries loss, "
                "advantage or logprob",
                f"{where(i, sample)} token {position}",
            )
    placements = [p for _, s in shown for p in s.images]
    return [runs, trained, check_stored_pixels(placements, store)]


def sample_images_signature(sample: TrainingSample) -> list[tuple[int, int, str]]:
    """What a trainer must receive for a sample's images: (offset, count, pixel hash)."""
    return [(p.offset, p.tokens, p.image.sha256) for p in sample.images]


def check_handoff_images(
    trainer: str,
    received: Sequence[Sequence[tuple[int, int, str]]],
    samples: Sequence[TrainingSample],
) -> Finding:
    """A hand-off's images against the samples it was made from: per sample, each image's
    offset, placeholder count and pixel hash as the trainer will feed them (decoded from
    what the hand-off holds: PNG bytes, PIL images, pixel tensors' grids)."""
    if len(received) != len(samples):
        return Finding(
            Check.FIXED_TRAJECTORY,
            "fail",
            f"{trainer}: {len(received)} samples handed off for {len(samples)}",
        )
    for index, (got, sample) in enumerate(zip(received, samples, strict=True)):
        want = sample_images_signature(sample)
        if list(map(tuple, got)) != want:
            return Finding(
                Check.FIXED_TRAJECTORY,
                "fail",
                f"{trainer}: images (offset, count, pixel hash) {list(got)[:3]} where the "
                f"store has {want[:3]}",
                f"sample {index} (group {sample.group_index} traj {sample.traj_index})",
            )
    images = sum(len(s.images) for s in samples)
    return Finding(
        Check.FIXED_TRAJECTORY,
        "pass",
        f"{trainer}: {images} images in {len(samples)} samples carry the store's pixels and counts",
    )


def check_samples_images_against_store(
    samples: Sequence[TrainingSample], records: Sequence[GroupRecord]
) -> Finding | None:
    """A samples hand-off's images against the samples its store cuts into (None when
    neither shows images)."""
    derived = _store_samples(records, None)
    if not any(s.images for s in samples) and not any(s.images for s in derived.values()):
        return None
    wanted = [derived.get((s.group_index, s.traj_index, s.sample_index)) for s in samples]
    if any(w is None for w in wanted):
        return None  # a sample the store does not hold: check_samples_against_store says so
    received = [sample_images_signature(s) for s in samples]
    return check_handoff_images("hand-off", received, wanted)  # type: ignore[arg-type]


def sample_image_findings(
    samples: Sequence[TrainingSample],
    reference: str | Path | None,
    records: Sequence[GroupRecord] | None,
) -> list[Finding]:
    """Everything ``check`` says about a samples file's images: the samples themselves,
    the pixels beside the store named by ``reference``, the store's own images."""
    findings = check_sample_images(samples, store=reference)
    if records is not None:
        against = check_samples_images_against_store(samples, records)
        findings += [against] if against is not None else []
    return findings
