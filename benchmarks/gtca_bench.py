"""GTCA's cost (SPEC §10): training-step time and compiled peak memory with the branch vs without.

  python benchmarks/gtca_bench.py [--scales tiny,1b] [--batch 1] [--seq 256] [--repeats 2]
      [--vocab 32000] [--lora_rank 8]

A random float32 backbone per scale (`tiny`: d_model 128, 2 layers, 4 heads; `1b`: d_model 2048,
16 layers, 16 heads, mlp_ratio 8), LoRA r = `--lora_rank` on every projection, and one batch of
`--batch` rows of `--seq` tokens whose chunks tile the row (layer ℓ: spans of 2^(ℓ+1) tokens, the
first K = 64 of them). Three jitted train steps of `slm_jax.gtca.forward.make_gtca_train_step`
(AdamW on the trained part only), the SPEC §10 stages:
  stage 1 `lora`       LoRA only, no branch (the baseline),
  stage 2 `gtca`       the branch only, backbone and LoRA frozen (α = 0.15),
  stage 3 `lora+gtca`  both.
Per step: seconds (median of `--repeats` runs of the AOT-compiled step, compile excluded) and the
compiled step's memory (`compiled.memory_analysis()`: arguments + outputs + temporaries − aliased
(donated) bytes, and the temporaries alone), with ratios to stage 1 of the same scale, same run.
CPU timings on a shared machine are noisy: compare within a table.
"""

from __future__ import annotations

import math
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from slm_jax.benchtools import median_of, parser as make_parser, table  # noqa: E402
from slm_jax.gtca import forward  # noqa: E402
from slm_jax.gtca.branch import Gtca, GtcaConfig  # noqa: E402
from slm_jax.hf.scoring import plain_rows  # noqa: E402
from slm_jax.model import Decoder, ModelConfig  # noqa: E402

SHAPES = {"tiny": dict(d_model=128, n_layers=2, n_heads=4, mlp_ratio=4),
          "1b": dict(d_model=2048, n_layers=16, n_heads=16, mlp_ratio=8)}
STAGES = (("lora", "lora", False), ("gtca", "gtca", True), ("lora+gtca", "lora,gtca", True))
GIB = 2 ** 30


class Chunks:
  """Tiling spans per layer (a stand-in for `slm_jax.gtca.spans.ChunkBatch`)."""

  def __init__(self, batch: int, n_layers: int, length: int, k: int):
    start = np.zeros((batch, n_layers, k), np.int32)
    end = np.zeros((batch, n_layers, k), np.int32)
    for layer in range(n_layers):
      width = min(2 ** (layer + 1), length)
      starts = np.arange(0, length, width)[:k]
      start[:, layer, :len(starts)] = starts
      end[:, layer, :len(starts)] = np.minimum(starts + width, length)
    self.start_BLK, self.end_BLK = jnp.asarray(start), jnp.asarray(end)
    self.last_BLK = jnp.asarray(np.where(end > start, end - 1, -1).astype(np.int32))
    self.update_mask_BT = jnp.ones((batch, length), jnp.float32)


jax.tree_util.register_pytree_node(
    Chunks, lambda c: ((c.start_BLK, c.end_BLK, c.last_BLK, c.update_mask_BT), None),
    lambda _, xs: _rebuild(*xs))


def _rebuild(start, end, last, mask) -> Chunks:
  chunks = Chunks.__new__(Chunks)
  chunks.start_BLK, chunks.end_BLK, chunks.last_BLK, chunks.update_mask_BT = start, end, last, mask
  return chunks


def bench_scale(scale: str, args) -> list[list]:
  mconfig = ModelConfig(vocab_size=args.vocab if scale != "tiny" else 512, **SHAPES[scale],
                        compute_dtype=jnp.float32, param_dtype=jnp.float32,
                        attention_impl="xla", lora_rank=args.lora_rank, lora_alpha=16.0)
  started = time.perf_counter()
  decoder = Decoder(mconfig, rngs=nnx.Rngs(0))
  gtca = Gtca(GtcaConfig.from_model(mconfig), rngs=nnx.Rngs(1))
  graphdefs, params = forward.split_models(decoder, gtca)
  del decoder, gtca
  build = time.perf_counter() - started
  B, T = args.batch, args.seq
  ids = np.random.default_rng(0).integers(1, mconfig.vocab_size, (B, T))
  tokens, meta = plain_rows(list(ids), T, B)
  batch = {"tokens": jnp.asarray(tokens), "meta": jax.tree.map(jnp.asarray, meta),
           "targets": jnp.ones((B, T), bool), "chunks": Chunks(B, mconfig.n_layers, T, 64)}
  count = lambda tree: sum(x.size for x in jax.tree.leaves(tree))
  print(f"{scale}: backbone {count(params['backbone']) / 1e6:,.1f}M parameters (LoRA included), "
        f"GTCA {count(params['gtca']) / 1e6:,.2f}M; built in {build:.0f} s", flush=True)
  tx = optax.adamw(1e-4, weight_decay=0.0)
  results = []
  for name, trainable, branch in STAGES:
    stage_params = params if branch else {"backbone": params["backbone"]}
    trained, frozen = forward.partition(stage_params, trainable)
    trained = jax.tree.map(jnp.copy, trained)  # the step donates what it trains
    opt_state = tx.init(trained)
    step = forward.make_gtca_train_step(graphdefs, tx)
    alpha = jnp.float32(0.15)
    started = time.perf_counter()
    compiled = step.lower(trained, frozen, opt_state, batch, alpha).compile()
    compile_s = time.perf_counter() - started
    memory = compiled.memory_analysis()
    peak = (memory.argument_size_in_bytes + memory.output_size_in_bytes
            + memory.temp_size_in_bytes - memory.alias_size_in_bytes)
    state = [trained, opt_state]

    def run():
      state[0], state[1], sums = compiled(state[0], frozen, state[1], batch, alpha)
      return sums

    seconds, sums = median_of(args.repeats, run, warmup=0)
    results.append([scale, name, count(trained), seconds, peak, memory.temp_size_in_bytes,
                    compile_s, float(sums["loss_sum"] / sums["count"])])
    print(f"  {name}: {seconds:.2f} s/step, peak {peak / GIB:.3f} GiB, compile {compile_s:.0f} s",
          flush=True)
    del state, trained, opt_state, compiled
  base = results[0]
  rows = []
  for scale_, name, n, seconds, peak, temp, compile_s, loss in results:
    rows.append([scale_, name, f"{n / 1e6:,.2f}M", f"{seconds:.3f}", f"{seconds / base[3]:.2f}",
                 f"{peak / GIB:.3f}", f"{peak / base[4]:.2f}", f"{temp / GIB:.3f}",
                 f"{temp / base[5]:.2f}", f"{compile_s:.0f}", f"{loss:.3f}"])
  return rows


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--scales", default="tiny,1b")
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--seq", type=int, default=256)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--vocab", type=int, default=32000)
  parser.add_argument("--lora_rank", type=int, default=8)
  args = parser.parse_args()
  print(f"backend {jax.default_backend()}, batch {args.batch} × {args.seq} tokens, float32, "
        f"LoRA r={args.lora_rank}, K = 64 chunks per layer", flush=True)
  rows = []
  for scale in args.scales.split(","):
    rows += bench_scale(scale, args)
  print(table(["scale", "stage", "trained params", "s/step", "× stage 1", "peak GiB",
               "× stage 1", "temps GiB", "× stage 1", "compile s", "last loss"], rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
