"""Adapters that plug agentenvs environments into training loops people already run.

Each adapter lives in its own module and imports its framework only there, so
importing one does not pull in the others:

* :mod:`.tinker_cookbook`: agentenvs builders/datasets as ``tinker_cookbook.rl``
  ``EnvGroupBuilder``/``RLDataset`` (and a dataset builder for ``rl.train``), any
  agentenvs policy as a cookbook ``TokenCompleter``, and the reverse: a cookbook
  ``Env``/``EnvGroupBuilder`` run by this project's collector and viewer;
* :mod:`.pytrio`: a PyTRIO ``SamplingClient`` as an agentenvs policy (the datums
  hand-off is :mod:`agentenvs.rollout.handoff.pytrio`);
* :mod:`.trl`: a ``rollout_func`` for TRL's ``GRPOTrainer`` with multi-turn
  rollouts and environment-token masking (``env_mask``);
* :mod:`.verl`: a verl agent loop (``AgentLoopBase``/``AgentLoopOutput``)
  registered as ``agentenvs`` (the padded batch is
  :mod:`agentenvs.rollout.handoff.verl`).

See ``docs/integrations.md`` for the lines each loop needs.
"""
