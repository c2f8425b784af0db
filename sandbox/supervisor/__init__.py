"""The in-sandbox supervisor, one module per job (shipped as source by ``bundle.py``).

- ``frames``: the wire protocol's frames on raw descriptors.
- ``restrictions``: rlimits, no_new_privs, Landlock, seccomp: what a child may not do.
- ``usercode``: running the code in a child as a notebook cell would.
- ``outcome``: capped output capture and naming what happened.
- ``processes``: killing and reaping what an execution left running.
- ``wipe``: emptying the writable directories between executions.
- ``probe``: what a restricted child can do, measured from inside.
- ``sessions``: the fork chain that holds a notebook's namespace.
- ``server``: the request loop and stateless runs (``main``).

Every module uses the standard library only and imports its siblings relatively: inside
the sandbox they are loaded from the bundle, not from agentenvs. Importing the package
has no side effect, so the host (and the tests) can import single modules.
"""
