"""Every setting a config can hold says what it does, and docs/SETTINGS.md lists them as the
models define them."""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel

from aworld_train.facade.settings_doc import markdown
from aworld_train.inputs.config import TrainConfig, load_config
from aworld_train.inputs.settings_catalog import catalog, readings

PAGE = Path(__file__).resolve().parents[1] / "docs" / "SETTINGS.md"


def _sections(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _sections(arg)]


def _fields(model: type[BaseModel], prefix: str = "") -> dict[str, str | None]:
    """Every field under `model`, found on its own (not by the catalog): dotted name -> description."""
    out: dict[str, str | None] = {}
    for name, field in model.model_fields.items():
        out[prefix + name] = field.description
        for section in _sections(field.annotation):
            out.update(_fields(section, f"{prefix}{name}."))
    return out


def test_every_config_field_says_what_it_does():
    fields = _fields(TrainConfig)
    # the walk reaches sections inside sections, lists and mappings of sections
    assert {"algorithm.lora.rank", "policies.lora.alpha", "env.port", "rollout.agent_endpoints.model"} <= set(
        fields
    )
    undescribed = sorted(name for name, description in fields.items() if not (description or "").strip())
    assert not undescribed, f"fields without a description: {undescribed}"


def test_the_catalog_lists_every_field():
    names = [s.name.replace("[]", "").replace(".NAME", "") for s in catalog()]
    assert sorted(names) == sorted(_fields(TrainConfig))


def test_the_settings_page_is_up_to_date():
    assert PAGE.read_text() == markdown(), (
        "docs/SETTINGS.md differs from the config's models: "
        "python -m aworld_train.facade.settings_doc > docs/SETTINGS.md"
    )


def test_a_setting_is_marked_where_the_config_sets_it():
    config = load_config(
        {"algorithm": {"lr": 2e-5, "lora": {"rank": 8}}, "env": [{"name": "calculator"}]},
        ["rollout.temperature=0.5"],
    )
    marked = {r.name for r in readings(config) if r.user_set}
    assert {"algorithm.lora", "algorithm.lora.rank", "env[0].name", "rollout.temperature"} <= marked
    assert not {"algorithm.lora.alpha", "env[0].port", "rollout.top_p", "trainer.steps"} & marked
    # as TrainConfig.fields_set says, where it looks (sections and their own fields)
    shallow = {r.name for r in readings(config) if r.name.count(".") <= 1 and "[" not in r.name}
    assert marked & shallow == set(config.fields_set())
    values = {r.name: r.value for r in readings(config)}
    assert values["algorithm.lora.alpha"] == "32.0" and values["policies.NAME.lr"] == "-"
