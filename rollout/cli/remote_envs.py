"""``agentenvs rollout ENV --env-server URL``: the groups come from env servers.

The config is still made here (the flags are checked before any request, and the
records carry it); the servers must describe the same config, else the records
would claim one config while another ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentenvs.rollout.cli.common import CLIError, one_line


def remote_dataset(
    servers: Sequence[str],
    env_name: str,
    *,
    overrides: dict[str, Any],
    local_config: dict[str, Any],
    tokenizer: Any,
    group_size: int,
    n_groups: int,
    split: str,
    token: str | None,
) -> Any:
    """The :class:`~agentenvs.envs.remote.RemoteDataset` of the run, or a one-line CLIError."""
    from agentenvs.envs.errors import AgentEnvsError
    from agentenvs.envs.remote import RemoteDataset, server_urls

    try:
        dataset = RemoteDataset.open(
            server_urls(servers), env_name, group_size=group_size, config=overrides,
            split=split, n_groups=n_groups, tokenizer=tokenizer, token=token,
        )  # fmt: skip
    except (AgentEnvsError, ValueError) as error:
        raise CLIError(f"--env-server: {one_line(str(error))}") from None
    if dataset.builders:
        served = dataset.builders[0].description.get("config") or {}
        differ = sorted(k for k in set(served) | set(local_config)
                        if served.get(k) != local_config.get(k))  # fmt: skip
        if differ:
            raise CLIError(
                f"--env-server: the server's {env_name} config differs from this one in "
                f"{', '.join(differ)}: run the same agentenvs version on both sides"
            )
    return dataset
