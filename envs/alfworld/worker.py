"""The ALFWorld engine process: TextWorld PDDL games driven over a pipe.

TextWorld's PDDL backend is not thread-safe (Fast Downward's translator swaps
``sys.argv`` and ``sys.stdout``; the planner library keeps its task in globals),
and every new ``PddlEnv`` loads its own copy of ``libdownward.so`` that is never
unloaded. So games run here, in a separate process, and each *engine* (one
``PddlEnv`` with one copy of the library) is made once and then reused: a new
episode on an engine is ``load`` (only when the game changes) plus ``reset``.

Protocol: one JSON object per line. Requests arrive on stdin; answers go to the
process's original stdout, which is moved to a private descriptor at start-up so
that anything the C++ planner prints cannot corrupt it (fd 1 then points to
stderr). The first line sent is ``{"ok": true, "ready": true, "pid": ...}``.
Every answer carries ``ok``; failures carry ``error`` and ``traceback``.
EOF on stdin (the parent died or closed the pool) ends the process.

``fork`` (tree rollouts) copies one engine mid-game with ``os.fork``: the game state
lives in the planner library's memory, which nothing else can copy (TextWorld's
``copy()`` is not implemented, pickling fails, a deep copy sharing the library
corrupts the original). The process is single-threaded, so the child is a complete
copy; it leaves the parent's session, connects to the Unix socket the host named,
and serves that one engine there, with the same protocol. The parent reaps its forks.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, TextIO

_FORKED: set[int] = set()
"""Engine processes this process forked and has not reaped yet."""


class Engine:
    """One TextWorld PDDL environment (one planner library copy), reused across games."""

    def __init__(self) -> None:
        self.env: Any = None
        self.game: str | None = None
        self.episodes = 0

    def reset(self, game: str) -> dict[str, Any]:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

        loaded = False
        if self.env is None:
            infos = textworld.EnvInfos(won=True, admissible_commands=True)
            self.env = textworld.start(
                game, request_infos=infos, wrappers=[AlfredDemangler(shuffle=False)]
            )
            loaded = True
        elif game != self.game:
            self.env.load(game)
            loaded = True
        self.game = game
        state = self.env.reset()
        self.episodes += 1
        walkthrough = getattr(self.env.unwrapped, "walkthrough", None)
        return {
            "feedback": state.feedback,
            "admissible": list(state["admissible_commands"]),
            "won": bool(state["won"]),
            "walkthrough": list(walkthrough) if walkthrough else None,
            "loaded": loaded,
        }

    def step(self, command: str, plan: bool) -> dict[str, Any]:
        if self.env is None:
            raise RuntimeError("step before reset")
        state, _, _ = self.env.step(command)
        answer = {
            "feedback": state.feedback,
            "admissible": list(state["admissible_commands"]),
            "won": bool(state["won"]),
        }
        if plan:
            answer["plan"] = self.plan()
        return answer

    def plan(self) -> list[str]:
        """Fast Downward's plan from the current state ([] when there is none)."""
        if self.env is None:
            raise RuntimeError("plan before reset")
        pddl_env = self.env.unwrapped
        return list(pddl_env._pddl_state.replan(pddl_env._entity_infos))


def cache_translations(max_entries: int = 32) -> None:
    """Memoize Fast Downward's PDDL-to-SAS translation in this process.

    TextWorld translates the game's PDDL twice on every ``load`` and every
    ``reset``; that is most of a reset's cost, and a deterministic function of the
    domain and problem text. The cached task objects are only read by TextWorld.
    """
    import fast_downward

    original = fast_downward.pddl2sas
    if getattr(original, "_agentenvs_cached", False):
        return
    cache: OrderedDict[tuple, Any] = OrderedDict()

    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        key = (hash(domain), hash(problem), len(domain), len(problem), bool(optimize))
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        result = original(domain, problem, verbose=verbose, optimize=optimize)
        cache[key] = result
        if len(cache) > max_entries:
            cache.popitem(last=False)
        return result

    pddl2sas._agentenvs_cached = True  # type: ignore[attr-defined]
    fast_downward.pddl2sas = pddl2sas


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


