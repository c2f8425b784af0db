"""Ship the supervisor package into a sandbox as one frame of source.

The sandboxed interpreter cannot read agentenvs' files (the bootstrap receives the
supervisor as bytes on stdin, see ``agentenvs.sandbox.pool.protocol``). The frame is a
small loader holding every module's source: it installs an importer for the package name
``agentenvs_supervisor``, so the modules import each other relatively exactly as they do
on the host, and then calls ``server.main()``. Tracebacks name
``agentenvs-supervisor/<module>.py`` (the line cache is filled), which is also how
``usercode`` tells the supervisor's frames from the user's.

This module runs on the host only and is not part of the bundle.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

PACKAGE_NAME = "agentenvs_supervisor"
"""The package's name inside the sandbox (it has no agentenvs to be part of)."""

MODULES = (
    "__init__",
    "frames",
    "restrictions",
    "usercode",
    "outcome",
    "processes",
    "wipe",
    "leftovers",
    "files",
    "probe",
    "forking",
    "chain",
    "sealing",
    "state",
    "reset",
    "startup",
    "runs",
    "self_check",
    "sessions",
    "session_table",
    "server",
)
"""Every module that is shipped; ``bundle.py`` itself is not."""

LOADER = '''\
import linecache as _linecache
import sys as _sys
from importlib.machinery import ModuleSpec as _ModuleSpec

_PACKAGE = {package!r}
_SOURCES = {sources!r}


class _BundleImporter:
    """Finds and executes the supervisor's modules from the sources above."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == _PACKAGE or fullname.startswith(_PACKAGE + "."):
            leaf = "__init__" if fullname == _PACKAGE else fullname[len(_PACKAGE) + 1 :]
            if leaf in _SOURCES:
                spec = _ModuleSpec(fullname, self, is_package=fullname == _PACKAGE)
                spec.has_location = False
                return spec
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        leaf = "__init__" if name == _PACKAGE else name[len(_PACKAGE) + 1 :]
        source = _SOURCES[leaf]
        filename = "agentenvs-supervisor/" + leaf + ".py"
        module.__file__ = filename
        _linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), module.__dict__)


_sys.meta_path.insert(0, _BundleImporter())
__import__(_PACKAGE + ".server").server.main()
'''


def module_sources() -> dict[str, str]:
    """Module name (without the package) -> its source text."""
    package = resources.files(__package__)
    return {name: package.joinpath(f"{name}.py").read_text() for name in MODULES}


@cache
def bundle_source() -> bytes:
    """The loader with every module's source in it: one frame for the bootstrap."""
    return LOADER.format(package=PACKAGE_NAME, sources=module_sources()).encode()
