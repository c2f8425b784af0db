"""Capabilities are declared, never discovered (issue 39): no ``hasattr(x, "name")`` or
``getattr(x, "name", ...)`` under ``envs/`` asks an object of ours what it can do.

A lookup by a literal name is allowed only where the object is not ours to declare
(a third-party tokenizer, model or route object whose classes differ) and the place says
so below. A new lookup fails here: declare the method on the contract instead
(``Env``/``TextEnv``/``EnvConfig``/``Retriever``, or a protocol beside them).
"""

from __future__ import annotations

import ast

from support.paths import REPO

THIRD_PARTY = {
    "envs/tokenizer_fingerprint.py": "Hugging Face tokenizers: slow, fast and our builtin differ",
    "envs/tokenizing.py": "Hugging Face tokenizers: added vocabularies and backends differ",
    "envs/renderers.py": "a tokenizer's chat_template (absent on some tokenizer classes)",
    "envs/search_r1/retrievers/dense_encoder.py": "sentence-transformers renamed the method",
    "envs/serving/gate.py": "Starlette puts route objects of several classes in the scope",
    "envs/alfworld/worker.py": "TextWorld's gym wrappers and its own monkeypatch marker",
}


def literal_lookups(path) -> list[tuple[int, str]]:
    """``(line, source)`` of each hasattr / getattr-with-a-literal-name call in ``path``."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        named = len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
        if node.func.id == "hasattr" or (node.func.id == "getattr" and named):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_undeclared_capability_lookups_under_envs() -> None:
    offending = []
    for path in sorted((REPO / "envs").rglob("*.py")):
        where = str(path.relative_to(REPO))
        if where in THIRD_PARTY:
            continue
        offending += [f"{where}:{line}: {code}" for line, code in literal_lookups(path)]
    assert not offending, "undeclared lookups (declare them on the contract):\n" + "\n".join(
        offending
    )


def test_each_allowed_place_still_needs_it() -> None:
    stale = [where for where in THIRD_PARTY if not literal_lookups(REPO / where)]
    assert not stale, f"no lookup left in {stale}: drop them from THIRD_PARTY"
