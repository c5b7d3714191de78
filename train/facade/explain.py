"""`aworld-train render CONFIG --explain`: every setting of one config, grouped by section, with
its value in this config (marked where the config or an override sets it), its default and what it
does (inputs/settings_catalog.py reads them off the config's models)."""

from __future__ import annotations

import textwrap

from aworld_train.inputs.config import TrainConfig
from aworld_train.inputs.settings_catalog import TOP, Reading, readings

MARK = "*"
LEGEND = (
    f"{MARK} the config or an override sets it; - no entry of this config holds it; values and defaults "
    "as JSON (YAML reads it too)"
)


def _lines(reading: Reading) -> list[str]:
    setting = reading.setting
    mark = MARK if reading.user_set else " "
    head = f"{mark} {reading.name} = {reading.value}  (default {setting.default})"
    body = textwrap.wrap(setting.description, width=100, initial_indent="      ", subsequent_indent="      ")
    return [head, *body]


def explain(config: TrainConfig, source: str) -> str:
    """The settings of `config` (read from `source`) as text, a block per section."""
    rows = readings(config)
    blocks = [f"settings of {source}; {LEGEND}", "", "top level"]
    blocks += [line for r in rows if r.setting.section == TOP for line in _lines(r)]
    for head in rows:
        setting = head.setting
        if setting.section == TOP or setting.name != setting.section:
            continue
        mark = MARK if head.user_set else " "
        shown = "" if setting.type == "section" else f" = {head.value}  (default {setting.default})"
        blocks += [
            "",
            *textwrap.wrap(
                f"{mark} {setting.name}{shown}: {setting.description}", 106, subsequent_indent="      "
            ),
        ]
        blocks += [
            line for r in rows if r.setting.section == setting.name and r is not head for line in _lines(r)
        ]
    return "\n".join(blocks) + "\n"
