"""Shared fixtures: the trained ChatML tokenizer every test renders with."""

from __future__ import annotations

import os

import pytest

from agentenvs.rollout.tokenizer import train_chatml_tokenizer

# Ray reads this once, when it is first imported, and without it swaps 127.0.0.1 for
# the machine's outward address in every cluster address, so a driver joining a
# loopback test cluster waits on an address nothing listens on. Set here, before any
# test module is collected: collecting the verl tests imports verl, which imports ray,
# before the Ray tests' own modules are read.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@pytest.fixture(scope="session")
def tokenizer():
    return train_chatml_tokenizer()
