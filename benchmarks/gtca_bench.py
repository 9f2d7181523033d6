"""GTCA's cost (SPEC §10): training-step time and compiled peak memory with the branch vs without.

  python benchmarks/gtca_bench.py [--scales tiny,1b] [--batch 1] [--seq 256] [--repeats 2]
      [--vocab 32000] [--lora_rank 8]

A random float32 backbone per scale (`tiny`: d_model 128, 2 layers, 4 heads; `1b`: d_model 2048,
16 layers, 16 heads, mlp_ratio 8), LoRA r = `--lora_rank` on every projection, and one batch of
`--batch` rows of `--seq` tokens whose chunks tile the row (layer ℓ: spans of 2^(ℓ+1) tokens, the
first K = 64 of them). Three jitted train steps of a `slm_jax.gtca.model.GtcaLM`, the one the
GTCA stages run (`slm_jax.train.steps.make_train_step` with `optimizer.trainable` = the stage's
groups; AdamW from `make_optimizer`, state for the trained part only), the SPEC §10 stages:
  stage 1 `lora`       LoRA only, no branch (the baseline),
  stage 2 `gtca`       the branch only, backbone and LoRA frozen (α = 0.15),
  stage 3 `lora+gtca`  both.
Per step: seconds (median of `--repeats` runs of the AOT-compiled step, compile excluded) and the
compiled step's memory (`compiled.memory_analysis()`: arguments + outputs + temporaries − aliased
(donated) bytes, and the temporaries alone), with ratios to stage 1 of the same scale, same run.
CPU timings on a shared machine are noisy: compare within a table.

  python benchmarks/gtca_bench.py --scales small --sweep_seqs 128,256,512,1024 --sweep_ks 16,32,64

is the O(nK) check (the paper's overhead claim): at each row length n and chunk count K, stage 3
minus stage 1 in step time and in compiled temporaries, each also divided by n·K (a constant
column is O(nK); the backbone's own attention is O(n²)). `small` is d_model 512, 8 layers.
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from slm_jax.benchtools import median_of, parser as make_parser, table  # noqa: E402
from slm_jax.gtca.branch import Gtca, GtcaConfig  # noqa: E402
from slm_jax.gtca.model import GtcaLM, params_of  # noqa: E402
from slm_jax.hf.scoring import plain_rows  # noqa: E402
from slm_jax.model import Decoder, ModelConfig  # noqa: E402
from slm_jax.train.optimizer import OptimizerSection, make_optimizer, trainable_mask  # noqa: E402
from slm_jax.train.steps import make_train_step  # noqa: E402

SHAPES = {"tiny": dict(d_model=128, n_layers=2, n_heads=4, mlp_ratio=4),
          "small": dict(d_model=512, n_layers=8, n_heads=8, mlp_ratio=4),
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


def build(scale: str, args, k: int = 64):
  """(model config, models) of a random backbone at `scale`: models = {False: the backbone
  alone, True: with a K-chunk branch}, each as (graphdef, params)."""
  mconfig = ModelConfig(vocab_size=args.vocab if scale != "tiny" else 512, **SHAPES[scale],
                        compute_dtype=jnp.float32, param_dtype=jnp.float32,
                        attention_impl="xla", lora_rank=args.lora_rank, lora_alpha=16.0)
  decoder = Decoder(mconfig, rngs=nnx.Rngs(0))
  gtca = Gtca(GtcaConfig.from_model(mconfig, k=k), rngs=nnx.Rngs(1))
  return mconfig, {False: params_of(GtcaLM(decoder)), True: params_of(GtcaLM(decoder, gtca))}


def make_batch(mconfig, batch: int, seq: int, k: int) -> dict:
  ids = np.random.default_rng(0).integers(1, mconfig.vocab_size, (batch, seq))
  tokens, meta = plain_rows(list(ids), seq, batch)
  return {"tokens": jnp.asarray(tokens), "meta": jax.tree.map(jnp.asarray, meta),
          "targets": jnp.ones((batch, seq), bool),
          "chunks": Chunks(batch, mconfig.n_layers, seq, k),
          "alpha": jnp.full((batch,), 0.15, jnp.float32)}


def count(tree) -> int:
  return sum(x.size for x in jax.tree.leaves(tree))


def measure(models: dict, batch: dict, stages, repeats: int) -> list[dict]:
  """Per stage: trained parameters, median s/step (compile excluded), compiled peak and
  temporary bytes, compile seconds and the last loss."""
  results = []
  for name, trainable, branch in stages:
    graphdef, params = models[branch]
    section = OptimizerSection(peak_lr=1e-4, min_lr=1e-4, warmup_steps=0, warmup_start_lr=0.0,
                               weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8, clip=0.0,
                               grad_accum_steps=1, trainable=trainable)
    tx = make_optimizer(section, 1_000_000, accumulate=False)
    params = jax.tree.map(jnp.copy, params)  # the step donates its parameters
    opt_state = tx.init(params)
    stage_batch = batch if branch else {k: v for k, v in batch.items()
                                        if k not in ("chunks", "alpha")}
    step = make_train_step(graphdef, tx, 1, trainable=trainable)
    started = time.perf_counter()
    compiled = step.lower(params, opt_state, stage_batch).compile()
    compile_s = time.perf_counter() - started
    memory = compiled.memory_analysis()
    peak = (memory.argument_size_in_bytes + memory.output_size_in_bytes
            + memory.temp_size_in_bytes - memory.alias_size_in_bytes)
    trained = sum(x.size for x, m in zip(jax.tree.leaves(params),
                                          jax.tree.leaves(trainable_mask(params, trainable))) if m)
    state = [params, opt_state]

    def run():
      state[0], state[1], sums = compiled(state[0], state[1], stage_batch)
      return sums

    seconds, sums = median_of(repeats, run, warmup=0)
    results.append(dict(stage=name, trained=trained, seconds=seconds, peak=peak,
                        temp=memory.temp_size_in_bytes, compile_s=compile_s,
                        loss=float(sums["loss_sum"] / sums["count"])))
    del state, params, opt_state, compiled
  return results


def bench_scale(scale: str, args) -> list[list]:
  started = time.perf_counter()
  mconfig, models = build(scale, args)
  params = models[True][1]
  batch = make_batch(mconfig, args.batch, args.seq, 64)
  print(f"{scale}: backbone {count(params['backbone']) / 1e6:,.1f}M parameters (LoRA included), "
        f"GTCA {count(params['gtca']) / 1e6:,.2f}M; built in {time.perf_counter() - started:.0f} s",
        flush=True)
  results = measure(models, batch, STAGES, args.repeats)
  for r in results:
    print(f"  {r['stage']}: {r['seconds']:.2f} s/step, peak {r['peak'] / GIB:.3f} GiB, "
          f"compile {r['compile_s']:.0f} s", flush=True)
  base = results[0]
  return [[scale, r["stage"], f"{r['trained'] / 1e6:,.2f}M", f"{r['seconds']:.3f}",
           f"{r['seconds'] / base['seconds']:.2f}", f"{r['peak'] / GIB:.3f}",
           f"{r['peak'] / base['peak']:.2f}", f"{r['temp'] / GIB:.3f}",
           f"{r['temp'] / base['temp']:.2f}", f"{r['compile_s']:.0f}", f"{r['loss']:.3f}"]
          for r in results]


def sweep(scale: str, seqs: list[int], ks: list[int], args) -> list[list]:
  """The O(nK) check: at each (n tokens, K chunks), stage 3 (LoRA + branch) minus stage 1
  (LoRA only), in time and in compiled temporaries, and both divided by n·K."""
  rows = []
  for k in ks:
    mconfig, models = build(scale, args, k)
    for seq in seqs:
      batch = make_batch(mconfig, args.batch, seq, k)
      base, both = measure(models, batch, (STAGES[0], STAGES[2]), args.repeats)
      extra_s, extra_b = both["seconds"] - base["seconds"], both["temp"] - base["temp"]
      nk = args.batch * seq * k
      rows.append([scale, seq, k, f"{base['seconds'] * 1e3:.1f}", f"{both['seconds'] * 1e3:.1f}",
                   f"{both['seconds'] / base['seconds']:.2f}", f"{extra_s * 1e3:.1f}",
                   f"{extra_s / nk * 1e9:.0f}", f"{extra_b / 2 ** 20:.1f}",
                   f"{extra_b / nk:.0f}"])
      print(f"  n {seq} K {k}: lora {base['seconds'] * 1e3:.1f} ms, lora+gtca "
            f"{both['seconds'] * 1e3:.1f} ms, extra temps {extra_b / 2 ** 20:.1f} MiB", flush=True)
    del models
  return rows


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--scales", default="tiny,1b")
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--seq", type=int, default=256)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--vocab", type=int, default=32000)
  parser.add_argument("--lora_rank", type=int, default=8)
  parser.add_argument("--sweep_seqs", default="", help="e.g. 128,256,512,1024: the O(nK) sweep "
                      "over these row lengths (and --sweep_ks) at the first of --scales")
  parser.add_argument("--sweep_ks", default="16,32,64", help="chunks per layer in the sweep")
  args = parser.parse_args()
  if args.sweep_seqs:
    scale = args.scales.split(",")[0]
    seqs = [int(x) for x in args.sweep_seqs.split(",")]
    ks = [int(x) for x in args.sweep_ks.split(",")]
    print(f"backend {jax.default_backend()}, {scale}, batch {args.batch}, float32, LoRA "
          f"r={args.lora_rank}; n = {seqs}, K = {ks}; {args.repeats} repeats", flush=True)
    rows = sweep(scale, seqs, ks, args)
    print(table(["scale", "n", "K", "lora ms", "lora+gtca ms", "×", "extra ms",
                 "extra ns / (n·K)", "extra temps MiB", "extra temp B / (n·K)"], rows))
    return 0
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
