"""What ``agentenvs check`` reads besides its file: the tokenizer, the store a hand-off
was made from, the drift log, another store's reward code, a preset's card.

A store is read one line at a time (``inspect/store_check.py``); only ``--card``, which
compares the whole run with a preset, holds every record. The tokenizer is the one the
store names, loaded the fast way (``inspect/vocab.py``); a different vocabulary than the
file recorded is warned about.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentenvs.rollout.cli.common import NO_TOKENIZER_NAMED, CLIError, err, one_line


def readable_kind(file: Path) -> Any:
    """The file's kind, or one ``error:`` line saying why it cannot be checked."""
    from agentenvs.rollout.inspect.handoff_forms import file_kind

    if file.is_dir():
        raise CLIError(f"{file}: is a directory; pass a trajectory store or a hand-off file")
    if not file.is_file():
        raise CLIError(f"cannot read {file}: no such file")
    try:
        return file_kind(file)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CLIError(one_line(str(error))) from None


def rescorer_for(model: str | None, dtype: str) -> Any:
    from agentenvs.rollout.inspect.rescore import load_rescorer

    if not model:
        return None
    try:
        return load_rescorer(model, dtype)
    except (OSError, ValueError) as error:
        raise CLIError(f"cannot rescore with {model!r}: {one_line(str(error))}") from None


def _recorded_tokenizer(path: Path) -> tuple[str | None, dict[str, Any] | None, bool]:
    """The tokenizer spec and fingerprint the store's first record that names one names,
    and whether any record read holds tokens to decode (all of them when none names a
    tokenizer; usually only the first line is read)."""
    has_tokens = False
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                data = json.loads(line)
                entry = data.get("provenance", {}).get("tokenizer")
            except (json.JSONDecodeError, AttributeError):
                continue
            has_tokens = has_tokens or bool(data.get("trajectories"))
            if isinstance(entry, dict) and (entry.get("spec") or entry.get("name")):
                return entry.get("spec") or entry.get("name"), entry, has_tokens
            if isinstance(entry, str) and entry:
                return entry, None, has_tokens
    return None, None, has_tokens


def store_tokenizer(path: Path, requested: str | None) -> Any:
    """``requested``, else the tokenizer the store names; a store with tokens that names
    none is refused, asking for ``--tokenizer`` (one with only failed groups decodes
    nothing and gets the built-in one)."""
    from agentenvs.envs.tokenizer_fingerprint import tokenizer_fingerprint
    from agentenvs.rollout.inspect.vocab import load_check_tokenizer

    spec, fingerprint, has_tokens = _recorded_tokenizer(path)
    if requested is None and spec is None and has_tokens:
        # Decoding with the builtin tokenizer by default showed garbage (and failed sound
        # stores) for runs made with another vocabulary.
        raise CLIError(NO_TOKENIZER_NAMED)
    chosen = requested or spec or "builtin"
    local = Path(chosen).expanduser()
    if chosen.startswith(("/", ".", "~")) and not local.exists():
        if requested:
            raise CLIError(f"cannot load tokenizer {chosen!r}: no such directory")
        raise CLIError(
            f"the file names tokenizer {chosen!r}, which cannot be loaded here; pass "
            "--tokenizer builtin or a local tokenizer directory"
        )
    try:
        tokenizer = load_check_tokenizer(chosen)
    except Exception as error:  # transformers raises OSError, ValueError, ...
        raise CLIError(f"cannot load tokenizer {chosen!r}: {one_line(str(error))[:300]}") from None
    expected = (fingerprint or {}).get("vocab_sha256")
    if expected and tokenizer_fingerprint(tokenizer).get("vocab_sha256") != expected:
        err.print(
            f"warning: the file was made with a different tokenizer (vocab {expected}); "
            f"{chosen!r} has another: decoded text may be wrong",
            markup=False,
        )
    return tokenizer


def check_a_store(file: Path, options: Any, sources: Any, rescorer: Any) -> Any:
    """A trajectory store, one group at a time; skipped (torn) lines are warned about."""
    from agentenvs.rollout.inspect.store_check import check_stream, read_lines
    from agentenvs.rollout.weights.drift import read_drift

    tokenizer = store_tokenizer(file, sources.tokenizer)
    against = None
    if sources.against is not None:
        against = (str(sources.against), (r for r, _ in read_lines(sources.against)))
    problems: list[Any] = []
    report = check_stream(
        read_lines(file, problems),
        source=str(file),
        tokenizer=tokenizer,
        options=options,
        drift=read_drift(sources.drift) if sources.drift is not None else None,
        rescorer=rescorer,
        against=against,
    )
    for problem in problems:
        err.print(f"warning: {file}:{problem.line}: skipped a {problem.reason}", markup=False)
    if problems:
        report.stats["skipped_lines"] = len(problems)
    if sources.card is not None:
        from agentenvs.rollout.collect.store import read_store
        from agentenvs.rollout.presets.card import card_findings

        report.findings += card_findings(
            read_store(file, warn=False).latest(), sources.card, tokenizer
        )
    return report
