"""verl's agent-loop worker, as far as our loop meets it: its LLM server client scripted, the
registry and Hydra instantiation it builds a loop with, and a row of the rendered parquet as the
keyword arguments it passes (tests/test_verl_loop.py, tests/test_verl_tool_parity.py,
tests/test_engine_parity.py)."""

from __future__ import annotations

from omegaconf import OmegaConf


class FakeLLMServerClient:
    """verl's LLMServerClient.generate contract, replying from a script keyed on the prompt."""

    def __init__(self, tokenizer, reply):
        self.tokenizer = tokenizer
        self.reply = reply
        self.calls = []
        self.outputs = []
        self.global_step = 7  # the weight version verl's servers report; moved on by tests

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        text = self.reply(self.tokenizer.decode(prompt_ids))
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [
            self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ]
        ids = ids[: sampling_params.get("max_tokens", len(ids))]
        self.outputs.append(ids)
        steps = {"min_global_steps": self.global_step, "max_global_steps": self.global_step}
        self.global_step += 1
        return TokenOutput(
            token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed", extra_fields=steps
        )


def instantiate_like_verl(run, tokenizer, server):
    """What AgentLoopWorker does: register from agent_loop.yaml, then hydra-instantiate per sample."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    for entry in OmegaConf.load(run.final.actor_rollout_ref.rollout.agent.agent_loop_config_path):
        _agent_loop_registry[entry.name] = entry
    return hydra.utils.instantiate(
        config=_agent_loop_registry["aworld_agent"],
        trainer_config=DictConfigWrap(config=run.final),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="llama",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(run.final.data),
        tools=ToolListWrap([]),
    )


def row_kwargs(run, index=0, file="train.parquet"):
    import pyarrow.parquet as pq

    row = pq.read_table(run.folder / file).to_pylist()[index]
    kwargs = {k: v for k, v in row.items() if k not in ("prompt", "agent_name")}
    kwargs["raw_prompt"] = row["prompt"]
    return kwargs
