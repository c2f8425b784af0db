"""Shared fixtures: the trained ChatML tokenizer every test renders with; the skip policy;
the `slow` mark from the one list of costly tests (tests/support/slow_tests.py)."""

from __future__ import annotations

import os
import signal

import pytest
from support import skip_policy
from support.slow_tests import SLOW

from agentenvs.rollout.tokenizer import train_chatml_tokenizer

# Ray reads this once, when it is first imported, and without it swaps 127.0.0.1 for
# the machine's outward address in every cluster address, so a driver joining a
# loopback test cluster waits on an address nothing listens on. Set here, before any
# test module is collected: collecting the verl tests imports verl, which imports ray,
# before the Ray tests' own modules are read.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def pytest_configure(config: pytest.Config) -> None:
    # Every skip is listed at the end of the run; one that is not an allowed machine
    # condition (tests/support/machine_skips.py) fails the run.
    skip_policy.install(config)
    # A suite started as a background job of a non-interactive shell (`make test &`,
    # nohup) inherits SIGINT ignored, and so would every CLI it starts: the Ctrl-C tests
    # would then see their interrupt dropped. Python's own default is what they test.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `make test-fast` deselects `slow`; the list says which tests cost seconds each and why.
    for item in items:
        module, _, rest = item.nodeid.partition("::")
        function = rest.split("[", 1)[0]
        if module in SLOW or f"{module}::{function}" in SLOW:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def tokenizer():
    return train_chatml_tokenizer()
