"""agentenvs.rollout: running envs with a policy, and turning trajectories into training data.

One room per stage of the data path:

- ``collect/``: single and group rollouts, the collector, the store and its records;
- ``data/``: trajectories to training samples, advantages, provenance, training data
  read back from a store;
- ``inspect/``: ``check``, the chat-template check, the viewer;
- ``policies/``, ``handoff/`` (to each trainer's data types), ``integrations/`` (into
  each trainer's own loop), ``cli/`` (the ``agentenvs`` command);
- ``tokenizer``: loading tokenizers, shared by every stage.

Module paths of version one (``agentenvs.rollout.collector`` and so on) keep working:
see :mod:`agentenvs.rollout.moved`.
"""

from agentenvs.rollout import moved as _moved

_moved.install()
