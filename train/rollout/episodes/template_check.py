"""What a run learns from its model's chat template before any model loads: the family, the
tool-call parser (and whether any parser reads the template's calls), the stop ids, and whether
tool results reach the model at all."""

from __future__ import annotations

from dataclasses import dataclass

from aworld_train.core.errors import ConfigError
from aworld_train.rollout.episodes.settings import RolloutSettings
from aworld_train.rollout.tokens.templates.renderer import renderer_for
from aworld_train.rollout.tokens.turns.stops import stop_token_ids

AS_USER_FIX = (
    "set rollout.tool_results_as_user: true to write tool results as user turns (how models without a "
    "tool role are trained), or use a model whose chat template renders 'tool' messages"
)


@dataclass(frozen=True)
class TemplateReport:
    family: str
    parser: str
    how: str  # auto | template | rollout.tool_parser: how the parser was chosen
    stop_tokens: tuple[str, ...]
    problem: str | None  # why tool results cannot reach the model, or None
    calls_problem: str | None = None  # why no parser reads the template's tool calls, or None

    def line(self) -> str:
        how = "auto" if self.how == "auto" else "rollout.tool_parser"
        return (
            f"{self.family} template; tool parser {self.parser} ({how}); "
            f"stop tokens {', '.join(self.stop_tokens)}"
        )


def template_report(tokenizer, rollout: RolloutSettings) -> TemplateReport:
    renderer = renderer_for(tokenizer, rollout)
    stops = tuple(tokenizer.decode([i]) for i in stop_token_ids(tokenizer))
    calls = renderer.calls
    return TemplateReport(
        renderer.family.name,
        calls.name,
        calls.how,
        stops,
        renderer.tool_results_problem,
        calls.problem,
    )


def refusal(report: TemplateReport) -> str | None:
    """Why a run cannot train with this template, with the fix; None where it can."""
    if report.calls_problem:
        return report.calls_problem
    if report.problem:
        return f"{report.problem}, so no tool result would reach the model; {AS_USER_FIX}"
    return None


def require_usable_template(report: TemplateReport, model: str) -> None:
    """Refuse a template whose calls no parser reads, or that drops tool results: the run would
    take calls for answers, or train on nothing the tools said."""
    why = refusal(report)
    if why:
        raise ConfigError(f"model {model!r}: {why}")
