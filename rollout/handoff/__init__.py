"""Hand-off of training samples to trainers: Tinker, PyTRIO, verl (torch), JSONL.

Each hand-off starts from the same :class:`agentenvs.rollout.data.samples.TrainingSample`
list and lives in its own module, so importing one does not import the others'
heavy dependencies:

* :mod:`.tinker`: ``to_tinker_datums``, ``assemble_tinker_data`` (``tinker`` package);
* :mod:`.pytrio`: ``to_pytrio_datums`` (``pytrio`` package);
* :mod:`.verl`: ``to_verl_batch``, ``from_verl_batch``, ``to_tensordict`` (``torch``);
* :mod:`.jsonl`: ``write_samples_jsonl``, ``read_samples_jsonl`` (no dependency).
"""
