"""The env server's endpoints on a real uvicorn on loopback: answers, refusals, token,
idle timeout, and a client that leaves mid-step."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from support.env_servers import thread_server

from agentenvs.envs.guess_number import GuessNumberConfig, GuessNumberEnv
from agentenvs.envs.serving.app import ServedEnvs, create_app
from agentenvs.envs.serving.sessions import SessionLimits
from agentenvs.envs.text import TextEnv, TextStep
from agentenvs.rollout.tokenizer import load_tokenizer

pytestmark = pytest.mark.services

GROUP = {"env": "guess_number", "group_size": 2, "n_groups": 3, "index": 1}


class SlowGuessEnv(GuessNumberEnv):
    """guess_number whose step waits for the test's ``release`` (a slow engine); it
    counts the steps it really played."""

    entered = threading.Event()
    release = threading.Event()
    played = 0

    async def step(self, action_text: str, *, stop_reason) -> TextStep:  # type: ignore[override]
        SlowGuessEnv.entered.set()
        while not SlowGuessEnv.release.is_set():
            await asyncio.sleep(0.01)
        SlowGuessEnv.played += 1
        return await super().step(action_text, stop_reason=stop_reason)


class SlowGuessConfig(GuessNumberConfig):
    """A config class hosted by name, not registered (ServedEnvs.classes)."""

    def make_text_env(self, task_index: int, split: str = "train") -> TextEnv:
        return SlowGuessEnv(self.secret(task_index, split), self.low, self.high)


@pytest.fixture(scope="module")
def builtin():
    return load_tokenizer("builtin")


def _app(builtin, **kwargs):
    served = ServedEnvs(["guess_number", "slow_guess"], builtin,
                        classes={"slow_guess": SlowGuessConfig})  # fmt: skip
    return create_app(served, kwargs.pop("limits", None), **kwargs)


@pytest.fixture(scope="module")
def server(builtin):
    with thread_server(_app(builtin)) as url:
        yield url


def _open(client: httpx.Client, **changes) -> dict:
    answer = client.post("/v1/groups", json={**GROUP, **changes})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _play_to_the_end(client: httpx.Client, env_id: str) -> int:
    client.post(f"/v1/envs/{env_id}/initial_observation").raise_for_status()
    for turn in range(20):
        action = client.post(f"/v1/envs/{env_id}/scripted_action", json={}).json()["answer"]
        step = client.post(f"/v1/envs/{env_id}/step",
                           json={"action": action["tokens"], "turn": turn}).json()  # fmt: skip
        if step["episode_done"]:
            return turn + 1
    raise AssertionError("the oracle did not finish in 20 turns")


def test_a_group_opens_plays_scores_and_closes(server, builtin) -> None:
    with httpx.Client(base_url=server) as client:
        described = client.post("/v1/datasets", json={k: v for k, v in GROUP.items()
                                                       if k != "index"}).json()  # fmt: skip
        assert [g["task_id"] for g in described["groups"]] == ["train/0", "train/1", "train/2"]
        group = _open(client)
        assert len(group["envs"]) == 2
        env_id = group["envs"][0]["env_id"]
        first = client.post(f"/v1/envs/{env_id}/initial_observation").json()
        local = GuessNumberConfig().make_env(1, builtin)
        ob, stop = asyncio.run(local.initial_observation())
        assert first["observation"] == ob and first["stop_condition"] == stop
        turns = _play_to_the_end(client, env_id)
        assert turns >= 1
        health = client.get("/health").json()
        assert health["groups"] >= 1
        assert client.delete(f"/v1/groups/{group['group_id']}").status_code == 200
        metrics = client.get("/metrics").text
        assert 'agentenvs_env_requests_total{route="/v1/envs/{env_id}/step"}' in metrics


def test_refusals_name_what_is_wrong(server) -> None:
    with httpx.Client(base_url=server) as client:
        bad = client.post("/v1/groups", json={**GROUP, "group_size": 0})
        assert bad.status_code == 422 and "body.group_size" in bad.json()["detail"]
        missing = client.post("/v1/groups", json={"env": "guess_number", "index": 0})
        assert missing.status_code == 422 and "body.group_size" in missing.json()["detail"]
        key = client.post("/v1/groups", json={**GROUP, "config": {"bogus": 1}})
        assert key.status_code == 422 and "bogus" in key.json()["detail"]
        split = client.post("/v1/groups", json={**GROUP, "split": "nope"})
        assert split.status_code == 422 and "split" in split.json()["detail"]
        past = client.post("/v1/groups", json={**GROUP, "index": 3})
        assert past.status_code == 422 and "body.index" in past.json()["detail"]
        unserved = client.post("/v1/groups", json={**GROUP, "env": "retool"})
        assert unserved.status_code == 404 and unserved.json()["error"] == "unknown_env"
        ghost = client.post("/v1/envs/e-0000/step", json={"action": [1], "turn": 0})
        assert ghost.status_code == 404 and ghost.json()["error"] == "unknown_session"
        env_id = _open(client)["envs"][0]["env_id"]
        early = client.post(f"/v1/envs/{env_id}/step", json={"action": [1], "turn": 0})
        assert early.status_code == 409 and "initial_observation" in early.json()["detail"]
        turns = _play_to_the_end(client, env_id)
        over = client.post(f"/v1/envs/{env_id}/step", json={"action": [5], "turn": turns})
        assert over.status_code == 409 and over.json()["error"] == "finished"
        other = _open(client)["envs"][0]["env_id"]
        client.post(f"/v1/envs/{other}/initial_observation").raise_for_status()
        skipped = client.post(f"/v1/envs/{other}/step", json={"action": [5], "turn": 3})
        assert skipped.status_code == 409 and "body.turn" in skipped.json()["detail"]


@pytest.mark.parametrize("token_id", [-1, 2**63, 10**30])
def test_a_token_id_no_tokenizer_has_is_a_422_naming_the_field(server, token_id) -> None:
    """Before: a negative or past-int64 id reached the env's decoder and came back as a
    500 ``env_error`` blamed on the environment (issue 46)."""
    with httpx.Client(base_url=server) as client:
        env_id = _open(client)["envs"][0]["env_id"]
        client.post(f"/v1/envs/{env_id}/initial_observation").raise_for_status()
        bad = client.post(f"/v1/envs/{env_id}/step", json={"action": [5, token_id], "turn": 0})
        assert bad.status_code == 422, bad.text
        assert bad.json()["fields"] == ["body.action.1"] and bad.json()["error"] == "bad_request"
        # Nothing was played: the same turn still takes a real action.
        action = client.post(f"/v1/envs/{env_id}/scripted_action", json={}).json()["answer"]
        good = client.post(f"/v1/envs/{env_id}/step", json={"action": action["tokens"], "turn": 0})
        assert good.status_code == 200


def test_a_step_sent_twice_is_played_once(server) -> None:
    with httpx.Client(base_url=server) as client:
        env_id = _open(client)["envs"][0]["env_id"]
        client.post(f"/v1/envs/{env_id}/initial_observation").raise_for_status()
        action = client.post(f"/v1/envs/{env_id}/scripted_action", json={}).json()["answer"]
        body = {"action": action["tokens"], "turn": 0}
        first = client.post(f"/v1/envs/{env_id}/step", json=body).json()
        again = client.post(f"/v1/envs/{env_id}/step", json=body).json()
        assert again == first
        assert client.get(f"/v1/envs/{env_id}").json()["turns"] == 1


def test_the_bearer_token_is_required_except_for_health(builtin) -> None:
    with thread_server(_app(builtin, token="s3cret")) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.get(f"{url}/v1/info").status_code == 401
        wrong = httpx.get(f"{url}/v1/info", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"] == "Bearer"
        right = httpx.get(f"{url}/v1/info", headers={"Authorization": "Bearer s3cret"})
        assert right.status_code == 200 and right.json()["envs"] == ["guess_number", "slow_guess"]


def test_an_idle_group_is_closed_and_says_so(builtin) -> None:
    limits = SessionLimits(idle_timeout=0.3)
    with thread_server(_app(builtin, limits=limits)) as url, httpx.Client(base_url=url) as client:
        env_id = _open(client)["envs"][0]["env_id"]
        kept = _open(client)["envs"][0]["env_id"]
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # the other group stays in use
            client.get(f"/v1/envs/{kept}").raise_for_status()
            time.sleep(0.05)
        gone = client.post(f"/v1/envs/{env_id}/initial_observation")
        assert gone.status_code == 404
        assert "idle timeout" in gone.json()["detail"]
        assert client.post(f"/v1/envs/{kept}/initial_observation").status_code == 200
        assert "agentenvs_env_groups_expired_total 1" in client.get("/metrics").text


def test_too_many_groups_is_a_429(builtin) -> None:
    app = _app(builtin, limits=SessionLimits(max_groups=1))
    with thread_server(app) as url, httpx.Client(base_url=url) as client:
        _open(client)
        refused = client.post("/v1/groups", json=GROUP)
        assert refused.status_code == 429 and "max_groups=1" in refused.json()["detail"]


def test_a_client_that_leaves_mid_step_loses_nothing(server) -> None:
    with httpx.Client(base_url=server) as client:
        env_id = _open(client, env="slow_guess")["envs"][0]["env_id"]
        client.post(f"/v1/envs/{env_id}/initial_observation").raise_for_status()
        action = client.post(f"/v1/envs/{env_id}/scripted_action", json={}).json()["answer"]
        body = {"action": action["tokens"], "turn": 0}
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and disconnects
            client.post(f"/v1/envs/{env_id}/step", json=body, timeout=0.2)
        assert SlowGuessEnv.entered.wait(timeout=30), "the step never reached the env"
        SlowGuessEnv.release.set()  # the engine finishes after its client left
        deadline = time.monotonic() + 30
        state = client.get(f"/v1/envs/{env_id}").json()
        while state["turns"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
            state = client.get(f"/v1/envs/{env_id}").json()
        assert state["turns"] == 1 and state["last_answer"] is not None
        again = client.post(f"/v1/envs/{env_id}/step", json=body).json()
        assert again == state["last_answer"]
        assert SlowGuessEnv.played == 1  # answered from the kept copy, not played twice


def test_per_session_limits_refuse_with_their_name(builtin) -> None:
    limits = SessionLimits(max_envs_per_group=2, max_steps_per_env=1)
    app = _app(builtin, limits=limits)
    with thread_server(app) as url, httpx.Client(base_url=url) as client:
        env_id = _open(client)["envs"][0]["env_id"]  # group_size 2: the group is full
        client.post(f"/v1/envs/{env_id}/initial_observation").raise_for_status()
        fork = client.post(f"/v1/envs/{env_id}/fork")
        assert fork.status_code == 429 and "max_envs_per_group=2" in fork.json()["detail"]
        wrong = builtin.encode("<guess>0</guess>", add_special_tokens=False)
        first = client.post(f"/v1/envs/{env_id}/step", json={"action": wrong, "turn": 0})
        assert first.status_code == 200 and not first.json()["episode_done"]
        second = client.post(f"/v1/envs/{env_id}/step", json={"action": wrong, "turn": 1})
        assert second.status_code == 409 and "max_steps_per_env" in second.json()["detail"]
