"""Training throughput per configuration: tokens/s, MFU and the ratio to the terminal
configuration, and the paper's Table 9 layout (H800, 100M: causal 62,175 tok/s, structural
37,975, hybrid 3,375).

  python benchmarks/train_bench.py                                # CPU smoke: scale tiny
  python benchmarks/train_bench.py --scale 100m --batch 8 --steps 5 --budget 240   # a GPU

The model is the configuration's own (`run_config.build(name, scale)`: at 100m SPEC §6 — d 768,
12 layers, 12 heads, T 2048 (pause2 2049), bfloat16 compute, the vocabulary of the paper's
GPT-2 + NT tokenizer, 50,320, in the embedding and output layer; at tiny its word vocabulary),
with attention_impl=auto (the fused kernel of this backend: Triton on a GPU, with the launch
profile SLM_TRITON_LAUNCH chooses). Rows: embedded-corpus documents of 30–50 sentences at the
paper scales (~450 terminal / ~1,640 lin2 tokens, near a BBC article's 546 / 1,736) linearized
and packed per configuration; token ids come from a word tokenizer (speed does not depend on
them). One update per step (global batch --batch, no accumulation); --steps timed steps after a
compiling and a warm-up step. Configurations that share a compiled step (same model and row
length: every causal configuration) reuse it. MFU uses `train.mfu` (dense attention FLOPs,
the chip's peak bf16; none on CPU).

--names lists configurations in the order they are run (default: the 12 + pause1, pause2, most
valuable first: terminal, the lin2 family, then the other causal ones); --budget SECONDS stops
starting a configuration that would not finish in time (estimated from those before it; the first
always runs) and names the ones cut. `pushdown` (SPEC §14) may be named too.
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from slm_jax import tables  # noqa: E402
from slm_jax.benchtools import parser as make_parser  # noqa: E402
from slm_jax.configurations import CONFIGURATIONS  # noqa: E402
from slm_jax.corpus.treebank import embedded_corpus  # noqa: E402
from slm_jax.data.loader import BatchIterator, PackedDataset  # noqa: E402
from slm_jax.model.attention import resolve_attention_impl  # noqa: E402
from slm_jax.model.decoder import Decoder  # noqa: E402
from slm_jax.pushdown.model import PushdownLM  # noqa: E402
from slm_jax.tokenizer import make_tokenizer  # noqa: E402
from slm_jax.train import mfu  # noqa: E402
from slm_jax.train import run_config  # noqa: E402
from slm_jax.train.optimizer import make_optimizer  # noqa: E402
from slm_jax.train.steps import make_train_step  # noqa: E402
from slm_jax.train.trainer import _device_batch  # noqa: E402

ORDER = ("terminal", "tgtree", "tg", "tgtree_mix_tg", "tgnomask_mix_tg", "tgnomask",
         "tgnomask_aug", "tree", "tree_noont", "tree_compress", "tree_triplecnt", "tree_shuffle",
         "pause1", "pause2")
PAPER_VOCAB = 50_320  # GPT-2 BPE + BOS, PAD, specials, brackets, 26 ONT + 26 CNT (SPEC §6)
# Paper Table 9 (historical H800 runs, 100M): FlashAttention-2 / FlexAttention; the hybrid in
# its text ("approximately 18× slower than causal").
PAPER_100M = {"causal": 62_175, "structural": 37_975, "hybrid": 3_375}


class Bench:
  """Compiled steps by (model, row length), shared between configurations."""

  def __init__(self, scale: str, batch: int, steps: int, documents, tokenizer):
    self.scale, self.batch, self.steps = scale, batch, steps
    self.documents, self.tokenizer = documents, tokenizer
    self.compiled: dict[str, list] = {}  # key -> [step, params, opt_state]

  def config(self, name: str):
    built = run_config.validate(run_config.build(name, self.scale))
    return built.replace(**{"train.global_batch": self.batch, "optimizer.grad_accum_steps": 1})

  def model_config(self, cfg):
    vocab = self.tokenizer.vocab_size if self.scale == "tiny" else max(
        PAPER_VOCAB, self.tokenizer.vocab_size)
    return cfg.model.replace(vocab_size=vocab)

  def key(self, name: str) -> str:
    cfg = self.config(name)
    return f"{self.model_config(cfg)!r}|{cfg.data.seq_len}"

  def run(self, name: str) -> dict:
    """One configuration's row: name, linearization, attention, tokens_per_s, mfu (None where
    the chip's peak is unknown), seconds spent (data, compile if new, timed steps)."""
    began = time.perf_counter()
    cfg = self.config(name)
    model_cfg = self.model_config(cfg)
    data = PackedDataset(self.documents, self.tokenizer, cfg.resolved, cfg.data.seq_len)
    batches = BatchIterator(data, self.batch, seed=0)
    key = self.key(name)
    if key not in self.compiled:
      model_class = PushdownLM if model_cfg.pushdown_depths else Decoder
      graphdef, params = nnx.split(model_class(model_cfg, rngs=nnx.Rngs(0)), nnx.Param)
      params = nnx.to_pure_dict(params)
      tx = make_optimizer(cfg.optimizer, 1_000_000, accumulate=False)
      self.compiled[key] = [make_train_step(graphdef, tx, 1), params, tx.init(params)]
    state = self.compiled[key]
    step = state[0]
    batch_list = [_device_batch(next(batches)) for _ in range(self.steps + 2)]
    for batch in batch_list[:2]:  # compile (first use of this step) and warm up
      state[1], state[2], sums = step(state[1], state[2], batch)
    jax.block_until_ready(sums)
    start = time.perf_counter()
    for batch in batch_list[2:]:
      state[1], state[2], sums = step(state[1], state[2], batch)
    jax.block_until_ready(sums)
    seconds = time.perf_counter() - start
    tokens_per_s = self.steps * self.batch * cfg.data.seq_len / seconds
    device = jax.devices()[0]
    rates = mfu.throughput(tokens_per_s, 1, mfu.model_flops_per_token(model_cfg,
                                                                      cfg.data.seq_len),
                           device.device_kind)
    attention = cfg.resolved.attention.name + (" + stack-tape bias"
                                               if model_cfg.pushdown_depths else "")
    return dict(name=name, linearization=cfg.resolved.linearization, attention=attention,
                  tokens_per_s=tokens_per_s, mfu=rates.get("mfu"),
                  seconds=time.perf_counter() - began)


