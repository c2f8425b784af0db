"""User-visible strings from a file: how a preset's user supplies an original's own texts.

agentenvs ships its own wording for every prompt, turn template, hint and tool
description (we do not copy other projects' prose). A reproduction needs the
original's exact texts, so every environment reads them from a strings file:
``strings_file`` names a YAML, JSON or TOML file holding one flat mapping of
string name to text, and ``strings`` (inline, same names) wins over the file.

Each environment declares its names and our defaults (:class:`StringTable`), so an
unknown name (a typo) fails when the config is made, not mid-rollout. Names that are
also config fields (``system_prompt``, ``prompt_template``...) fill those fields when
the caller did not set them, so one file can hold every string of a setup.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self

from pydantic import BaseModel, Field, model_validator


class StringsFileError(ValueError):
    """A strings file that cannot be read, is not a flat name->text mapping, or names
    strings the environment does not have. A ``ValueError``, so pydantic reports it as
    a config error."""


def read_strings_file(path: str | Path) -> dict[str, str]:
    """The name->text mapping of a ``.yaml``/``.yml``, ``.json`` or ``.toml`` file."""
    path = Path(path).expanduser()
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as err:
        raise StringsFileError(f"cannot read strings_file {str(path)!r}: {err}") from None
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            import yaml  # a dependency of transformers; imported only when a file asks

            data = yaml.safe_load(raw)
        elif suffix == ".json":
            data = json.loads(raw)
        elif suffix == ".toml":
            data = tomllib.loads(raw)
        else:
            raise StringsFileError(
                f"strings_file {str(path)!r}: use a .yaml, .yml, .json or .toml file"
            )
    except StringsFileError:
        raise
    except Exception as err:  # each parser has its own error type
        message = f"strings_file {str(path)!r} is not valid {suffix[1:]}: {err}"
        raise StringsFileError(message) from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        raise StringsFileError(
            f"strings_file {str(path)!r} must hold one flat mapping of string name to text"
        )
    return dict(data)


@dataclass(frozen=True)
class StringTable:
    """An environment's settable strings: name -> our default text, and which names are
    config fields (filled from the file when the caller left them unset)."""

    defaults: Mapping[str, str]
    field_names: frozenset[str] = field(default_factory=frozenset)
    descriptions: Mapping[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return sorted({*self.defaults, *self.field_names})

    def resolve(
        self, strings_file: str | None, inline: Mapping[str, str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """(texts for config fields, texts for the rest) from the file and ``inline``.

        Unknown names fail with the list of known ones."""
        merged = {**(read_strings_file(strings_file) if strings_file else {}), **inline}
        unknown = sorted(set(merged) - set(self.names))
        if unknown:
            raise StringsFileError(
                f"unknown string name(s) {', '.join(unknown)}; this environment's strings are "
                f"{', '.join(self.names)}"
            )
        fields = {k: v for k, v in merged.items() if k in self.field_names}
        rest = {k: v for k, v in merged.items() if k not in self.field_names}
        return fields, rest

    def text(self, strings: Mapping[str, str], name: str) -> str:
        """The text of ``name``: the user's if given, else our default."""
        if name not in self.defaults:
            raise KeyError(f"no string named {name!r}")
        return strings.get(name, self.defaults[name])


class SettableStrings(BaseModel):
    """Config mixin: ``strings_file`` and ``strings``, resolved once when the config is made.

    A config class sets ``string_table``; env code reads a text with :meth:`text`. The
    resolved texts stay in ``strings`` (and so in the config's hash and the records): a
    changed file is a changed config.
    """

    string_table: ClassVar[StringTable] = StringTable({})

    strings_file: str | None = Field(
        None,
        description="A YAML/JSON/TOML file of name: text pairs replacing our wording (system "
        "prompt, turn templates, hints, tool description); see the environment's docs.",
    )
    strings: dict[str, str] = Field(
        default_factory=dict, description="Inline name: text pairs; win over strings_file."
    )

    @model_validator(mode="after")
    def _resolve_strings(self) -> Self:
        fields, rest = self.string_table.resolve(self.strings_file, self.strings)
        for name, text in fields.items():
            if name not in self.model_fields_set:
                object.__setattr__(self, name, text)
        object.__setattr__(self, "strings", rest)
        return self

    def text(self, name: str) -> str:
        """The text shown for ``name``: the user's, else ours."""
        return self.string_table.text(self.strings, name)
