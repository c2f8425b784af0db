"""The ``local`` sandbox backend: bubblewrap + warm, pre-imported, forking interpreters.

Usage::

    from agentenvs.sandbox import create

    async with create(backend="local", timeout=5, memory_limit_mb=512) as sandbox:
        result = await sandbox.run("import sympy as sp; sp.factor(sp.Symbol('x')**2 - 1)")
        async with sandbox.session() as notebook:
            await notebook.run("x = 41")
            await notebook.run("x + 1")      # stdout "42\\n"

Layers, each measured at start-up and listed by ``capabilities()`` (``min_isolation``
makes the sandbox refuse to start without the ones you name):

* namespaces / network_isolated: bubblewrap unshares user, pid, mount, IPC, UTS, cgroup
  and network namespaces; the supervisor is pid 1, so nothing inside can kill it and
  ``kill(-1)`` from it reaches every leftover process, daemons included.
* unprivileged_uid: when the host is root, each worker runs as its own dedicated uid
  (from ``uid_base``), so RLIMIT_NPROC holds and host files are a stranger's.
* readonly_root / tmpfs_workdir / cleared_env: only ``/usr`` (read-only), synthetic
  ``/etc`` files, a minimal ``/dev`` and size-limited tmpfs ``/tmp`` (the work dir,
  wiped after each run) and ``/dev/shm``; the environment is replaced.
* rlimits / no_new_privs / landlock / seccomp: per execution CPU, address space, file
  size, processes, open files and core limits; no privilege gain; Landlock write access
  only to the work dir (and no TCP); a seccomp filter against ptrace, mount, namespaces,
  io_uring, bpf, IP sockets and similar.
* cgroup_memory / cgroup_pids: one cgroup per worker bounding the sum of everything it
  runs; OOM kills are reported as ``memory``.

Without bubblewrap (or with ``use_bwrap=False``) the same supervisor runs directly as the
dedicated uid: no namespaces and no private tmpfs, the rest applies.

Known limits: sessions keep state in a process chain, so a cell's background threads
live on in the state holder; when the holder is lost (a cell killed it, then died), state
is rebuilt by replaying the cells that completed, which is exact only for deterministic
cells. Python's own stack is heap-allocated in 3.11, so unbounded recursion ends by
memory or time rather than a crash.
"""
