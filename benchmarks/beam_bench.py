"""Word-synchronous beam search throughput: KV cache vs recomputing every prefix, and the
one-sentence search vs the batched search.

  python benchmarks/beam_bench.py [--config tgtree] [--sentences 4] [--beam 300] [--fast-track 30]
                                  [--recompute-sentences 1] [--d-model 128] [--layers 2]
  python benchmarks/beam_bench.py --bound [--sentences 8] [--d-model 512 --layers 6 --heads 8]
  python benchmarks/beam_bench.py --batched [--sentences 16] [--sentences-per-batch 8]
                                  [--repeats 2] [--d-model 512 --layers 6 --heads 8]
                                  [--no-precompile]
  python benchmarks/beam_bench.py --profile [--sentences 8] [--sentences-per-batch 8]
  python benchmarks/beam_bench.py --loop [--sentences 16] [--repeats 2] [--project 1b]
                                  [--project-layers 2] [--sg-words 38478]

`--profile`: where a word's time goes, for the one-sentence search and the batched search with
host rounds and with the compiled word loop: every device call timed to completion
(`step_rows`, `gather`, `copy_rows`, `start_rows`, arena compactions; the loop's `rounds`) and
the rest, the host's bookkeeping (candidate validity, selection, row placement, pool merges),
per word and per host visit (an expansion round = one `gather` of the frontier's candidate
log-probs, the decoder steps it feeds following; for the loop a `rounds` call). Blocking after
every call removes the overlap of host work with asynchronous device work, so the device share
is an upper bound (beam_profile.py).

`--loop`: as `--batched`, the batched search with its rounds on the host (`inference.beam_batch`)
against the same search with each word's rounds in one compiled loop (`inference.beam_loop`); both
should give the same results bit for bit. `--project SCALE`: then the compiled loop on a model
of that scale's widths with `--project-layers` layers and on the small model, and the full
model's projected seconds per word and SyntaxGym device-hours (beam_profile.py).

`--bound`: what the model's own work per fed row allows, whatever the search's bookkeeping: the
rows a word feeds (`BeamResult.expansions`, the same in both searches), the dense forward pass of
that many rows (one token each, no cache: a lower bound on a step's cost, timed at the batched
search's row count), its FLOPs (XLA's cost analysis) and this machine's sustained float32 matmul
rate; prints the words/s each bound allows and its ratio to the one-sentence search timed in the
same process (a batched search can reach at most that ratio without feeding fewer rows).

`--batched`: `BeamSearcher.search` one sentence after another (its own decoder of `capacity`
rows, as the evaluator ran it before) against `search_many` (`inference.beam_batch`: the sentences
advanced together, `--sentences-per-batch` at a time), on the same sentences in the same
process, alternating `--repeats` times; prints words/s of each, their ratio per repeat, the max
|Δ prefix log-prob| and the count of words whose beam differs (best hypothesis, beam size,
terminal reading; both should be 0: the batched search is exact, bit for bit). Both decoders
compile every shape variant first and search untimed warm-up sentences (`--no-precompile`: the
timed sentences once, untimed: the same shapes).

One process, the same model, the same sentences (embedded-treebank validation sentences of
`--min-words`..`--max-words` words), the same search (b = 300, fast track 30 in union with the
sub-beam, depth-first continuation while a structural hypothesis beats the b-th word hypothesis,
cap max(6L, 10); SPEC §9):
  kv-cache      `IncrementalDecoder`: each step feeds one token per fed hypothesis against the
                cache (only those rows are computed)
  recompute     `RecomputeDecoder`: each step re-runs the full forward pass over the whole
                prefix of every fed hypothesis (rows and length bucketed like the cache's)
  recompute-all `RecomputeDecoder(all_rows=True)`: the naive batch — every step re-runs every
                row of the beam's buffer at the longest prefix
Both decoders compile every shape variant first (`precompile`) and search one untimed sentence.
Prints a table of words/s, decoder steps/s and ms per step (a step = one batched decoder call
over the fed hypotheses: the unit the search rules must not slow down), the speed-up (overall,
and on the sentences both decoded), and
checks that all give the same prefix log-probabilities (the baselines run on the first
`--recompute-sentences` sentences only: they are slow). The model has random weights (speed does
not depend on training; the beam work per word is bounded by the fast track filling the word
beam and by the length cap).
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.benchtools import best_of, parser as make_parser, table  # noqa: E402
from slm_jax.configurations import get_configuration  # noqa: E402
from slm_jax.corpus.treebank import embedded_corpus  # noqa: E402
from slm_jax.inference.beam import BeamSearcher  # noqa: E402
from slm_jax.inference.incremental import IncrementalDecoder  # noqa: E402
from slm_jax.inference.recompute import RecomputeDecoder  # noqa: E402
from slm_jax.kinds import TERMINAL_CODE, Kind  # noqa: E402
from slm_jax.model import Decoder, ModelConfig  # noqa: E402
from slm_jax.model.decoder import param_count  # noqa: E402
from slm_jax.structure import row_metadata  # noqa: E402
from slm_jax.tokenizer import make_tokenizer  # noqa: E402
from beam_profile import SG_WORDS, profile, projection  # noqa: E402  (this script's folder)


def run(searcher: BeamSearcher, sentences) -> tuple[list[float], int, int, list[np.ndarray]]:
  seconds, steps, prefixes = [], 0, []
  for words in sentences:
    start = time.perf_counter()
    result = searcher.search(words, complete=False)
    seconds.append(time.perf_counter() - start)
    steps += result.steps
    prefixes.append(result.prefix_logprobs)
  return seconds, sum(map(len, sentences)), steps, prefixes


def batched_comparison(args, model, tokenizer, configuration, warmup, timed) -> None:
  """Two searches on the same sentences (module docstring): one-sentence vs batched, or with
  `--loop` the batched search's host rounds vs its compiled word loop."""
  options = dict(beam=args.beam, fast_track=args.fast_track,
                 sentences_per_batch=args.sentences_per_batch)
  rows = args.sentences_per_batch * BeamSearcher(model, tokenizer, configuration,
                                                 **options).capacity
  if args.loop:
    names = ("host rounds", "compiled loop")
    first = BeamSearcher(model, tokenizer, configuration, **options)
    second = BeamSearcher(model, tokenizer, configuration, compiled=True, **options)
    batches = (rows, rows)
  else:
    names = ("one-sentence", "batched")
    first = BeamSearcher(model, tokenizer, configuration, batched=False, **options)
    second = BeamSearcher(model, tokenizer, configuration, **options)
    batches = (None, rows)
  slots = max(first.slots(s) for s in warmup + timed)
  compiled = []
  for searcher, batch in zip((first, second), batches):
    decoder = searcher.decoder(slots, rows=batch)
    decoder.start([tokenizer.bos_id], [int(Kind.BOS)])
    start = time.perf_counter()
    variants = decoder.precompile() if args.precompile else 0
    # Host-side warm-up (and the prefix variants, the compiled loop); without precompiling, the
    # timed sentences themselves: a search of the same sentences asks for the same shapes again.
    searcher.search_many(warmup if args.precompile else timed, complete=False)
    compiled.append(f"{variants} variants + warm-up in {time.perf_counter() - start:.0f} s")
  words = sum(map(len, timed))
  print(f"{len(timed)} sentences, {words} words; {names[0]}: {compiled[0]}; {names[1]} "
        f"({args.sentences_per_batch} at a time, {second.decoder(slots).batch} rows): "
        f"{compiled[1]}")
  lines = []
  for repeat in range(args.repeats):
    start = time.perf_counter()
    alone = first.search_many(timed, complete=False)
    t_first = time.perf_counter() - start
    start = time.perf_counter()
    together = second.search_many(timed, complete=False)
    t_second = time.perf_counter() - start
    delta = max(float(np.max(np.abs(a.prefix_logprobs - b.prefix_logprobs)))
                for a, b in zip(alone, together))
    differing = sum(int(x != y) for a, b in zip(alone, together)
                    for x, y in zip(a.best, b.best))
    differing += sum(int(np.sum((a.beam_sizes != b.beam_sizes) | (
        a.terminal_prefix_logprobs != b.terminal_prefix_logprobs)))
                     for a, b in zip(alone, together))
    lines.append([repeat + 1, f"{words / t_first:.2f}", f"{words / t_second:.2f}",
                  f"{t_first / t_second:.2f}", f"{delta:.2e}", differing])
  print(table(["repeat", f"{names[0]} words/s", f"{names[1]} words/s", "ratio", "max |Δ|",
               "differing words"], lines))
  print(f"arena compactions: {names[0]} {first.decoder(slots).compactions}, {names[1]} "
        f"{second.decoder(slots).compactions}")


