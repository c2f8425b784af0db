"""Which tools exist and what they need: the checks every format shares after reading.

A parser reads the markup and the values; whether the name is a known tool and the
required arguments are there is the same question in every format, so it is answered
once here. Environments with looser rules of their own (an alias for an argument)
pass a schema with fewer requirements and judge the arguments themselves.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.envs.tool_calls.types import ParseStatus, ToolCallAttempt

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


@dataclass(frozen=True)
class ToolSchema:
    """One tool: its name, required arguments and the JSON-schema type of each argument.

    ``types`` drives value conversion in the formats whose values are text (Qwen3-Coder,
    GLM): a string-typed argument is kept verbatim, others are read as JSON.
    """

    name: str
    required: tuple[str, ...] = ()
    types: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_openai(cls, spec: Mapping[str, Any]) -> ToolSchema:
        """From an OpenAI function tool (``{"type": "function", "function": {...}}``)."""
        function = spec.get("function", spec)
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ValueError(f"not an OpenAI function tool: {spec!r}")
        parameters = function.get("parameters") or {}
        properties = parameters.get("properties") or {}
        types = {
            key: str(value.get("type"))
            for key, value in properties.items()
            if isinstance(value, Mapping) and isinstance(value.get("type"), str)
        }
        return cls(function["name"], tuple(parameters.get("required") or ()), types)


Tools = Mapping[str, ToolSchema]


def tools_of(specs: Iterable[ToolSchema | Mapping[str, Any]]) -> dict[str, ToolSchema]:
    """A name-keyed tool table from schemas or OpenAI tool dicts."""
    table = {}
    for spec in specs:
        schema = spec if isinstance(spec, ToolSchema) else ToolSchema.from_openai(spec)
        table[schema.name] = schema
    return table


def argument_type(tools: Tools | None, name: str | None, key: str) -> str | None:
    if tools is None or name is None or name not in tools:
        return None
    return tools[name].types.get(key)


def validate(attempt: ToolCallAttempt, tools: Tools | None) -> ToolCallAttempt:
    """``attempt`` judged against the tool table (unchanged when it already failed or
    when there is no table)."""
    if attempt.status != ParseStatus.OK or tools is None:
        return attempt
    if attempt.name not in tools:
        known = ", ".join(sorted(tools)) or "none"
        return attempt.with_status(
            ParseStatus.UNKNOWN_TOOL, f"unknown tool {attempt.name!r}; the tools are {known}"
        )
    schema = tools[attempt.name]
    arguments = attempt.arguments or {}
    for key in schema.required:
        if key not in arguments:
            return attempt.with_status(
                ParseStatus.MISSING_ARGUMENT, f"{attempt.name} needs the argument {key!r}"
            )
    for key, value in arguments.items():
        wanted = _JSON_TYPES.get(schema.types.get(key, ""))
        if wanted is None or value is None:
            continue
        if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
            return attempt.with_status(
                ParseStatus.INVALID_ARGUMENT,
                f"argument {key!r} of {attempt.name} must be {schema.types[key]}",
            )
    return attempt


def limit_calls(
    attempts: Sequence[ToolCallAttempt], max_calls: int | None
) -> list[ToolCallAttempt]:
    """Readable calls past the first ``max_calls`` become ``too_many_calls``."""
    if max_calls is None:
        return list(attempts)
    limited, kept = [], 0
    for attempt in attempts:
        if attempt.status == ParseStatus.OK:
            kept += 1
            if kept > max_calls:
                attempt = attempt.with_status(
                    ParseStatus.TOO_MANY_CALLS, f"more than {max_calls} call(s) allowed"
                )
        limited.append(attempt)
    return limited


def convert_text_value(raw: str, declared: str | None) -> tuple[Any, str]:
    """A value written as text (Qwen3-Coder, GLM) as the type the schema declares.

    A ``string`` argument is kept verbatim; ``null`` is None for any type; any other
    declared type is read as JSON and must come out as that type. An argument the
    schema does not type is read as JSON when it is JSON and kept as text otherwise
    (the two formats leave quoting to the template). Returns the value and an error.
    """
    if declared == "string":
        return raw, ""
    if raw.strip() == "null":
        return None, ""
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        if declared is None or declared not in _JSON_TYPES:
            return raw, ""
        return raw, f"is not valid JSON for type {declared}"
    except ValueError:
        return raw, ""
    wanted = _JSON_TYPES.get(declared or "")
    if wanted is not None and (
        not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted)
    ):
        return raw, f"must be {declared}"
    return value, ""
