#!/usr/bin/env bash
# One GRPO step of the calculator agent on AReaL, on a machine with one H100/H200.
# Not part of CI. AReaL 1.0.4 pins torch<2.11 and transformers<=5.3, so it needs its own
# environment, apart from the [verl] one (see README, "The AReaL backend"), built with uv and
# AReaL's own dependency overrides (plain pip cannot resolve areal[sglang]):
#   bash scripts/areal/install_gpu_env.sh .venv-areal . && . .venv-areal/bin/activate
# The model is a tiny random Llama built from files in scripts/gpu/tiny_model/ (no hub needed);
# MODEL=/path/to/a/transformers/folder uses another one.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${RUN:-runs/areal_smoke}
if [ -z "${MODEL:-}" ]; then
  MODEL=$(python scripts/gpu/make_tiny_model.py "${TMPDIR:-/tmp}/aworld-train-tiny-model")
fi
nvidia-smi --query-gpu=name,memory.total --format=csv
# One GPU: SGLang and the FSDP actor share it, SGLang holding a fraction of its memory.
python -m aworld_train.facade.cli run examples/calculator/grpo_areal.yaml \
  "model=$MODEL" "trainer.run_dir=$RUN" trainer.steps=1 trainer.eval_every=0 trainer.save_every=0 \
  trainer.eval_before=false data.batch_size=4 areal.cluster.n_gpus_per_node=1
grep -E "global_step|Train step|step 1" "$RUN/areal.log" | tail -3