class Server:
    def __init__(self) -> None:
        self.engines: dict[int, Engine] = {}
        self.channel: TextIO | None = None
        """The answer channel, closed in a forked child (it answers on its own socket)."""

    def engine(self, slot: int) -> Engine:
        if slot not in self.engines:
            self.engines[slot] = Engine()
        return self.engines[slot]

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "reset":
            return self.engine(int(request["slot"])).reset(str(request["game"]))
        if op == "step":
            engine = self.engine(int(request["slot"]))
            return engine.step(str(request["command"]), bool(request.get("plan")))
        if op == "plan":
            return {"plan": self.engine(int(request["slot"])).plan()}
        if op == "stats":
            return {
                "pid": os.getpid(),
                "rss_kb": rss_kb(),
                "engines": len(self.engines),
                "episodes": sum(e.episodes for e in self.engines.values()),
            }
        if op == "fork":
            return fork_engine(
                self, int(request["slot"]), str(request["address"]), str(request["log"])
            )
        if op == "ping":
            return {}
        if op == "sleep":  # for tests of timeouts
            time.sleep(float(request.get("seconds", 0)))
            return {}
        raise ValueError(f"unknown op {op!r}")


def thread_count() -> int:
    """Kernel threads of this process: ``fork`` copies only the calling one."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def reap_forks(*_: object) -> None:
    """SIGCHLD: reap the forked engines that exited (and only them: TextWorld's own
    subprocesses, if any, are waited for by their owners)."""
    for pid in list(_FORKED):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _FORKED.discard(pid)


def fork_engine(server: Server, slot: int, address: str, log_path: str) -> dict[str, Any]:
    """Fork this process for engine ``slot``; the child serves it on ``address``."""
    engine = server.engines.get(slot)
    if engine is None or engine.env is None:
        raise RuntimeError(f"engine {slot} has no game to fork")
    if thread_count() > 1:
        raise RuntimeError("the engine process is multithreaded: os.fork would be unsafe")
    pid = os.fork()
    if pid:
        _FORKED.add(pid)
        return {"pid": pid}
    code = 1
    try:
        _FORKED.clear()
        os.setsid()  # its own process group: killing the parent's leaves it alone
        log = os.open(log_path, os.O_WRONLY | os.O_APPEND)
        os.dup2(log, 2)
        os.dup2(log, 1)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if server.channel is not None:
            os.close(server.channel.fileno())  # the parent's answers are not ours to write
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(address)
        child = Server()
        child.engines = {slot: engine}
        lines = conn.makefile("r", encoding="utf-8")
        answers = conn.makefile("w", encoding="utf-8", buffering=1)
        conn.close()  # the two files keep the connection open
        send = line_sender(answers)
        send({"ok": True, "ready": True, "pid": os.getpid()})
        serve(child, lines, send)
        code = 0
    finally:
        os._exit(code)  # never return into the parent's request loop


def line_sender(channel: TextIO) -> Callable[[dict[str, Any]], None]:
    def send(message: dict[str, Any]) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    return send


def serve(server: Server, lines: Iterable[str], send: Callable[[dict[str, Any]], None]) -> None:
    """Answer requests until ``exit`` or the end of ``lines``."""
    for line in lines:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except json.JSONDecodeError as err:
            send({"ok": False, "error": f"bad request: {err}", "traceback": ""})
            continue
        if request.get("op") == "exit":
            send({"ok": True})
            break
        try:
            answer = server.handle(request)
        except Exception as err:
            send(
                {
                    "ok": False,
                    "error": f"{type(err).__name__}: {err}",
                    "traceback": traceback.format_exc(),
                }
            )
        else:
            send({"ok": True, **answer})


def _private_stdout():
    """The original stdout as a private line channel; fd 1 becomes stderr."""
    channel = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    channel = _private_stdout()
    send = line_sender(channel)

    try:
        import alfworld.agents.environment.alfred_tw_env  # noqa: F401
        import textworld  # noqa: F401

        if "--cache-translations" in args:
            cache_translations()
    except Exception as err:  # the parent turns this into a clear start-up error
        send({"ok": False, "error": f"{type(err).__name__}: {err}", "traceback": ""})
        return 1
    send({"ok": True, "ready": True, "pid": os.getpid()})

    server = Server()
    server.channel = channel
    # Interrupting (Python's default): an idle read returns to run the reaper at once;
    # the planner's own I/O is to regular files, which signals do not interrupt.
    signal.signal(signal.SIGCHLD, reap_forks)
    serve(server, sys.stdin, send)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
