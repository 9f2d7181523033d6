#!/usr/bin/env bash
# The prepared accelerator check: every table that needs a GPU, in one call of at most 9 minutes
# on one GPU, for a machine that has JAX with the accelerator but maybe no network.
#
#   launch/device_check.sh [OUT_DIR]          # default: $OUT, else ./device_out
#   PARTS="env kernel profiles" launch/device_check.sh     # only these parts
#   DRY=1 launch/device_check.sh OUT          # CPU dry run: every part, tiny sizes, Triton kernels
#                                             # under the interpreter (catches a broken script
#                                             # before device time is spent on it)
#
# Parts, most valuable first, each with its own time limit (seconds); BUDGET (default 540 = 9
# minutes) bounds the whole run: a part starts only if BUDGET has at least MIN_PART (20) seconds
# left and is limited to what is left. WHAT IS CUT WHEN TIME IS SHORT: the last parts first —
# sgloop, then train100m's last configurations (its --budget: the causal controls and pause
# rows go first; the lin2 family is measured before them), then attention, then profile buckets
# beyond T 2048 (its --budget); attention times T 2048 and 8192 only (4096 is cut up front).
#   env          20  versions, backend, chip, what imports                            env.txt
#   kernel      110  benchmarks/kernel_check.py: fused kernel vs xla_attention        kernel.txt
#                    (outputs and gradients; the chip's table profile on all cases, then
#                    old_split's full-tile loop on causal and mix(causal,tg))
#   beamexact    60  batched vs one-sentence beam search on the GPU (issue 46 item 3:  beamexact.txt
#                    fixed 64-row chunks; differing words should be 0)
#   profiles    100  benchmarks/launch_profiles_bench.py: every candidate profile     profiles.txt
#                    timed per bucket through the autotuner; its cache is written to
#                    OUT/triton_launch_cache.json and read back; the best profile's name
#                    goes to OUT/best_profile.txt for the next parts (item 1)
#   attention    80  benchmarks/attention_bench.py at T 2048/8192 with that profile    attention.txt
#                    vs cuDNN causal (the goal: structural ≥ 0.9×, hybrid ≥ 0.85×)
#   train100m   150  benchmarks/train_bench.py --scale 100m: tokens/s, MFU, ratio to   train100m.txt
#                    terminal for the 12 configurations + pause, paper Table 9 layout (item 5)
#   sgloop       40  host rounds vs the compiled SG word loop (issue 46 item 4:        sgloop.txt
#                    words/s, same results), then the 1B full-SG projection (a model of
#                    1B widths with 2 layers; not in the dry run); the loop's table is
#                    printed first, so a cut projection still leaves it
# status.txt: each part's exit code and seconds ("cut" when no time was left); REPORT.md: every
# part's output under a heading, the tables for a docs/DEVICE_<chip>.md.
#
# Offline machine: run launch/device_wheels.sh where pip works and bring the .whl folder along;
# its wheels are installed with --no-deps into /tmp/slm_site (the machine's jax, jaxlib, triton,
# flax, optax and orbax stay). GUM rows: run `python benchmarks/attention_bench.py --skip-speed
# --rows-cache benchmarks/.cache/gum_rows.npz` where ../shared/data/gum exists and carry that file
# along (it is git-ignored); without it the bench packs the embedded treebank instead.
set -uo pipefail
out=${1:-${OUT:-device_out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python=${PYTHON:-python3}
parts=" ${PARTS:-env kernel beamexact profiles attention train100m sgloop} "
budget=${BUDGET:-540}
min_part=${MIN_PART:-20}
dry=${DRY:-}
deadline=$((SECONDS + budget))
if [[ -n $dry ]]; then
  export JAX_PLATFORMS=cpu
fi
if [[ -z $dry ]] && [[ -d .whl ]] && ls .whl/*.whl > /dev/null 2>&1; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/slm_site .whl/*.whl > "$out/wheels.txt" 2>&1 \
    && export PYTHONPATH="/tmp/slm_site:$PYTHONPATH"
  echo "wheels rc=$? ($(ls .whl | wc -l) from .whl)" >> "$out/wheels.txt"
fi

order=()
part() {  # part NAME SECONDS COMMAND...  (runs only if NAME is in $PARTS and time is left)
  local name=$1 seconds=$2
  shift 2
  [[ $parts == *" $name "* ]] || return 0
  order+=("$name")
  local left=$((deadline - SECONDS))
  if ((left < min_part)); then
    echo "$name cut: ${left} s left of BUDGET=${budget}" >> "$out/status.txt"
    return 0
  fi
  ((seconds > left)) && seconds=$left
  local start=$SECONDS
  timeout "$seconds" "$@" > "$out/$name.txt" 2>&1
  echo "$name rc=$? seconds=$((SECONDS - start)) limit=$seconds" >> "$out/status.txt"
}

# Sizes: the device's, or tiny ones for the dry run (the same commands and options otherwise).
rows=()
[[ -f benchmarks/.cache/gum_rows.npz ]] && rows=(--rows-cache benchmarks/.cache/gum_rows.npz)
if [[ -n $dry ]]; then
  kernel=(--interpret --length 64 --heads 2 --kv-heads 1 --head-dim 16)
  profiles=(--interpret --buckets "tg:32,mix(causal,tg):32,causal:32" --tokens 64 --heads 2
            --kv-heads 1 --head-dim 16 --profiles old,lean_split --budget 60)
  attention=(--lengths 64 --small-length 64 --tokens 128 --heads 2 --kv-heads 1 --head-dim 16
             --repeats 1 --plan-rows 2)
  train=(--scale tiny --batch 2 --steps 1 --names terminal,tgtree,tg,tgtree_mix_tg --budget 60)
  beam=(--sentences 2 --sentences-per-batch 2 --repeats 1 --beam 8 --fast-track 2 --min-words 3
        --max-words 4)
  project=()  # the projection compiles two more loops: past the part's 40 s on CPU
else
  kernel=()
  profiles=(--budget 75)
  attention=(--lengths 2048,8192 "${rows[@]}")
  train=(--scale 100m --batch 8 --steps 5 --budget 120)
  beam=(--sentences 8 --sentences-per-batch 8 --repeats 1)
  project=(--project 1b --project-layers 2)
fi

: > "$out/status.txt"
part env 20 "$python" - <<'PY'
import importlib, platform
import jax
print("python", platform.python_version(), "jax", jax.__version__, "backend", jax.default_backend())
print("devices", jax.devices())
for module in ("jax_triton", "triton", "flax", "optax", "orbax.checkpoint", "grain", "clu",
               "ml_collections", "numpy", "torch"):
  try:
    version = getattr(importlib.import_module(module), "__version__", "?")
    print(f"{module:18s} {version}")
  except Exception as error:  # a broken import is reported, not fatal
    print(f"{module:18s} MISSING ({type(error).__name__}: {error})")
from slm_jax.kernels import launch_profiles
from slm_jax.model.attention import resolve_attention_impl
print("attention_impl=auto resolves to", resolve_attention_impl("auto"))
chip = launch_profiles.current_chip()
entry = launch_profiles.CHIP_PROFILES.get(chip)
print("chip", chip, "table profile", entry.profile if entry else
      f"none (falls back to {launch_profiles.MEASURED_DEFAULT})")
PY
# The chip's table profile on every case, then the full-tile loop (old_split) where full tiles
# occur (causal heads).
part kernel 110 bash -c '"$0" benchmarks/kernel_check.py "$@" && "$0" benchmarks/kernel_check.py \
  --launch old_split --attentions "causal,mix(causal,tg)" "$@"' "$python" "${kernel[@]}"
# Issue 46 item 3: one-sentence vs batched search; the decoder computes fixed 64-row chunks, so
# the two should agree bit for bit on the GPU too.
part beamexact 60 "$python" benchmarks/beam_bench.py --batched "${beam[@]}"
part profiles 100 "$python" benchmarks/launch_profiles_bench.py "${profiles[@]}" \
  --cache "$out/triton_launch_cache.json" --best-file "$out/best_profile.txt"
best=table
[[ -s $out/best_profile.txt ]] && best=$(head -1 "$out/best_profile.txt")
part attention 80 "$python" benchmarks/attention_bench.py "${attention[@]}" --triton-launch "$best"
part train100m 150 env SLM_TRITON_LAUNCH="$best" "$python" benchmarks/train_bench.py "${train[@]}"
# Issue 46 item 4: host rounds vs the compiled word loop, then the projected 1B full-SG time.
# Unbuffered: a projection cut by the time limit leaves the loop table printed before it.
part sgloop 40 env PYTHONUNBUFFERED=1 "$python" benchmarks/beam_bench.py --loop "${beam[@]}" \
  "${project[@]}"

{
  echo "# Device check: $(date -u +%Y-%m-%d) ${dry:+(DRY run on CPU)}"
  echo
  echo '```'
  cat "$out/status.txt"
  echo '```'
  for name in "${order[@]}"; do
    [[ -f $out/$name.txt ]] || continue
    echo
    echo "## $name"
    echo
    grep -v -e '^nvdisasm warning' -e 'UserWarning' -e 'warn_once(' "$out/$name.txt"
  done
} > "$out/REPORT.md"
cat "$out/status.txt"