def table9(results: dict[str, dict], device_kind: str, scale: str) -> str:
  """The paper's Table 9 layout: the paper's 100M row, then this run's."""
  hybrids = [results[n] for n in ("tgtree_mix_tg", "tgnomask_mix_tg") if n in results]
  slower = min(hybrids, key=lambda r: r["tokens_per_s"]) if hybrids else None
  rate = lambda name: results[name]["tokens_per_s"] if name in results else None
  causal, structural = rate("tgtree"), rate("tg")
  hybrid = slower["tokens_per_s"] if slower else None
  ratio = lambda a, b: f"{a / b:.2f}×" if a and b else None
  count = lambda x: f"{x:,.0f}" if x else None
  paper = PAPER_100M
  rows = [["100M", "H800 (paper: FlashAttention-2 / FlexAttention)", count(paper["causal"]),
           count(paper["structural"]), count(paper["hybrid"]),
           ratio(paper["causal"], paper["structural"]), ratio(paper["causal"], paper["hybrid"])],
          [scale.upper() if scale != "tiny" else "tiny", f"{device_kind} (this run)",
           count(causal), count(structural),
           f"{count(hybrid)} ({slower['name']})" if slower else None, ratio(causal, structural),
           ratio(causal, hybrid)]]
  return tables.markdown(["scale", "device", "causal (tgtree), tok/s", "structural (tg), tok/s",
                          "hybrid (the slower mix), tok/s", "causal / structural",
                          "causal / hybrid"], rows)


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--scale", default="tiny", choices=run_config.SCALES)
  parser.add_argument("--batch", type=int, default=None,
                      help="sequences per step (default: 8 at tiny, 8 at the paper scales)")
  parser.add_argument("--steps", type=int, default=5, help="timed steps per configuration")
  parser.add_argument("--names", default=",".join(ORDER))
  parser.add_argument("--budget", type=float, default=0.0, help="seconds; 0: no limit")
  parser.add_argument("--sentences", default=None,
                      help="MIN,MAX sentences per document (default: 30,50 at the paper "
                      "scales, the corpus default at tiny)")
  args = parser.parse_args()
  names = [n for n in args.names.split(",") if n]
  unknown = [n for n in names if n not in CONFIGURATIONS]
  if unknown:
    parser.error(f"unknown configurations {', '.join(unknown)}; known: "
                 f"{', '.join(CONFIGURATIONS)}")
  batch = args.batch or 8
  sentences = args.sentences or ("" if args.scale == "tiny" else "30,50")
  lengths = dict(zip(("min_sentences", "max_sentences"), map(int, sentences.split(",")))
                 ) if sentences else {}
  seq_len = run_config.build("terminal", args.scale).data.seq_len
  count = max(64, 2 * batch * seq_len // (400 if lengths else 80))
  documents = embedded_corpus("train", count, seed=0, **lengths)
  tokenizer = make_tokenizer("word", words=[w for d in documents for t in d for w in t.leaves()])
  bench = Bench(args.scale, batch, args.steps, documents, tokenizer)
  device = jax.devices()[0]
  impl = run_config.build("terminal", args.scale).model.attention_impl
  launch = ""
  if resolve_attention_impl(impl) == "triton_gpu":
    from slm_jax.kernels import launch_profiles  # pylint: disable=g-import-not-at-top
    launch = f", Triton launch: SLM_TRITON_LAUNCH={launch_profiles.mode()}"
  print(f"### Train steps at scale {args.scale} on {jax.default_backend()} "
        f"({device.device_kind}): batch {batch} × T {seq_len}, {args.steps} timed steps, "
        f"{len(documents)} documents{f' of {sentences} sentences' if sentences else ''}, "
        f"attention_impl={impl} → {resolve_attention_impl(impl)}{launch}\n")
  print(tables.header(["configuration", "linearization", "attention", "tokens/s", "MFU",
                       "ratio to terminal", "seconds"]), flush=True)
  start, results, cut, spent = time.perf_counter(), {}, [], {}
  for name in names:
    key = bench.key(name)
    estimate = spent.get(key, max(spent.values(), default=0.0))
    if args.budget and results and time.perf_counter() - start + estimate > args.budget:
      cut.append(name)
      continue
    result = bench.run(name)
    results[name] = result
    spent.setdefault(key, result["seconds"])
    spent[key] = min(spent[key], result["seconds"])  # a reused step: the data and timed steps
    terminal = results.get("terminal")
    print(tables.row([name, result["linearization"], result["attention"],
                      f"{result['tokens_per_s']:,.0f}",
                      f"{result['mfu']:.1%}" if result["mfu"] is not None else None,
                      f"{result['tokens_per_s'] / terminal['tokens_per_s']:.2f}" if terminal
                      else None, f"{result['seconds']:.0f}"]), flush=True)
  print("\n" + table9(results, device.device_kind, args.scale))
  family = [n for n in results if CONFIGURATIONS[n].attention.tg_family]
  if "terminal" in results and family:
    base = results["terminal"]["tokens_per_s"]
    below = [f"{n} {results[n]['tokens_per_s'] / base:.2f}" for n in family
             if results[n]["tokens_per_s"] < 0.9 * base]
    print(f"\nTG-family configurations at ≥ 0.9× terminal's tokens/s: "
          f"{len(family) - len(below)} of {len(family)}"
          + (f" (below: {', '.join(below)})" if below else ""))
  if cut:
    print(f"cut (budget {args.budget:.0f} s): {', '.join(cut)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
