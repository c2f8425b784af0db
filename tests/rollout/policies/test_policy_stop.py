"""The one split of a stop condition into strings and token ids, shared by every sampler."""

from __future__ import annotations

from agentenvs.envs.types import StopCondition
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.policies.stop import StopSplit, split_stop
from agentenvs.rollout.policies.wire_dialects import TurnRequest


def test_split_keeps_strings_and_ids_in_order() -> None:
    assert split_stop(["</a>", 7, "</b>", 3]) == StopSplit(["</a>", "</b>"], [7, 3])


def test_bool_is_not_a_token_id() -> None:
    """``True`` is an ``int`` in Python but not token 1: the bool-accepting variant fails here."""
    split = split_stop([True, False, 5, "x"])
    assert split.ids == [5]
    assert split.strings == ["x"]
    assert all(type(i) is int for i in split.ids)


def test_other_types_are_dropped() -> None:
    assert split_stop([None, 1.5, b"x", 2]) == StopSplit([], [2])


def test_empty_condition() -> None:
    assert split_stop([]) == StopSplit([], [])


def test_vllm_and_sglang_bodies_send_no_bool_id() -> None:
    """Both HTTP bodies go through the shared split (the drifted copies accepted ``True``)."""
    vllm = OpenAICompatPolicy("http://127.0.0.1:1", api="vllm")
    body = vllm.wire.body(_turn([1, 2], [True, 9, "</s>"]))
    assert body["stop_token_ids"] == [9]
    assert body["stop"] == ["</s>"]
    sglang = OpenAICompatPolicy("http://127.0.0.1:1", api="sglang")
    params = sglang.wire.body(_turn([1, 2], [True, 9, "</s>"]))["sampling_params"]
    assert params["stop_token_ids"] == [9]
    assert params["stop"] == ["</s>"]
    assert "stop_token_ids" not in vllm.wire.body(_turn([1], [True]))


def _turn(prompt: list[int], stop: StopCondition) -> TurnRequest:
    return TurnRequest(prompt, stop, max_tokens=4, temperature=1.0, top_p=1.0)


def test_request_fields_leave_out_an_empty_kind() -> None:
    assert split_stop(["</s>", 4, True]).request_fields() == {
        "stop": ["</s>"],
        "stop_token_ids": [4],
    }
    assert split_stop([7]).request_fields() == {"stop_token_ids": [7]}
    assert split_stop([True]).request_fields() == {}
