"""What a run learns from its model's chat template before any model loads: the family, the
tool-call parser, the stop ids, and whether tool results reach the model at all."""

from __future__ import annotations

from dataclasses import dataclass

from aworld_train.errors import ConfigError
from aworld_train.models import stop_token_ids
from aworld_train.rollout.chat import ChatRenderer
from aworld_train.rollout.settings import RolloutConfig
from aworld_train.rollout.tool_parser import AUTO


@dataclass(frozen=True)
class TemplateReport:
    family: str
    parser: str
    parser_chosen: bool  # rollout.tool_parser named it (else auto)
    stop_tokens: tuple[str, ...]
    problem: str | None  # why tool results cannot reach the model, or None

    def line(self) -> str:
        how = "rollout.tool_parser" if self.parser_chosen else "auto"
        return (
            f"{self.family} template; tool parser {self.parser} ({how}); "
            f"stop tokens {', '.join(self.stop_tokens)}"
        )


def template_report(tokenizer, rollout: RolloutConfig) -> TemplateReport:
    renderer = ChatRenderer(
        tokenizer, tool_block=rollout.tool_block, template_kwargs=rollout.chat_template_kwargs
    )
    chosen = rollout.tool_parser != AUTO
    stops = tuple(tokenizer.decode([i]) for i in stop_token_ids(tokenizer))
    return TemplateReport(
        renderer.family.name,
        rollout.tool_parser if chosen else renderer.parser,
        chosen,
        stops,
        renderer.tool_results_problem,
    )


def require_tool_results(report: TemplateReport, model: str) -> None:
    """Refuse a template that drops tool results: nothing would train on what the tools said."""
    if report.problem:
        raise ConfigError(
            f"model {model!r}: {report.problem}, so no tool result would reach the model; use a model "
            "whose chat template renders 'tool' messages, or give the model folder such a template "
            "(chat_template.jinja)"
        )
