"""What every episode of a run obeys: turn and token limits, sampling, timeouts, the tool-call
format, concurrency. The config's `rollout:` section; defined here so that the rollout core
needs nothing of the config."""

from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aworld_train.rollout.episodes.agent_endpoint import AgentEndpoint


class RolloutSettings(BaseModel):
    """The `rollout:` section of the config."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        """`max_turns` counted assistant turns, not turns: still read, with a warning naming the new key."""
        if not isinstance(data, dict) or "max_turns" not in data:
            return data
        data = dict(data)
        old = data.pop("max_turns")
        if "max_assistant_turns" in data and data["max_assistant_turns"] != old:
            raise ValueError(
                f"max_turns={old} and max_assistant_turns={data['max_assistant_turns']} are one setting "
                "(max_turns is its old name): keep max_assistant_turns"
            )
        warnings.warn(
            "rollout.max_turns is now rollout.max_assistant_turns (it counts LLM calls per user turn); "
            "the old name will be refused in a later release",
            FutureWarning,
            stacklevel=2,
        )
        data["max_assistant_turns"] = old
        return data

    max_assistant_turns: int = Field(
        4,
        ge=1,
        description="assistant turns (LLM calls, over all agents) per user turn; one more ends the "
        "episode max_turns; 4: a tool call or two and the answer (verl's multi_turn.max_assistant_turns)",
    )
    max_new_tokens: int = Field(
        128,
        ge=1,
        description="tokens one LLM call may sample (a call's max_tokens may lower it); 128 holds a tool call "
        "or a short answer (AReaL: gconfig.max_new_tokens; verl: each call's max_tokens)",
    )
    max_total_tokens: int = Field(
        4096,
        ge=16,
        description="ledger length in tokens (prompt, replies, tool results) at which an episode stops; "
        "per segment: an agent that rewrites its history starts again from its new prompt, and a new "
        "prompt this long ends the episode segment_too_long; 4096 holds a few tool turns within a small "
        "model's context",
    )
    max_prompt_tokens: int | None = Field(
        None,
        ge=1,
        description="longest prompt of a segment: a longer first prompt ends the episode prompt_too_long, "
        "a longer prompt an agent rewrote its history into (a summary, a trimmed history) "
        "segment_too_long (verl's max_prompt_length)",
    )
    max_response_tokens: int | None = Field(
        None,
        ge=1,
        description="tokens after a segment's prompt (the first, or one the agent rewrote its history "
        "into) at which an episode stops (verl's response_length: each segment is an output row)",
    )
    temperature: float = Field(
        1.0,
        ge=0,
        description="sampling temperature of training episodes; 1.0 samples the policy as it is, so a "
        "group varies; 0 is greedy (verl: actor_rollout_ref.rollout.temperature; AReaL: gconfig.temperature)",
    )
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="sample from the most likely tokens whose probability adds up to top_p; 1.0 keeps every "
        "token (verl: actor_rollout_ref.rollout.top_p; AReaL: gconfig.top_p)",
    )
    top_k: int = Field(
        0,
        ge=0,
        description="sample from the k most likely tokens; 0 disables top-k (verl: "
        "actor_rollout_ref.rollout.top_k, 0 as -1; AReaL: gconfig.top_k)",
    )
    tool_parser: str = Field(
        "auto",
        description="the tool-call format to parse: auto (the chat template family's parser where it reads the "
        "template's own calls, else the parser derived from the template), template (the derived parser), or a "
        "parser's name (hermes, hermes_lenient, llama3_json, qwen3_coder, glm45, mistral, deepseek, kimi_k2, "
        "harmony, granite, pythonic)",
    )
    tool_block: Literal["auto", "never"] = Field(
        "auto",
        description="auto adds the tool list to the system turn when the chat template ignores tools=, so "
        "the model sees its tools; never leaves it out (few-shot turns show the calls)",
    )
    tool_results_as_user: bool = Field(
        False,
        description="write tool results as user turns (in <tool_response> tags), for chat templates without a "
        "tool role that drop or refuse tool messages (Phi-3.5, Gemma-2)",
    )
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="extra chat-template variables, e.g. {enable_thinking: false} for Qwen3",
    )
    episode_timeout_s: float = Field(
        120.0,
        gt=0,
        description="seconds the agent and its tools may take; time waiting for or inside the policy does "
        "not count, so a slow sampler fails no episode",
    )
    episode_wall_timeout_s: float = Field(
        3600.0,
        gt=0,
        description="wall-clock seconds of one episode, policy queue included: a guard against hangs, an "
        "hour so that it never cuts a working episode",
    )
    tool_timeout_s: float = Field(
        30.0,
        gt=0,
        description="seconds a tool call may wait for its result before the episode ends tool_timeout; 30 "
        "lets a web search or a sandboxed program finish",
    )
    concurrency: int = Field(
        16,
        ge=1,
        description="episodes at once (over all workers); 16, so that the policy batches some calls while "
        "others wait on their tools (AReaL: rollout.max_concurrent_rollouts)",
    )
    workers: int = Field(
        1,
        ge=1,
        description="processes that run episodes (AWorld's loop is CPU-bound per process); "
        "the policy stays in the main process (local backend and eval); 1: no process to start",
    )
    engine: Literal["transformers", "vllm"] = Field(
        "transformers",
        description="what samples the local backend's rollouts: transformers (the trainer's own model, in "
        "its process) or vllm (vLLM's own engine in a server process of its own, make setup-vllm; the "
        "trainer's weights pushed to it after every update; verl: actor_rollout_ref.rollout.name)",
    )
    vllm_kv_cache_gib: float = Field(
        2.0,
        gt=0,
        description="rollout.engine vllm: vLLM's key/value cache in GiB (VLLM_CPU_KVCACHE_SPACE); 2, room "
        "for a small model's episodes at the default limits",
    )
    max_batch_size: int = Field(
        64,
        ge=1,
        description="requests the local policy batches into one forward pass; 64, above the default "
        "concurrency, so that every waiting call joins the batch",
    )
    prefix_cache_mb: float = Field(
        256,
        ge=0,
        description="MB the local policy keeps for keys/values of prompts seen (prefix reuse: an agent's "
        "next turn starts from its last); 0 turns it off",
    )
    train_on_malformed: bool = Field(
        False,
        description="keep episodes that end on a malformed tool call in the loss, at reward 0: a call "
        "that could not be parsed, breaks its tool_choice, or names a tool the call does not offer",
    )
    frozen_agents: list[str] = Field(
        default_factory=list,
        description="agents of a multi-agent swarm that do not train: their calls still go to the policy, "
        "their tokens carry no loss",
    )
    agent_endpoints: dict[str, AgentEndpoint] = Field(
        default_factory=dict,
        description="agents of a swarm answered by another OpenAI-compatible chat endpoint instead of the "
        "policy: {name: {base_url, model, api_key}}; they do not train",
    )

    @field_validator("tool_parser")
    @classmethod
    def _known_parser(cls, value: str) -> str:
        from aworld_train.rollout.tokens.calls.registry import AUTO, TEMPLATE, parser_names

        if value not in (AUTO, TEMPLATE) and value not in parser_names():
            raise ValueError(
                f"{value!r} is no tool parser; use auto, template or one of {', '.join(parser_names())}"
            )
        return value
