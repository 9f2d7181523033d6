#!/usr/bin/env bash
# The prepared accelerator check: every table that needs a GPU/TPU, in one call with time limits
# (under 10 minutes), for a machine that has JAX with the accelerator but maybe no network.
#
#   launch/device_check.sh [OUT_DIR]        # default: $OUT, else ./device_out
#   PARTS="env kernel attention train beam beambatch" launch/device_check.sh   # beam parts are off by default
#
# Offline machine: run launch/device_wheels.sh where pip works and bring the .whl folder along;
# its wheels are installed with --no-deps into /tmp/slm_site (the machine's jax, jaxlib, triton,
# flax, optax and orbax stay). Writes env.txt (versions, backend, which modules import),
# kernel.txt (benchmarks/kernel_check.py: fused kernel vs xla_attention, outputs and gradients),
# attention.txt (benchmarks/attention_bench.py at T = 2048/4096/8192: fused kernels vs causal
# flash, forward and forward+backward, block-skip fractions; xla_attention too at 2048),
# train.txt (train steps/s by attention type), beam.txt (KV cache vs recompute, if asked),
# beambatch.txt (one-sentence vs batched beam search, exactness, if asked) and
# status.txt (exit code and seconds of each part).
# GUM rows: run `python benchmarks/attention_bench.py --skip-speed
# --rows-cache benchmarks/.cache/gum_rows.npz` where ../shared/data/gum exists and carry that file
# along (it is git-ignored); without it the bench packs the embedded treebank instead.
set -uo pipefail
out=${1:-${OUT:-device_out}}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python=${PYTHON:-python3}
parts=" ${PARTS:-env kernel attention train} "
if [[ -d .whl ]] && ls .whl/*.whl > /dev/null 2>&1; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/slm_site .whl/*.whl > "$out/wheels.txt" 2>&1 \
    && export PYTHONPATH="/tmp/slm_site:$PYTHONPATH"
  echo "wheels rc=$? ($(ls .whl | wc -l) from .whl)" >> "$out/wheels.txt"
fi

part() {  # part NAME SECONDS COMMAND...  (runs only if NAME is in $PARTS)
  local name=$1 seconds=$2
  shift 2
  [[ $parts == *" $name "* ]] || return 0
  local start=$SECONDS
  timeout "$seconds" "$@" > "$out/$name.txt" 2>&1
  echo "$name rc=$? seconds=$((SECONDS - start))" >> "$out/status.txt"
}

: > "$out/status.txt"
part env 60 "$python" - <<'PY'
import importlib, platform
import jax
print("python", platform.python_version(), "jax", jax.__version__, "backend", jax.default_backend())
print("devices", jax.devices())
for module in ("jax_triton", "triton", "flax", "optax", "orbax.checkpoint", "grain", "clu",
               "ml_collections", "numpy"):
  try:
    version = getattr(importlib.import_module(module), "__version__", "?")
    print(f"{module:18s} {version}")
  except Exception as error:  # a broken import is reported, not fatal
    print(f"{module:18s} MISSING ({type(error).__name__}: {error})")
from slm_jax.model.attention import resolve_attention_impl
print("attention_impl=auto resolves to", resolve_attention_impl("auto"))
PY
rows=()
[[ -f benchmarks/.cache/gum_rows.npz ]] && rows=(--rows-cache benchmarks/.cache/gum_rows.npz)
part kernel 120 "$python" benchmarks/kernel_check.py
part attention 330 "$python" benchmarks/attention_bench.py --lengths 2048,4096,8192 \
  --xla-lengths 2048 "${rows[@]}"
part train 80 "$python" benchmarks/train_bench.py --steps 10
part beam 150 "$python" benchmarks/beam_bench.py --no-naive
part beambatch 150 "$python" benchmarks/beam_bench.py --batched --sentences 8 \
  --sentences-per-batch 8 --repeats 1
# Issue 46 (asked by name): beamexact.txt, one-sentence vs batched search on the GPU (fixed row
# chunks: differing words should be 0); sgloop.txt, host rounds vs the compiled word loop
# (words/s, exactness), then the 1B full-SG projection (a 2-layer model of 1B widths).
part beamexact 150 "$python" benchmarks/beam_bench.py --batched --sentences 8 \
  --sentences-per-batch 8 --repeats 1
part sgloop 300 "$python" benchmarks/beam_bench.py --loop --sentences 8 --repeats 1 \
  --project 1b --project-layers 2
cat "$out/status.txt"
