"""Reward components that say how they were computed, and an LLM judge any env can use.

* :mod:`.identity`: each reward component's name, function, version and code hash,
  stamped on every record's provenance (``provenance.reward.components``).
* :mod:`.judge`, :mod:`.judged_env`: an OpenAI-compatible judge endpoint as a reward
  component, with its verdict, model, prompt hash and weights in the step logs.

docs/rewards.md describes both.
"""
