"""Images through the wire format, the Ray hop and the store: by hash, delta-encoded, once."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from agentenvs.envs.types import (
    ImageObservation,
    ImagePlacement,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)
from agentenvs.envs.vision.images import ImageError, image_ref
from agentenvs.envs.wire import trajectory_from_json, trajectory_to_json
from agentenvs.rollout.collect.executors.wire import pack_group, unpack_group
from agentenvs.rollout.collect.image_files import ImageFiles
from agentenvs.rollout.collect.records import GroupRecord
from agentenvs.rollout.collect.store import TrajectoryStore, read_store

PAD = 9


def placement(offset: int, color: str) -> ImagePlacement:
    image = image_ref(Image.new("RGB", (28, 28), color))
    return ImagePlacement(offset, 1, PAD, image, (1, 2, 2), "qwen-vl patch_size=14")


def trajectory() -> Trajectory:
    red, blue = placement(1, "red"), placement(6, "blue")
    first = ImageObservation([1, PAD, 2], [red])
    second = ImageObservation([1, PAD, 2, 3, 4, 5, PAD, 2], [red, blue])
    ac = TokensWithLogprobs([3, 4], [-0.1, -0.2], "stop")
    return Trajectory(
        [
            Transition(list(first), ac, 0.0, False, images=first.images),
            Transition(
                list(second),
                TokensWithLogprobs([7], [-0.3], "eos"),
                1.0,
                True,
                images=second.images,
            ),
        ]
    )


def test_images_are_delta_encoded_by_hash_and_read_back():
    traj = trajectory()
    data = trajectory_to_json(traj)
    second = data["transitions"][1]
    assert second["image_prefix"] == 1 and len(second["images"]) == 1
    assert "data" not in second["images"][0]  # by hash, not bytes
    back = trajectory_from_json(json.loads(json.dumps(data)))
    assert [t.images for t in back.transitions] == [t.images for t in traj.transitions]
    assert back.transitions[1].images[0].image.data is None
    old = {k: v for k, v in data["transitions"][0].items() if k not in ("images", "image_prefix")}
    plain = trajectory_from_json({"transitions": [old]})  # a record written before images
    assert plain.transitions[0].images == ()
    data["transitions"][1]["image_prefix"] = 2
    with pytest.raises(ValueError, match="image_prefix 2"):
        trajectory_from_json(data)


def test_the_ray_hop_carries_the_pixels():
    group = TrajectoryGroup([trajectory()], [0.0], [{}])
    back = unpack_group(pack_group(group))
    placements = back.trajectories[0].transitions[1].images
    assert placements == trajectory().transitions[1].images
    assert all(p.image.data for p in placements)


def test_the_store_keeps_each_image_once_before_the_line_naming_it(tmp_path):
    store = TrajectoryStore(tmp_path / "run.jsonl")
    group = TrajectoryGroup([trajectory(), trajectory()], [0.0, 0.0], [{}, {}])
    store.append(GroupRecord("0:a", "test", "a", group))
    files = sorted((tmp_path / "run.jsonl.images").rglob("*.png"))
    assert len(files) == 2
    read = read_store(tmp_path / "run.jsonl").records[0]
    images = [p.image for tr in read.group.trajectories[0].transitions for p in tr.images]
    assert all(ImageFiles(store.path).ref(image).data for image in images)
    store.append(GroupRecord("1:a", "test", "a", read.group))  # read back, no bytes: files exist
    assert len(list((tmp_path / "run.jsonl.images").rglob("*.png"))) == 2
    other = TrajectoryStore(tmp_path / "elsewhere.jsonl")
    with pytest.raises(ImageError, match="nobody kept"):
        other.append(GroupRecord("0:a", "test", "a", read.group))
    assert not other.path.exists()  # the record naming missing pixels was not written
