"""Training throughput of the tiny model on this machine: causal vs TG masks vs hybrids, and
the Pushdown reference (SPEC §14).

  python benchmarks/train_bench.py [--steps 20] [--scale tiny] [--names tgtree,tg,...,pushdown]

Every configuration trains on the same embedded-corpus lin2 rows with the same model size, so
the ratio column isolates the attention path (the XLA reference path on CPU: a dense [B, G, T, T]
mask from the one predicate). Prints a table: tokens/s of jitted train steps (compile excluded)
and the ratio to the causal configuration measured in the same run. `pushdown` reads lin1 rows of
the same length and counts their positions; its step also compacts them to terminal rows, builds
the [B, T, T] stack tape and runs the attachment head.
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from slm_jax.train import run_config as config_builder  # noqa: E402
from slm_jax.corpus.treebank import embedded_corpus  # noqa: E402
from slm_jax.data.loader import BatchIterator, PackedDataset  # noqa: E402
from slm_jax.model.attention import resolve_attention_impl  # noqa: E402
from slm_jax.model.decoder import Decoder  # noqa: E402
from slm_jax.pushdown.model import PushdownLM  # noqa: E402
from slm_jax.tokenizer import make_tokenizer  # noqa: E402
from slm_jax.train.optimizer import make_optimizer  # noqa: E402
from slm_jax.train.steps import make_train_step  # noqa: E402
from slm_jax.train.trainer import _device_batch  # noqa: E402
from slm_jax import tables  # noqa: E402
from slm_jax.benchtools import parser as make_parser  # noqa: E402


def bench(name: str, scale: str, steps: int, documents, tokenizer) -> float:
  cfg = config_builder.validate(config_builder.build(name, scale))
  configuration = cfg.resolved
  data = PackedDataset(documents, tokenizer, configuration, cfg.data.seq_len)
  batches = BatchIterator(data, cfg.train.global_batch, seed=0)
  model_class = PushdownLM if cfg.model.pushdown_depths else Decoder
  model = model_class(cfg.model.replace(vocab_size=tokenizer.vocab_size), rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(model, nnx.Param)
  params = nnx.to_pure_dict(params)
  tx = make_optimizer(cfg.optimizer, steps + 1, accumulate=False)
  opt_state = tx.init(params)
  step = make_train_step(graphdef, tx, cfg.optimizer.grad_accum_steps)
  batch_list = [_device_batch(next(batches)) for _ in range(steps + 1)]
  params, opt_state, sums = step(params, opt_state, batch_list[0])  # compile
  jax.block_until_ready(sums)
  start = time.perf_counter()
  for batch in batch_list[1:]:
    params, opt_state, sums = step(params, opt_state, batch)
  jax.block_until_ready(sums)
  return steps * cfg.train.global_batch * cfg.data.seq_len / (time.perf_counter() - start)


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--scale", default="tiny")
  parser.add_argument("--names",
                      default="tgtree,tg,tgnomask,tgnomask_mix_tg,tgtree_mix_tg,pushdown")
  args = parser.parse_args()
  documents = embedded_corpus("train", 600, seed=0)
  tokenizer = make_tokenizer("word", words=[w for d in documents for t in d for w in t.leaves()])
  impl = config_builder.build("tgtree", args.scale).model.attention_impl
  print(f"backend {jax.default_backend()}, {args.steps} timed steps each, scale {args.scale}, "
        f"attention_impl={impl} → {resolve_attention_impl(impl)}")
  print(tables.header(["configuration", "attention", "tokens/s", "ratio to causal"]))
  results = {}
  for name in args.names.split(","):
    results[name] = bench(name, args.scale, args.steps, documents, tokenizer)
    causal = results.get("tgtree", results[name])
    built = config_builder.build(name, args.scale)
    attention = built.configuration.attention + (
        " + stack-tape bias" if built.model.pushdown_depths else "")
    print(tables.row([name, attention, f"{results[name]:,.0f}", f"{results[name] / causal:.2f}"]),
          flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