def _flops(compiled) -> float:
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", float("nan")))


def bound_analysis(args, model, tokenizer, configuration, warmup, timed) -> None:
  """Words/s the model's work per fed row allows vs the one-sentence search (module docstring)."""
  one = BeamSearcher(model, tokenizer, configuration, batched=False, beam=args.beam,
                     fast_track=args.fast_track)
  decoder = one.decoder(max(one.slots(s) for s in [warmup] + timed))
  decoder.start([tokenizer.bos_id], [int(Kind.BOS)])
  decoder.precompile()
  one.search(warmup, complete=False)
  start = time.perf_counter()
  results = [one.search(words, complete=False) for words in timed]
  one_wps = sum(map(len, timed)) / (time.perf_counter() - start)
  rows_per_word = sum(r.expansions for r in results) / sum(map(len, timed))
  N = args.sentences_per_batch * one.capacity  # the batched search's decoder rows
  graphdef, state = nnx.split(model)
  kinds_N1 = np.full((N, 1), TERMINAL_CODE, np.int32)
  meta = row_metadata(kinds_N1, np.ones_like(kinds_N1))
  tokens_N1 = jnp.zeros((N, 1), jnp.int32)
  dense = jax.jit(lambda state_, tokens: nnx.merge(graphdef, state_)(tokens, meta))
  flops_per_row = _flops(dense.lower(state, tokens_N1).compile()) / N
  dense(state, tokens_N1)  # compile
  dense_per_row = best_of(5, lambda: dense(state, tokens_N1))[0] / N
  a = jnp.ones((2048, 512), jnp.float32)
  b = jnp.ones((512, 2048), jnp.float32)
  matmul = jax.jit(jnp.dot)
  matmul(a, b)
  peak = 2 * 2048 * 512 * 2048 / best_of(5, lambda: matmul(a, b))[0]
  by_time = 1 / (rows_per_word * dense_per_row)
  by_flops = peak / (rows_per_word * flops_per_row)
  print(table(["quantity", "value"], [
      ["one-sentence search (words/s, this run)", f"{one_wps:.2f}"],
      ["rows fed per word", f"{rows_per_word:.0f}"],
      [f"dense forward, {N} rows (µs/row)", f"{dense_per_row * 1e6:.2f}"],
      ["FLOPs per row (XLA cost analysis)", f"{flops_per_row / 1e6:.3f} M"],
      ["float32 matmul 2048x512x2048 (GFLOP/s)", f"{peak / 1e9:.1f}"],
      ["bound: dense forward only (words/s; × one-sentence)",
       f"{by_time:.1f} ({by_time / one_wps:.1f}x)"],
      ["bound: FLOPs at the matmul rate (words/s; × one-sentence)",
       f"{by_flops:.1f} ({by_flops / one_wps:.1f}x)"],
      ["µs per row a 10x needs", f"{1e6 / (10 * one_wps * rows_per_word):.2f}"],
  ]))


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--config", default="tgtree")
  parser.add_argument("--sentences", type=int, default=4)
  parser.add_argument("--recompute-sentences", type=int, default=1)
  parser.add_argument("--naive", action=argparse.BooleanOptionalAction, default=True,
                      help="also time the naive all-rows recompute")
  parser.add_argument("--min-words", type=int, default=6)
  parser.add_argument("--max-words", type=int, default=10)
  parser.add_argument("--beam", type=int, default=300)
  parser.add_argument("--fast-track", type=int, default=30)
  parser.add_argument("--d-model", type=int, default=128)
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--batched", action=argparse.BooleanOptionalAction, default=False,
                      help="one-sentence vs batched search (module docstring)")
  parser.add_argument("--sentences-per-batch", type=int, default=8)
  parser.add_argument("--loop", action=argparse.BooleanOptionalAction, default=False,
                      help="the batched search's host rounds vs its compiled word loop")
  parser.add_argument("--project", default=None,
                      help="--loop: project the compiled loop to this scale (e.g. 1b)")
  parser.add_argument("--project-layers", type=int, default=2,
                      help="--project: layers of the measured model of that scale's widths")
  parser.add_argument("--sg-words", type=int, default=SG_WORDS,
                      help="--project: words of the SyntaxGym evaluation projected")
  parser.add_argument("--bound", action=argparse.BooleanOptionalAction, default=False,
                      help="the words/s the model's work per fed row allows (module docstring)")
  parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=False,
                      help="where a word's time goes: device calls vs host (module docstring)")
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--precompile", action=argparse.BooleanOptionalAction, default=True,
                      help="--batched: compile every shape variant first and warm up on other "
                           "sentences; --no-precompile: warm up on the timed sentences (for "
                           "large models, whose variants take minutes to compile)")
  args = parser.parse_args()

  configuration = get_configuration(args.config)
  documents = embedded_corpus("train", 200, seed=0)
  tokenizer = make_tokenizer("word", words=(w for d in documents for t in d for w in t.leaves()))
  pool = [t.leaves() for d in embedded_corpus("validation", 100, seed=0) for t in d]
  sentences = [s for s in pool if args.min_words <= len(s) <= args.max_words]
  warmup, timed = sentences[0], sentences[1:1 + args.sentences]
  model = Decoder(ModelConfig(vocab_size=tokenizer.vocab_size, d_model=args.d_model,
                              n_layers=args.layers, n_heads=args.heads,
                              compute_dtype=jnp.float32, attention=configuration.attention),
                  rngs=nnx.Rngs(0))
  print(f"config {args.config} ({configuration.linearization}, {configuration.attention.name}); "
        f"model d={args.d_model} L={args.layers} H={args.heads} V={tokenizer.vocab_size} "
        f"({param_count(model.config) / 1e6:.1f}M parameters); "
        f"beam {args.beam} + fast track {args.fast_track}; backend {jax.default_backend()}")
  if args.bound:
    bound_analysis(args, model, tokenizer, configuration, warmup, timed)
    return 0
  if args.profile:
    profile(args, model, tokenizer, configuration, sentences[:args.sentences_per_batch],
            sentences[args.sentences_per_batch:][:args.sentences])
    return 0
  if args.batched or args.loop:
    batched_comparison(args, model, tokenizer, configuration,
                       sentences[:args.sentences_per_batch],
                       sentences[args.sentences_per_batch:][:args.sentences])
    if args.project:
      projection(args, model, tokenizer, configuration, sentences[:args.sentences_per_batch],
                 sentences[args.sentences_per_batch:][:args.sentences])
    return 0
  options = dict(beam=args.beam, fast_track=args.fast_track)
  rows = []
  results = {}
  sizing = BeamSearcher(model, tokenizer, configuration, decoder_cls=IncrementalDecoder,
                        **options)
  slots = max(sizing.slots(s) for s in [warmup] + timed)
  compiled = {}
  baseline = timed[:args.recompute_sentences]
  runs = [("kv-cache", IncrementalDecoder, timed), ("recompute", RecomputeDecoder, baseline)]
  if args.naive:
    runs.append(("recompute-all", functools.partial(RecomputeDecoder, all_rows=True), baseline))
  for name, cls, subset in runs:
    searcher = BeamSearcher(model, tokenizer, configuration, decoder_cls=cls, decoder_len=slots,
                            **options)
    decoder = searcher.decoder(slots)
    decoder.start([tokenizer.bos_id], [int(Kind.BOS)])
    start = time.perf_counter()
    variants = decoder.precompile()
    searcher.search(warmup, complete=False)  # host-side warm-up
    compiled[name] = (variants, time.perf_counter() - start)
    seconds, words, steps, prefixes = run(searcher, subset)
    results[name] = (prefixes, seconds)
    total = sum(seconds)
    rows.append((name, len(subset), words, steps, total, words / total, steps / total))
  shared = len(baseline)
  kv_prefixes, kv_seconds = results["kv-cache"]
  diff = max(float(np.max(np.abs(a - b))) for name, (prefixes, _) in results.items()
             for a, b in zip(kv_prefixes[:shared], prefixes))
  print(f"{'decoder':<13} {'sents':>5} {'words':>5} {'steps':>6} {'seconds':>8} {'words/s':>8} "
        f"{'steps/s':>8} {'ms/step':>8}")
  for name, n, words, steps, seconds, wps, sps in rows:
    print(f"{name:<13} {n:>5} {words:>5} {steps:>6} {seconds:>8.2f} {wps:>8.2f} {sps:>8.1f} "
          f"{1000 / sps:>8.2f}")
  for name, (_, seconds) in list(results.items())[1:]:
    print(f"kv-cache speed-up over {name}: {sum(seconds) / sum(kv_seconds[:shared]):.1f}x on the "
          f"{shared} sentence(s) both decoded ({rows[0][5] / dict((r[0], r[5]) for r in rows)[name]:.1f}x "
          "in words/s overall)")
  print(f"max |Δ prefix log-prob| between decoders: {diff:.2e}")
  print("compiled before timing: " + "; ".join(f"{n} {v} variants in {s:.0f} s"
                                                for n, (v, s) in compiled.items()))
  return 0


if __name__ == "__main__":
  sys.exit(main())
