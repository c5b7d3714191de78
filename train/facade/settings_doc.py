"""docs/SETTINGS.md: every setting of the config with its type, default and description, written
from the config's models (inputs/settings_catalog.py), so that the page cannot drift from them:

    python -m aworld_train.facade.settings_doc > docs/SETTINGS.md

tests/test_settings_doc.py fails when the page and the models differ."""

from __future__ import annotations

import sys

from aworld_train.inputs.settings_catalog import TOP, Setting, catalog

INTRO = """# Settings

Every setting a run config can hold, with its type, default and what it does. This page is written
from the config's models: regenerate it with `python -m aworld_train.facade.settings_doc >
docs/SETTINGS.md` (tests/test_settings_doc.py fails while it is out of date). One config's values,
marked where the config sets them: `aworld-train render CONFIG --explain`.

A section's settings follow it (`algorithm.lora.rank`); `NAME` stands for an entry of a mapping
(`policies.NAME.lr`), `[]` for an entry of a list (`env[].port`). A default is written as JSON,
which YAML reads too.
"""


def _cell(text: str) -> str:
    """Markdown table cell text: a pipe ends a cell, and <name> would read as an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def _row(setting: Setting) -> str:
    return (
        f"| `{_cell(setting.name)}` | `{_cell(setting.type)}` | `{_cell(setting.default)}` "
        f"| {_cell(setting.description)} |"
    )


def markdown() -> str:
    settings = catalog()
    lines = [INTRO]
    sections = [s for s in settings if s.section != TOP and s.name == s.section]
    groups = [("top level", None, [s for s in settings if s.section == TOP])] + [
        (head.name, head, [s for s in settings if s.section == head.name and s is not head])
        for head in sections
    ]
    for title, head, rows in groups:
        lines.append(f"## {title}\n")
        if head is not None:
            shape = "" if head.type == "section" else f" A `{_cell(head.type)}`, default `{head.default}`."
            lines.append(f"{head.description[:1].upper()}{head.description[1:]}.{shape}\n")
        lines += ["| setting | type | default | description |", "|---|---|---|---|"]
        lines += [_row(s) for s in rows]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown())
