"""Hypothesis strategies for random multi-turn trajectories, with what the samples must be.

Shared by the sample, advantage and hand-off tests (imported as a module). Each
generated trajectory comes with an *oracle*: the samples written down while the
trajectory was being generated (which tokens were sampled, where the generator
chose to break the prefix), independently of the code under test.
"""

from __future__ import annotations

from hypothesis import given, settings
from support.sample_strategies import Scenario, scenarios


@settings(max_examples=50, deadline=None)
@given(scenarios())
def test_generated_breaks_are_real_breaks(scenario: Scenario):
    """The oracle is only worth something if each break really fails the prefix test."""
    context: list[int] = []
    seen_breaks = 0
    for tr in scenario.trajectory.transitions:
        if context and tr.ob[: len(context)] != context:
            seen_breaks += 1
        context = tr.ob + tr.ac.tokens
    assert seen_breaks == scenario.prefix_breaks
    assert len(scenario.expected) == scenario.prefix_breaks + 1
