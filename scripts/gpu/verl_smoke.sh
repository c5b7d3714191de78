#!/usr/bin/env bash
# One GRPO step of the calculator agent on verl, on a machine with one H100/H200.
# Not part of CI. Needs the package with the verl extra plus verl's GPU stack, then aworld without
# its deps (its mcp pin clashes with vLLM's pydantic; scripts/gpu/check_installs.sh checks these lines):
#   pip install -e ".[verl]" "verl[vllm]==0.9.1" && pip install --no-deps aworld==0.3.2
# The model is a tiny random Llama built from files in scripts/gpu/tiny_model/ (no hub needed);
# MODEL=/path/to/a/transformers/folder uses another one.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${RUN:-runs/verl_smoke}
if [ -z "${MODEL:-}" ]; then
  MODEL=$(python scripts/gpu/make_tiny_model.py "${TMPDIR:-/tmp}/aworld-train-tiny-model")
fi
nvidia-smi --query-gpu=name,memory.total --format=csv
python -m aworld_train.facade.cli run examples/calculator/grpo_verl.yaml \
  "model=$MODEL" "trainer.run_dir=$RUN" trainer.steps=1 trainer.eval_every=0 trainer.save_every=0 \
  trainer.eval_before=false data.batch_size=4
grep -E "step:1|training/global_step" "$RUN/verl.log" | tail -3
