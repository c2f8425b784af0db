"""verl 0.9.1's own rollout machinery on CPU, in front of the suite's vLLM server.

What a verl trainer runs to roll out, taken from verl itself: its ``ppo_trainer``
config composed with hydra, its ``RLHFDataset`` over a parquet of
:func:`~agentenvs.rollout.trainers.verl.agent_loop.verl_rows`, ``AgentLoopManager.create``
with ``AgentLoopWorker`` Ray actors, its ``LLMServerClient`` and its sticky-session
load balancer. Only the rollout server is ours: verl's ``vLLMHttpServer`` would run a
second vLLM engine inside Ray (and loads random weights unless told otherwise, see
docs/integrations.md), so :class:`OpenAIServerReplica` is a thin Ray actor with verl's
server interface (``generate(request_id, prompt_ids, sampling_params) -> TokenOutput``)
that forwards each request to the plain vLLM OpenAI server the suite already runs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

# Keep Ray on loopback (read when ray is imported): see tests/support/ray_cluster.py.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray

from agentenvs.envs.types import StopCondition
from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
from agentenvs.rollout.trainers.verl import agent_loop as adapter

VERL_SERVER_ADDRESS = "openai-vllm-0"
"""The name the load balancer knows our one replica by (verl uses host:port)."""


@dataclass(frozen=True)
class ServedRequest:
    """What one ``generate`` call brought to the replica, for the tests to check."""

    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    token_ids: list[int]


@ray.remote(num_cpus=0)
class OpenAIServerReplica:
    """verl's rollout-server interface over a vLLM OpenAI-compatible server.

    verl's ``vLLMHttpServer.generate`` turns ``sampling_params`` into vLLM's
    ``SamplingParams`` (``max_tokens`` defaulting to what is left of the response
    length, ``logprobs`` as "the sampled token's") and returns ``TokenOutput`` with
    ``stop_reason`` ``completed`` for vLLM's ``stop`` and ``length``; this does the
    same over HTTP. Sampling options verl sends that the completions request here
    does not carry (``top_k``, ``repetition_penalty``) must be verl's neutral
    defaults, else the request is refused rather than silently changed.
    """

    def __init__(self, url: str, model: str, response_length: int, global_steps: int = 0):
        self.url = url
        self.model = model
        self.response_length = response_length
        self.global_steps = global_steps
        self.policies: dict[tuple[float, float], OpenAICompatPolicy] = {}
        self.served: list[ServedRequest] = []

    def _policy(self, temperature: float, top_p: float) -> OpenAICompatPolicy:
        # One client per sampling setting: the policy's temperature is per instance.
        key = (temperature, top_p)
        if key not in self.policies:
            self.policies[key] = OpenAICompatPolicy(
                self.url,
                self.model,
                temperature=temperature,
                top_p=top_p,
                max_tokens=self.response_length,
            )
        return self.policies[key]

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        **_: Any,
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        params = dict(sampling_params)
        if image_data is not None or video_data is not None:
            raise ValueError("this replica serves text only")
        if (
            params.get("top_k", -1) not in (-1, 0, None)
            or params.get("repetition_penalty", 1.0) != 1.0
        ):
            raise ValueError(f"unsupported sampling params for this replica: {params}")
        stop: StopCondition = [*params.get("stop", []), *params.get("stop_token_ids", [])]
        policy = self._policy(float(params["temperature"]), float(params["top_p"]))
        cap = int(params.get("max_tokens", self.response_length))
        out = await policy(list(prompt_ids), stop, max_tokens=max(1, cap))
        self.served.append(ServedRequest(request_id, list(prompt_ids), params, list(out.tokens)))
        return TokenOutput(
            token_ids=list(out.tokens),
            log_probs=list(out.logprobs) if params.get("logprobs") and out.logprobs else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    def requests(self) -> list[ServedRequest]:
        return list(self.served)


@dataclass(frozen=True)
class VerlRolloutSetup:
    """Sizes of one verl rollout: its padded widths, group size and workers."""

    prompt_length: int = 1024
    response_length: int = 512
    rollout_n: int = 2
    num_workers: int = 1
    temperature: float = 1.0


def verl_config(
    model_dir: Path, agent_loop_config_path: Path, data_path: Path, setup: VerlRolloutSetup
) -> Any:
    """verl's own ``ppo_trainer.yaml``, composed with hydra as its CLI does, plus
    the overrides a user writes for a standalone agent-loop rollout."""
    import verl.trainer.config as verl_config_pkg
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl_config_pkg.__file__).parent)
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.prompt_length={setup.prompt_length}",
        f"actor_rollout_ref.rollout.response_length={setup.response_length}",
        f"actor_rollout_ref.rollout.n={setup.rollout_n}",
        f"actor_rollout_ref.rollout.temperature={setup.temperature}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        f"actor_rollout_ref.rollout.agent.num_workers={setup.num_workers}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_loop_config_path}",
        f"data.train_files={data_path}",
        f"data.val_files={data_path}",
        f"data.max_prompt_length={setup.prompt_length}",
        f"data.max_response_length={setup.response_length}",
        "trainer.device=cpu",
    ]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def loop_name(env: str) -> str:
    """The agent loop config entry (and rows' ``agent_name``) for one environment."""
    return f"agentenvs-{env}"


def write_rollout_inputs(
    directory: Path, envs: Mapping[str, dict[str, Any]], n_prompts: int
) -> tuple[Path, Path]:
    """The parquet of rows and the agent loop config file a verl user writes: one
    entry per environment, so one verl run rolls all of them out."""
    rows, entries = [], []
    for env, env_config in envs.items():
        name = loop_name(env)
        rows += adapter.verl_rows(env, env_config=env_config, n=n_prompts, agent_name=name)
        entries += adapter.agent_loop_config(env, env_config, name=name)
    data_path = directory / "rows.parquet"
    pd.DataFrame(rows).to_parquet(data_path)
    loop_path = directory / "agent-loops.yaml"
    loop_path.write_text(yaml.safe_dump(entries))
    return data_path, loop_path


def generation_batch(config: Any, data_path: Path) -> Any:
    """The batch verl's trainer hands its rollout manager: ``RLHFDataset`` rows,
    collated, the generation keys split off (``_get_gen_batch``) and each prompt
    repeated ``rollout.n`` times, interleaved (one GRPO group per prompt)."""
    from verl.protocol import DataProto
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    tokenizer = hf_tokenizer(config.actor_rollout_ref.model.path)
    dataset = RLHFDataset(data_files=[str(data_path)], tokenizer=tokenizer, config=config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    reward_keys = {
        "data_source",
        "reward_model",
        "extra_info",
        "uid",
    } & batch.non_tensor_batch.keys()
    gen_batch = batch.pop(
        batch_keys=[], non_tensor_batch_keys=list(set(batch.non_tensor_batch) - reward_keys)
    )
    gen_batch.non_tensor_batch.update(batch.non_tensor_batch)
    n = config.actor_rollout_ref.rollout.n
    return gen_batch.repeat(repeat_times=n, interleave=True)


@dataclass
class VerlRollout:
    """One run of verl's ``AgentLoopManager`` and what the replica saw."""

    output: Any
    """verl's ``DataProto``: the padded batch and the per-row non-tensor fields."""
    requests: list[ServedRequest]
    config: Any

    def of_env(self, env: str) -> Any:
        """verl's batch restricted to one environment's rows (verl's own slicing)."""
        names = list(self.output.non_tensor_batch["agent_name"])
        return self.output.select_idxs([i for i, n in enumerate(names) if n == loop_name(env)])


def run_verl_rollout(
    server_url: str,
    served_model: str,
    model_dir: Path,
    envs: Mapping[str, dict[str, Any]],
    *,
    n_prompts: int,
    setup: VerlRolloutSetup,
    work_dir: Path,
) -> VerlRollout:
    """verl's rollout of ``n_prompts`` rows per environment x ``rollout.n``, in the
    Ray session that is already initialised (:class:`local_ray`)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import get_router_handle

    data_path, loop_path = write_rollout_inputs(work_dir, envs, n_prompts)
    config = verl_config(model_dir, loop_path, data_path, setup)
    replica = OpenAIServerReplica.remote(server_url, served_model, setup.response_length)
    balancer = get_router_handle(servers={VERL_SERVER_ADDRESS: replica})
    client = LLMServerClient(config=config, load_balancer_handle=balancer)
    manager = AgentLoopManager.create(config, client)
    try:
        output = manager.generate_sequences(generation_batch(config, data_path))
        requests = ray.get(replica.requests.remote())
    finally:
        for worker in manager.agent_loop_workers:
            ray.kill(worker)
        ray.kill(balancer)
        ray.kill(replica)
    return VerlRollout(output, requests, config)


class local_ray:
    """A one-node Ray session on loopback with its own ``RAY_TMPDIR`` (short, under
    /tmp, for Ray's socket-path limit), shut down by its handle: never ``ray stop``.

    The agent loop workers import this project, so the driver's ``sys.path``
    (tests/ included, for the helpers) is passed on to them."""

    def __init__(self, num_cpus: int = 2) -> None:
        self.num_cpus = num_cpus
        self.tmpdir = ""
        self.previous_tmpdir: str | None = None

    def __enter__(self) -> local_ray:
        import sys

        self.tmpdir = tempfile.mkdtemp(prefix="rayv", dir="/tmp")
        self.previous_tmpdir = os.environ.get("RAY_TMPDIR")
        os.environ["RAY_TMPDIR"] = self.tmpdir
        paths = os.pathsep.join(p for p in sys.path if p)
        ray.init(
            num_cpus=self.num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            _node_ip_address="127.0.0.1",
            runtime_env={"env_vars": {"PYTHONPATH": paths, "TOKENIZERS_PARALLELISM": "false"}},
        )
        return self

    def __exit__(self, *exc: object) -> None:
        import shutil

        ray.shutdown()
        if self.previous_tmpdir is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = self.previous_tmpdir
        shutil.rmtree(self.tmpdir, ignore_errors=True)
