"""A preset's trainer half as Markdown: the original's figures next to each trainer's,
then what each trainer is given (``agentenvs preset show NAME --markdown``).

docs/presets.md holds one sheet per preset, and a test regenerates them and compares,
so the page always shows what ``preset show`` emits today.
"""

from __future__ import annotations

import json
from typing import Any

from agentenvs.rollout.presets.batches import original_figures
from agentenvs.rollout.presets.emit import TARGETS, Emitted, emit, verl_command_line
from agentenvs.rollout.presets.originals import TrainerHalf

_ROWS: tuple[tuple[str, str, dict[str, str]], ...] = (
    # (figure, knob, where each trainer keeps it)
    ("response budget of a row (tokens)", "max_response_tokens", {
        "verl": "data.max_response_length", "trl": "max_completion_length",
        "cookbook": "dataset_builder.env_config.limits.max_response_tokens"}),
    ("first prompt (tokens)", "max_prompt_tokens", {
        "verl": "data.max_prompt_length",
        "cookbook": "dataset_builder.env_config.limits.max_prompt_tokens"}),
    ("temperature", "temperature", {
        "verl": "actor_rollout_ref.rollout.temperature", "trl": "temperature",
        "cookbook": "temperature"}),
    ("top_p", "top_p", {"verl": "actor_rollout_ref.rollout.top_p", "trl": "top_p"}),
    ("validation temperature", "val_temperature", {
        "verl": "actor_rollout_ref.rollout.val_kwargs.temperature"}),
    ("validation top_p", "val_top_p", {"verl": "actor_rollout_ref.rollout.val_kwargs.top_p"}),
    ("validation samples (false: greedy)", "val_do_sample", {
        "verl": "actor_rollout_ref.rollout.val_kwargs.do_sample"}),
    ("validation samples per task", "val_n", {
        "verl": "actor_rollout_ref.rollout.val_kwargs.n", "trl": "num_generations_eval"}),
)  # fmt: skip


def _lookup(settings: dict[str, Any], key: str) -> Any:
    """A dotted key of the emitted settings (``dataset_builder.env_config`` is nested)."""
    if key in settings:
        return settings[key]
    head, _, rest = key.partition(".env_config.")
    value: Any = settings.get(f"{head}.env_config") if rest else None
    for part in rest.split(".") if rest else ():
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _cell(emitted: Emitted, knob: str, key: str | None) -> str:
    if key is not None and _lookup(emitted.settings, key) is not None:
        return f"`{json.dumps(_lookup(emitted.settings, key))}`"
    why = emitted.left_out.get(knob)
    return f"not set: {why}" if why else "not set"


def figures_table(half: TrainerHalf, emitted: dict[str, Emitted]) -> list[str]:
    original = original_figures(half)
    lines = [
        f"| figure | original ({half.original.repo}) | " + " | ".join(emitted) + " |",
        "|---" * (2 + len(emitted)) + "|",
    ]
    batch = [f"**{original.describe()}**"]
    for target, e in emitted.items():
        figures = e.batch.figures.describe()
        batch.append(f"{figures} (differs: see {target} below)" if e.batch.differs else figures)
    lines.append("| batch, in rows | " + " | ".join(batch) + " |")
    for figure, knob, keys in _ROWS:
        knob_of = half.knob(knob)
        if knob_of is None:
            continue
        first = f"`{json.dumps(knob_of.value)}` ({knob_of.source})"
        cells = [_cell(e, knob, keys.get(target)) for target, e in emitted.items()]
        lines.append(f"| {figure} | {first} | " + " | ".join(cells) + " |")
    return lines


def preset_sheet(half: TrainerHalf) -> str:
    """The Markdown section docs/presets.md shows for ``half``."""
    emitted = {target: emit(half, target) for target in TARGETS}
    lines = [f"#### `{half.preset}`", "", *figures_table(half, emitted), ""]
    for target, e in emitted.items():
        if e.batch.differs:
            lines += [f"Where the {target} batch differs: {e.batch.differs}.", ""]
    verl = " \\\n    ".join(
        ["python3 -m verl.trainer.main_ppo", *verl_command_line(emitted["verl"])]
    )
    needs = "<!-- snippet: needs GPUs, verl 0.9.1 and the task rows (verl_rows) -->"
    lines += ["verl 0.9.1:", "", needs, "```bash", verl, "```", ""]
    trl = dict(emitted["trl"].settings)
    lines += ["TRL `GRPOConfig(**kwargs)`:", "", "```json", json.dumps(trl, indent=1), "```"]
    for key, value in emitted["trl"].batch.requires.items():
        lines += ["", f"and {key} = {value}."]
    cookbook = json.dumps(emitted["cookbook"].settings, indent=1)
    lines += ["", "Tinker cookbook `rl.train.Config` fields:", "", "```json", cookbook, "```", ""]
    return "\n".join(lines)
