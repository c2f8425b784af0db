"""One folder per trainer: its hand-off (training samples to its data types) and its loop integration.

Every hand-off starts from the same :class:`agentenvs.rollout.data.samples.TrainingSample`
list; every integration plugs agentenvs environments into a loop the trainer already
runs. Each module imports its framework only there, so importing one does not pull in
the others:

* :mod:`.tinker`: ``handoff`` (``to_tinker_datums``, ``assemble_tinker_data``) and
  ``cookbook`` (agentenvs builders/datasets as ``tinker_cookbook.rl`` ones, any policy
  as a cookbook ``TokenCompleter``, and a cookbook env run by this project's collector);
* :mod:`.pytrio`: ``handoff`` (``to_pytrio_datums``) and ``sampling_policy`` (a PyTRIO
  ``SamplingClient`` as an agentenvs policy);
* :mod:`.trl`: ``rollout_func`` (a ``rollout_func`` for TRL's ``GRPOTrainer`` with
  multi-turn rollouts and ``env_mask``) and ``weight_sync`` (a callback that keeps a
  vLLM server on the trainer's weights);
* :mod:`.verl`: ``handoff`` (``to_verl_batch``, ``from_verl_batch``, ``to_tensordict``)
  and ``agent_loop`` (a verl agent loop registered as ``agentenvs``);
* :mod:`.jsonl`: ``handoff`` (``write_samples_jsonl``, ``read_samples_jsonl``; no
  dependency);
* :mod:`.common`: what the integrations share (``run_sync``, ``one_sample``).

See ``docs/integrations.md`` for the lines each loop needs.
"""
