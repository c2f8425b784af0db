"""The env server's WebSocket fast path (``/v1/ws``) keeps the HTTP endpoints' guarantees:
bad token ids are a 422 naming the field before any environment code runs, a step sent
again after a lost answer is answered from the server's copy (played once), and the
answers are the HTTP ones."""

from __future__ import annotations

import json

import httpx
import pytest
from support.env_servers import thread_server
from websockets.asyncio.client import connect

from agentenvs.envs.serving.app import ServedEnvs, create_app
from agentenvs.rollout.tokenizer import load_tokenizer

TOKEN = "ws-token"


@pytest.fixture(scope="module")
def served():
    app = create_app(ServedEnvs(["guess_number"], load_tokenizer("builtin")), token=TOKEN)
    with thread_server(app) as url:
        yield url


def open_env(url: str) -> str:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = {"env": "guess_number", "group_size": 1, "index": 0}
    return httpx.post(f"{url}/v1/groups", json=body, headers=headers).json()["envs"][0]["env_id"]


async def test_steps_over_the_socket_are_checked_and_played_once(served):
    env_id = open_env(served)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with connect(f"ws{served[4:]}/v1/ws", additional_headers=headers) as socket:

        async def ask(ident: int, op: str, body=None) -> dict:
            await socket.send(json.dumps({"id": ident, "op": op, "env_id": env_id, "body": body}))
            reply = json.loads(await socket.recv())
            assert reply["id"] == ident
            return reply

        first = await ask(1, "initial_observation")
        assert "</guess>" in first["ok"]["stop_condition"]
        for bad, where in (([5, -1], "body.action.1"), ([2**63], "body.action.0")):
            refused = (await ask(2, "step", {"action": bad, "turn": 0}))["error"]
            assert refused["status"] == 422 and refused["detail"].startswith(where)
        assert (await ask(3, "step", {"action": [5], "turn": "x"}))["error"]["fields"] == [
            "body.turn"
        ]
        step = {"action": [5, 6], "stop_reason": "eos", "turn": 0}
        played = (await ask(4, "step", step))["ok"]
        again = (await ask(5, "step", step))["ok"]  # the answer was "lost": sent again
        assert again == played and played["turn"] == 0
        state = httpx.get(f"{served}/v1/envs/{env_id}", headers=headers).json()
        assert state["turns"] == 1  # played once
        ahead = (await ask(6, "step", {"action": [5], "turn": 3}))["error"]
        assert ahead["status"] == 409 and ahead["error"] == "out_of_order"


async def test_the_socket_needs_the_token(served):
    with pytest.raises(Exception):  # noqa: B017 - the handshake is refused (policy violation)
        async with connect(f"ws{served[4:]}/v1/ws") as socket:
            await socket.send("{}")
            await socket.recv()


async def test_a_batch_frame_is_answered_in_batches_each_call_by_its_id(served):
    """A client that sends an array gets arrays back; the calls of one batch keep the
    rules of single ones (checked bodies, a repeated step answered from the copy)."""
    env_id = open_env(served)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    step = {"action": [5, 6], "stop_reason": "eos", "turn": 0}
    batch = [
        {"id": 1, "op": "initial_observation", "env_id": env_id},
        {"id": 2, "op": "step", "env_id": env_id, "body": {"action": [-1], "turn": 0}},
        {"id": 3, "op": "step", "env_id": env_id, "body": step},
        {"id": 4, "op": "step", "env_id": env_id, "body": step},
        {"id": 5, "op": "nope", "env_id": env_id},
    ]
    async with connect(f"ws{served[4:]}/v1/ws", additional_headers=headers) as socket:
        await socket.send(json.dumps(batch))
        replies: dict[int, dict] = {}
        frames = 0
        while len(replies) < len(batch):
            frame = json.loads(await socket.recv())
            frames += 1
            assert isinstance(frame, list)  # a batching client is answered in batches
            replies.update({reply["id"]: reply for reply in frame})
    # Answers that finish together go out together (only a lone answer is written alone).
    assert frames < len(batch)
    assert "</guess>" in replies[1]["ok"]["stop_condition"]
    assert replies[2]["error"]["fields"] == ["body.action.0"]
    assert replies[3]["ok"] == replies[4]["ok"] and replies[3]["ok"]["turn"] == 0
    assert replies[5]["error"]["status"] == 422 and "op" in replies[5]["error"]["detail"]
    state = httpx.get(f"{served}/v1/envs/{env_id}", headers=headers).json()
    assert state["turns"] == 1  # the step sent twice was played once
