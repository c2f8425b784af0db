"""Agent harnesses as environments, and the gateway machinery they talk to.

An external agent CLI (mini-swe-agent, Codex, Claude Code, opencode, Qwen Code) calls
its model over HTTP. The gateway answers those calls from a token-level policy and
records every turn exactly; a harness environment runs such a CLI on a task in a jail
and scores it with the task's own tests. Modules:

* ``conversation``: the request and reply every API is read into and written from;
* ``apis/``: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages;
* ``replies``: sampled tokens to a reply (tool calls parsed from the sampled text);
* ``segments``: one episode's requests as a tree of exact segments;
* ``server``: the HTTP routes over sessions of segment trees;
* ``env``: :class:`~agentenvs.envs.harness.env.HarnessEnv`, an episode of a harness on a
  task, whose requests are its observations; ``config``: the registered ``harness``
  environment and its groups;
* ``jail``: the bubblewrap jail a harness runs in (its one way out is its gateway);
* ``harnesses``: how each CLI is started offline; ``task``: Harbor-layout task folders;
* ``data/tasks/fix-calc``: the example task.

The policy-backed gateway and ``agentenvs gateway`` are in ``agentenvs.rollout.gateway``;
docs/gateway.md describes both.
"""
