#!/usr/bin/env bash
# The prepared accelerator check: every speed table that needs a GPU/TPU, in one call with time
# limits (about 8 minutes), for a machine that has JAX with the accelerator but maybe no network.
#
#   launch/device_check.sh [OUT_DIR]        # default: $OUT, else ./device_out
#
# Writes env.txt (JAX, backend, devices, which optional modules import), attention.txt
# (benchmarks/attention_bench.py at T = 2048/4096/8192: fused structural kernels vs causal flash,
# forward and forward+backward, block-skip fractions), beam.txt (KV cache vs recompute),
# train.txt (train steps/s by attention type) and status.txt (exit code of each part).
# GUM rows: run `python benchmarks/attention_bench.py --skip-speed
# --rows-cache benchmarks/.cache/gum_rows.npz` where ../shared/data/gum exists and carry that file
# along (it is git-ignored); without it the bench packs the embedded treebank instead.
set -uo pipefail
out=${1:-${OUT:-device_out}}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python=${PYTHON:-python3}

part() {  # part NAME SECONDS COMMAND...
  local name=$1 seconds=$2
  shift 2
  local start=$SECONDS
  timeout "$seconds" "$@" > "$out/$name.txt" 2>&1
  echo "$name rc=$? seconds=$((SECONDS - start))" >> "$out/status.txt"
}

: > "$out/status.txt"
part env 60 "$python" - <<'PY'
import importlib.util, platform
import jax
print("python", platform.python_version(), "jax", jax.__version__, "backend", jax.default_backend())
print("devices", jax.devices())
for module in ("jax_triton", "triton", "flax", "optax", "orbax.checkpoint", "grain", "clu"):
  print(f"{module:18s}", "ok" if importlib.util.find_spec(module) else "MISSING")
PY
rows=()
[[ -f benchmarks/.cache/gum_rows.npz ]] && rows=(--rows-cache benchmarks/.cache/gum_rows.npz)
part attention 330 "$python" benchmarks/attention_bench.py --lengths 2048,4096,8192 "${rows[@]}"
part beam 150 "$python" benchmarks/beam_bench.py --no-naive
part train 90 "$python" benchmarks/train_bench.py --steps 10
cat "$out/status.txt"
