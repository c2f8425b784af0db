"""The host side of supervised workers, shared by the ``local`` and ``docker`` backends.

- ``supervised``: :class:`SupervisedSandbox`, a pool of warm workers serving runs.
- ``session``: :class:`SupervisedSession`, a notebook held by one worker.
- ``care``: the pool's slots, standbys and background replacement of workers.
- ``health``: the after-run check of a worker's cgroup against its fresh baseline.
- ``worker``: one request at a time to a supervisor, its start-up handshake.
- ``protocol``: the host's side of the wire (frames, bootstrap, the bundled supervisor).
- ``files``: the shape of a run's files arguments.
- ``uids``, ``environment``, ``seccomp``: what every worker gets, whatever launches it
  (a dedicated uid, the code's environment, the seccomp filter the supervisor loads).
- ``assess``: the layer verdicts both backends draw the same way from a worker's reports.
- ``errors``: how a worker fails (:class:`WorkerDead`, :class:`WorkerStartError`).

The other side of the wire is the in-sandbox kit, ``agentenvs.sandbox.supervisor``.
"""
