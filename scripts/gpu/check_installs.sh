#!/usr/bin/env bash
# Check that the GPU install lines the README gives resolve, without installing anything:
# `pip install --dry-run` for verl's stack, `uv pip install --dry-run` for AReaL's (AReaL settles its
# pins with uv overrides, which pip does not have). Needs the package registries; not part of CI.
#
#   bash scripts/gpu/check_installs.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/venv"
PIP=("$WORK/venv/bin/pip" install --dry-run --quiet --report "$WORK/report.json")
"$WORK/venv/bin/pip" install -q --upgrade pip uv 2>/dev/null
status=0

summary() {  # the versions a resolution picked, for the lines that matter
  python3 - "$WORK/report.json" <<'PY'
import json, sys
picked = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.load(open(sys.argv[1]))["install"]}
print("  " + ", ".join(f"{n} {picked[n]}" for n in ("torch", "vllm", "verl", "transferqueue", "transformers", "mcp", "pydantic", "ray") if n in picked))
PY
}

echo "== verl on GPUs: pip install -e '.[verl]' 'verl[vllm]==0.9.1', then aworld --no-deps"
if "${PIP[@]}" -e ".[verl]" "verl[vllm]==0.9.1" 2>"$WORK/pip-verl.log"; then echo "  resolves"; summary; else echo "  DOES NOT RESOLVE"; status=1; fi
if "${PIP[@]}" --no-deps "aworld==0.3.2" 2>>"$WORK/pip-verl.log"; then echo "  aworld 0.3.2 (--no-deps) resolves"; else status=1; fi

echo "== AReaL on GPUs: scripts/areal/install_gpu_env.sh's lines"
if "$WORK/venv/bin/uv" pip install --dry-run --python "$WORK/venv/bin/python" \
  --override scripts/areal/areal-overrides.txt --override scripts/areal/aworld-overrides.txt \
  "areal[sglang]==1.0.4" "mcp[cli]==1.30.0" -r scripts/areal/aworld-runtime.txt >"$WORK/uv.log" 2>&1; then
  echo "  resolves: $(grep -c '^ + ' "$WORK/uv.log") packages;" \
    "$(grep -E '^ \+ (areal|sglang|torch|transformers|mcp)==' "$WORK/uv.log" | tr -d ' +' | tr '\n' ' ')"
else
  echo "  DOES NOT RESOLVE"; tail -5 "$WORK/uv.log"; status=1
fi
echo "== the plain pip line AReaL's docs give (expected to fail: pip has no overrides)"
if "${PIP[@]}" "areal[sglang]==1.0.4" >"$WORK/pip-areal.log" 2>&1; then echo "  resolves"; else echo "  does not resolve with pip (use scripts/areal/install_gpu_env.sh)"; fi
exit $status
