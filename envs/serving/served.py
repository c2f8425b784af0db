"""What one env server hosts: the environments by name, the tokenizer they render with,
and the datasets made from them (made once per distinct request, kept in a small cache)."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.config import EnvConfig, UnknownSplitError
from agentenvs.envs.serving.errors import BadRequest, UnknownServedEnv
from agentenvs.envs.serving.wire import DatasetRequest
from agentenvs.envs.types import EnvGroupBuilder

DATASET_CACHE = 64


@dataclass
class ServedEnvs:
    """The environments one server hosts and the tokenizer they render with."""

    names: Sequence[str]
    tokenizer: Any
    tokenizer_spec: str = "builtin"
    classes: Mapping[str, type[EnvConfig]] = field(default_factory=dict)
    """Config classes to host by name beside (or instead of) the registry's."""
    _datasets: OrderedDict[str, list[EnvGroupBuilder]] = field(default_factory=OrderedDict)
    _configs: list[EnvConfig] = field(default_factory=list)

    def shutdown(self) -> None:
        """Stop what the configs made hold (ALFWorld's engine processes)."""
        for config in self._configs:
            with contextlib.suppress(Exception):
                config.shutdown()

    def builders(self, request: DatasetRequest) -> list[EnvGroupBuilder]:
        """The dataset's builders, made once per distinct request (the cache is small)."""
        key = request.cache_key()
        if key in self._datasets:
            self._datasets.move_to_end(key)
            return self._datasets[key]
        if request.env not in self.names:
            served = ", ".join(self.names)
            raise UnknownServedEnv(f"environment {request.env!r} is not served here; "
                                   f"served: {served}")  # fmt: skip
        config = self._config(request)
        try:
            dataset = config.dataset(
                self.tokenizer,
                group_size=request.group_size,
                n_groups=request.n_groups,
                split=request.split,
            )
        except UnknownSplitError as err:
            raise BadRequest(f"body.split: {err}") from None
        except ValueError as err:  # an env with no tasks in the split
            raise BadRequest(f"body.config: {err}") from None
        builders = [b for i in range(len(dataset)) for b in dataset.get_batch(i)]
        self._datasets[key] = builders
        self._configs.append(config)
        while len(self._datasets) > DATASET_CACHE:
            self._datasets.popitem(last=False)
        return builders

    def _config(self, request: DatasetRequest) -> EnvConfig:
        from agentenvs.envs.registry import make

        try:
            cls = self.classes.get(request.env)
            if cls is None:
                return make(request.env, **request.config)
            return cls(**request.config)
        except (ValueError, TypeError) as err:  # EnvConfigError, a pydantic ValidationError
            raise BadRequest(f"body.config: {one_line(err)}") from None


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
