"""Shared fixtures: the trained ChatML tokenizer every test renders with."""

from __future__ import annotations

import pytest

from agentenvs.rollout.tokenizer import train_chatml_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return train_chatml_tokenizer()
