"""The environment sandboxed code sees, the same in a bubblewrap worker and a container."""

from __future__ import annotations


def sandbox_environment(workdir: str) -> dict[str, str]:
    """The complete environment of sandboxed code: nothing is inherited from the host."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }
