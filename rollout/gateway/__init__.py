"""``agentenvs gateway``: the model endpoint an external agent harness talks to.

The gateway speaks the OpenAI Chat Completions and Responses APIs and the Anthropic
Messages API in front of any token-level policy of ours, renders each request with the
model's chat template, samples token-in/token-out, parses tool calls from the sampled
tokens, and records every turn in its session's tree of exact segments. The wire
formats, rendering and segments live in ``agentenvs.envs.harness`` (the harness
environment drives the same machinery from inside an episode); this package puts a
policy behind them:

* :mod:`.policy_gateway`: sessions sampled by a policy, each finished session stored as
  one group (one trajectory of segment-ordered turns) in a trajectory store;
* :mod:`.serve`: the HTTP server the CLI runs (``rollout/cli/gateway.py``).

See docs/gateway.md.
"""
