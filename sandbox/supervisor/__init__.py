"""The in-sandbox supervisor, one module per job (shipped as source by ``bundle.py``).

- ``frames``: the wire protocol's frames on raw descriptors.
- ``restrictions``: rlimits, no_new_privs, Landlock, seccomp: what a child may not do.
- ``usercode``: running the code in a child as a notebook cell would.
- ``outcome``: capped output capture and naming what happened.
- ``processes``: killing and reaping what an execution left running.
- ``wipe``: emptying the writable directories between executions.
- ``probe``: what a restricted child can do, measured from inside.
- ``state``: what the parts below share (config, confinement, the session family).
- ``startup``: what the supervisor loads once and drops before serving.
- ``reset``: whether the worker may run again after a run (baselines, wipe, checks), and
  whether it may run at all (``seal``, measured by ``sealing``).
- ``runs``: stateless runs, one pre-forked child each.
- ``self_check``: the ``probe`` request (a child restricted like a run reports).
- ``sessions``, ``chain``, ``forking``, ``session_table``: the fork chain that holds a
  notebook's namespace, its forks, and the sessions of one worker.
- ``server``: the request loop (``main``).

Every module uses the standard library only and imports its siblings relatively: inside
the sandbox they are loaded from the bundle, not from agentenvs. Importing the package
has no side effect, so the host (and the tests) can import single modules.
"""
