"""Our environments as ORS environments (``agentenvs serve ENV --ors``), driven by the
``openreward`` SDK's own client (``AsyncEnvironmentsAPI`` sessions: ``/create_session``,
``/create``, SSE ``/call``, ``/delete``) against a real uvicorn server on 127.0.0.1, and
played back through our ORS adapter under the collector and ``agentenvs check``.

Each test compares what the client sees with the same task played in process, so a server
that renders, scores, ends or routes episodes wrongly fails here.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest
from support.env_servers import thread_server
from support.guess_number_play import Step, assert_plays_as_in_process, bisect

from agentenvs.envs.ors.sdk import load_sdk
from agentenvs.envs.registry import make
from agentenvs.envs.serving.run import build_app
from agentenvs.envs.types import TokensWithLogprobs
from agentenvs.rollout.collect.collector import CollectOptions, collect
from agentenvs.rollout.collect.store import TrajectoryStore
from agentenvs.rollout.inspect.check import check_file

load_sdk()
from openreward import AsyncEnvironmentsAPI  # noqa: E402
from openreward.api.errors import ToolCallError  # noqa: E402

pytestmark = pytest.mark.services
KEY = "ors-test-key"


@pytest.fixture(scope="module")
def served(tokenizer):
    app = build_app(["guess_number"], tokenizer, token=KEY, ors=True)
    with thread_server(app) as url:
        yield url


async def play(session) -> list[Step]:
    """One episode by bisection through the ``act`` tool; the steps as (text, reward, done)."""

    async def send(text: str) -> Step:
        out = await session.call_tool("act", {"text": text})
        return out.blocks[0].text, out.reward, out.finished

    return await bisect(send)


async def test_the_sdk_client_plays_guess_number_as_in_process(served):
    config = make("guess_number")
    api = AsyncEnvironmentsAPI(base_url=served, api_key=KEY)
    try:
        env = api.get("guess_number", variant="guess_number", base_url=served)
        assert await env.list_splits() == ["train", "test"]
        assert await env.num_tasks("train") == config.num_tasks("train")
        assert (await env.get_task("test", 2)).task_spec["task_id"] == "test/2"
        for task_index in (0, 7):
            async with env.session(split="train", index=task_index) as session:
                (tool,) = await session.list_tools()
                assert tool.name == "act" and tool.input_schema["required"] == ["text"]
                (prompt,) = await session.get_messages()
                assert (
                    prompt.blocks[0].text
                    == config.make_text_env(0).initial_messages()[-1]["content"]
                )
                assert prompt.detail["stop"] == ["</guess>"]
                await assert_plays_as_in_process(task_index, await play(session))
                with pytest.raises(ToolCallError) as refused:  # the SDK's latch, after finished
                    await session.call_tool("act", {"text": "<guess>1</guess>"})
                assert refused.value.reason == "episode_finished"
    finally:
        await api.aclose()


async def test_the_key_is_required_and_our_own_routes_still_answer(served):
    assert httpx.get(f"{served}/health").json()["status"] == "ok"  # open, for probes
    assert httpx.get(f"{served}/list_environments").status_code == 401
    listed = httpx.get(f"{served}/list_environments", headers={"X-API-Key": KEY})
    assert listed.json() == ["guess_number"]
    info = httpx.get(f"{served}/v1/info", headers={"Authorization": f"Bearer {KEY}"})
    assert info.json()["envs"] == ["guess_number"]
    wrong = httpx.post(f"{served}/create_session", headers={"X-API-Key": "nope"})
    assert wrong.status_code == 401


class ActBisector:
    """A model that plays guess_number through the ORS ``act`` tool (hermes calls),
    bisecting on the feedback that comes back as tool messages."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    async def __call__(self, ob, stop, *, max_tokens=None) -> TokensWithLogprobs:
        text = self.tokenizer.decode(ob)
        low, high = 1, 100
        guesses = [int(g) for g in re.findall(r"<guess>(\d+)</guess>\"", text)]
        hints = re.findall(r"go (higher|lower)", text)
        for guess, hint in zip(guesses, hints, strict=False):
            low, high = (guess + 1, high) if hint == "higher" else (low, guess - 1)
        call = {"name": "act", "arguments": {"text": f"<guess>{(low + high) // 2}</guess>"}}
        reply = f"<tool_call>{json.dumps(call)}</tool_call><|im_end|>"
        tokens = self.tokenizer.encode(reply, add_special_tokens=False)
        return TokensWithLogprobs(tokens, [-0.1] * len(tokens), "eos")


async def test_our_adapter_plays_our_ors_server_and_check_passes(served, tokenizer, tmp_path):
    config = make("ors", url=served, token=KEY, limits={"max_turns": 10})
    assert config.environment_name() == "guess_number" and config.num_tasks() == 64
    store = TrajectoryStore(tmp_path / "ors.jsonl")
    builders = [config.group_builder(i, 2, tokenizer) for i in (0, 3)]
    result = await collect(
        builders, ActBisector(tokenizer), CollectOptions(progress=False), store=store
    )
    assert len(result.ok) == 2, [r.error for r in result.failed]
    for record in result.ok:
        for trajectory in record.group.trajectories:
            assert trajectory.stop_reason == "completed"
            assert trajectory.transitions[-1].reward == 1.0
            log = json.loads(trajectory.transitions[0].logs["tool_calls"])
            assert log["declared"] == ["hermes"]
            assert [(a["name"], a["status"], a["outcome"]) for a in log["attempts"]] == [
                ("act", "ok", "ok")
            ]
    report = check_file(store.path, tokenizer=tokenizer)
    assert [f for f in report.findings if f.status == "fail"] == []


async def test_a_text_episode_whose_start_fails_holds_nothing_open():
    """The shared text-wire episode (ORS and OpenEnv servers) awaits the task's ``start``
    and, when it fails, closes the task and holds none: a served ``ors`` environment
    whose own ORS server is down refuses the next step instead of stepping a half-open
    task."""
    from support.env_servers import free_port

    from agentenvs.envs.ors.adapter import ORSUnreachable
    from agentenvs.envs.serving.text_episode import EpisodeRefused, TextEpisode

    config = make("ors", url=f"http://127.0.0.1:{free_port()}", environment="x", episodes=1)
    episode = TextEpisode(config)
    with pytest.raises(ORSUnreachable):
        await episode.start(0, "train")
    assert episode.task is None
    with pytest.raises(EpisodeRefused, match="start one first"):
        await episode.step("hi", "stop")
