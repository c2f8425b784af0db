"""Groups of a served environment: builders and a dataset over one or more env servers.

:meth:`RemoteDataset.open` asks the servers for the dataset's group descriptions
(task ids, config, split, size) and checks that every server that answers says the
same and renders with this process's tokenizer, so a record of a remote group is
the record the same group would have in process. Groups are spread over the
servers round-robin; a group whose server cannot be reached when it opens goes to
the next one, and a group whose server dies mid-episode fails that attempt with
:class:`~agentenvs.envs.remote.client.ServerUnavailable` (transient: the collector
retries it with fresh envs, on a server that answers, and records why otherwise).

Builders hold configuration only (URLs, the dataset request, the description), so
they pickle to Ray actors; the connection is made in :meth:`make_envs`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.errors import TransientError
from agentenvs.envs.remote.client import (
    DEFAULT_TIMEOUT,
    RemoteEnvError,
    RemoteTransientError,
    ServerConnection,
    ServerUnavailable,
    call_sync,
)
from agentenvs.envs.remote.env import RemoteEnv
from agentenvs.envs.types import (
    Env,
    EnvGroupBuilder,
    GroupDescription,
    ListDataset,
    Metrics,
    Trajectory,
)

logger = logging.getLogger(__name__)


@dataclass
class RemoteGroupBuilder(EnvGroupBuilder):
    """Group ``index`` of a served dataset (see the module docstring)."""

    servers: tuple[str, ...]
    request: dict[str, Any]
    index: int
    description: dict[str, Any]
    tokenizer: Any = None
    token: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    call_retries: int = 2
    served_by: str | None = None
    """The server the last :meth:`make_envs` opened the group on."""
    _connection: ServerConnection | None = field(default=None, repr=False)
    _group_id: str | None = field(default=None, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_connection"], state["_group_id"] = None, None  # live sessions do not travel
        return state

    def _rotation(self) -> list[str]:
        start = self.index % len(self.servers)
        return [*self.servers[start:], *self.servers[:start]]

    async def make_envs(self) -> Sequence[Env]:
        await self.cleanup()  # a retry opens a fresh group
        refused: list[str] = []
        for url in self._rotation():
            connection = ServerConnection(url, self.token, self.timeout, self.call_retries)
            try:
                data = await connection.call(
                    "POST", "/v1/groups", {**self.request, "index": self.index}, what="open group"
                )
            except (ServerUnavailable, RemoteTransientError) as err:
                await connection.aclose()
                refused.append(str(err))
                continue
            except BaseException:
                await connection.aclose()
                raise
            self._connection, self._group_id, self.served_by = connection, data["group_id"], url
            return [RemoteEnv(connection, entry) for entry in data["envs"]]
        raise ServerUnavailable(
            f"no env server could open group {self.index}: " + "; ".join(refused)
        )

    async def compute_group_rewards(
        self, trajectories: list[Trajectory], envs: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        from agentenvs.envs.wire import trajectory_to_json

        if self._connection is None or self._group_id is None:
            raise RemoteEnvError("compute_group_rewards before make_envs: no group is open")
        ids = []
        for env in envs:
            if not isinstance(env, RemoteEnv):
                raise RemoteEnvError(f"{type(env).__name__} is not an env of this remote group")
            ids.append(env.env_id)
        body = {"env_ids": ids, "trajectories": [trajectory_to_json(t) for t in trajectories]}
        data = await self._connection.call(
            "POST", f"/v1/groups/{self._group_id}/rewards", body, what="compute_group_rewards"
        )
        return [(reward, dict(metrics)) for reward, metrics in data["rewards"]]

    def logging_tags(self) -> list[str]:
        return list(self.description.get("logging_tags") or [])

    def describe(self) -> GroupDescription:
        d = self.description
        return GroupDescription(
            task_id=d.get("task_id"),
            env_name=d.get("env_name") or self.request["env"],
            config=dict(d.get("config") or {}),
            split=d.get("split"),
            group_size=d.get("group_size"),
            tokenizer=self.tokenizer,
            env_version=d.get("env_version"),
            renderer=d.get("renderer"),
            protocol=d.get("protocol"),
            tool_format=d.get("tool_format"),
            data=dict(d.get("data") or {}),
        )

    async def cleanup(self) -> None:
        connection, group_id = self._connection, self._group_id
        self._connection, self._group_id = None, None
        if connection is None:
            return
        try:
            if group_id is not None:
                await connection.call("DELETE", f"/v1/groups/{group_id}", what="close group")
        except (TransientError, RemoteEnvError) as err:  # a dead server holds nothing more
            logger.debug("closing remote group %s: %s", group_id, err)
        finally:
            with contextlib.suppress(Exception):
                await connection.aclose()


@dataclass
class RemoteDataset(ListDataset):
    """The groups of a served environment, cut into batches as :class:`ListDataset` cuts."""

    builders: list[RemoteGroupBuilder]  # type: ignore[assignment]
    batch_size: int = 1

    @classmethod
    def open(
        cls,
        servers: str | Sequence[str],
        env: str,
        *,
        group_size: int,
        config: Mapping[str, Any] | None = None,
        split: str = "train",
        n_groups: int | None = None,
        tokenizer: Any = None,
        token: str | None = None,
        batch_size: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
        call_retries: int = 2,
    ) -> RemoteDataset:
        """Ask the servers for the dataset (see the module docstring); blocking.

        ``call_retries``: quick retries of a request the network lost, before the
        server counts as unreachable (0 for a test that kills servers)."""
        urls = tuple(server_urls(servers))
        request = {"env": env, "config": dict(config or {}), "split": split,
                   "group_size": group_size, "n_groups": n_groups}  # fmt: skip
        answers: dict[str, Any] = {}
        down: list[str] = []
        for url in urls:
            try:
                answers[url] = call_sync(
                    url, "POST", "/v1/datasets", request, what="dataset", token=token,
                    timeout=timeout,
                )  # fmt: skip
            except ServerUnavailable as err:
                down.append(str(err))
        if not answers:
            raise ServerUnavailable("no env server answered: " + "; ".join(down))
        for message in down:
            logger.warning("%s; its groups go to the others while it is down", message)
        first_url, first = next(iter(answers.items()))
        for url, answer in answers.items():
            if answer["groups"] != first["groups"]:
                raise RemoteEnvError(f"env servers {first_url} and {url} describe different "
                                     f"groups for {env!r}: are they the same version?")  # fmt: skip
            _check_tokenizer(url, answer.get("tokenizer"), tokenizer)
        builders = [
            RemoteGroupBuilder(
                urls, request, i, description, tokenizer, token, timeout, call_retries
            )
            for i, description in enumerate(first["groups"])
        ]
        return cls(builders, batch_size)


def server_urls(servers: str | Sequence[str]) -> list[str]:
    """``"http://a:1,http://b:2"`` or a list of them: each URL once, in order."""
    items = [servers] if isinstance(servers, str) else list(servers)
    urls = [u.strip().rstrip("/") for item in items for u in item.split(",") if u.strip()]
    if not urls:
        raise ValueError("no env server URL given")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"env server URL {url!r} must start with http:// or https://")
    return list(dict.fromkeys(urls))


def _check_tokenizer(url: str, served: str | None, tokenizer: Any) -> None:
    if tokenizer is None or served is None:
        return
    from agentenvs.envs.tokenizer_fingerprint import tokenizer_key

    local = tokenizer_key(tokenizer)
    if local is not None and local != served:
        raise RemoteEnvError(
            f"env server {url} renders with tokenizer {served}, this process has {local}: "
            "start the server with the tokenizer the policy uses (agentenvs serve --tokenizer)"
        )
