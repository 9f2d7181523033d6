"""Pushdown attachment beam throughput: one row at a time (`pushdown.beam.beam_score`) vs the
batched beam (`pushdown.beam_batch.beam_score_many`), on the same sentences in the same process;
with `--generate`, the joint XSum summary search: one article at a time
(`pushdown.generate.joint_generate`) vs several together
(`pushdown.generate_batch.joint_generate_many`).

  python benchmarks/pushdown_beam_bench.py [--sentences 8] [--sentences-per-batch 8] [--beam 300]
                                           [--repeats 2] [--d-model 64 --layers 2 --heads 2]
                                           [--min-words 6] [--max-words 12]

A tiny `PushdownLM` with random weights (the depth embeddings scaled up, so attachments change
the word scores; speed does not depend on training) scores embedded-treebank validation sentences
of `--min-words`..`--max-words` words as PushdownScorer does (lin0 rows: BOS, words, EOS; SPEC
§14 beam `--beam`). Both paths first run untimed on warm-up sentences and on the timed ones (every
row- and width-bucket compiles), then alternate `--repeats` times. Prints a table per pass:
words/s of each, their ratio, the max |Δ prefix log-prob| over every token and the count of
sentences whose result differs in any way (prefix log-probs, best attachments, final beam size);
both must be 0: the batched beam is exact, bit for bit.

  python benchmarks/pushdown_beam_bench.py --generate [--articles 8] [--concurrent 8] [--beam 6]
                                           [--max-tokens 24] [--repeats 2]

`--generate`: the articles are embedded-treebank validation documents' first 2–4 sentences as
lin1 prompts (no EOS; `--beam` defaults to SPEC §11's 6 here); prints summaries/s and summary
tokens/s of each, their ratio, the max |Δ log-prob| of the best summaries, the count of articles
whose result differs in any field (ids, attachments, log-prob, ranked scores, counters; must be
0) and the batched search's host share (the per-article pruning `ArticleSearch.choose`).
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.benchtools import parser as make_parser, table  # noqa: E402
from slm_jax.configurations import CONFIGURATIONS  # noqa: E402
from slm_jax.corpus.treebank import embedded_corpus  # noqa: E402
from slm_jax.data.encode import encode_document  # noqa: E402
from slm_jax.model import ModelConfig  # noqa: E402
from slm_jax.model.decoder import param_count  # noqa: E402
from slm_jax.pushdown import generate as pushdown_generate  # noqa: E402
from slm_jax.pushdown.beam import beam_score  # noqa: E402
from slm_jax.pushdown.beam_batch import beam_score_many  # noqa: E402
from slm_jax.pushdown.generate import joint_generate  # noqa: E402
from slm_jax.pushdown.generate_batch import joint_generate_many  # noqa: E402
from slm_jax.pushdown.model import PushdownLM  # noqa: E402
from slm_jax.pushdown.scoring import PushdownScorer, scoring_configuration  # noqa: E402
from slm_jax.tokenizer import make_tokenizer  # noqa: E402


def rows_of(scorer: PushdownScorer, sentences) -> list[tuple]:
  """(tokens, kinds, sentence) of each sentence, as `PushdownScorer.logprobs` builds them."""
  sequences = [scorer.terminal_sequence([words]) for words in sentences]
  return [(np.asarray(s.tokens, np.int32), np.asarray(s.kinds, np.int32), np.asarray(s.sentence))
          for s in sequences]


def one_at_a_time(model, rows, beam):
  return [beam_score(model, *row, beam=beam) for row in rows]


def differences(alone, together) -> tuple[float, int]:
  """(max |Δ prefix log-prob|, sentences whose results differ in any field)."""
  delta = max(float(np.max(np.abs(a.prefix_log_probs - b.prefix_log_probs)))
              for a, b in zip(alone, together))
  differing = sum(int(not np.array_equal(a.prefix_log_probs, b.prefix_log_probs)
                      or (a.log_prob, a.best, a.hypotheses) != (b.log_prob, b.best, b.hypotheses))
                  for a, b in zip(alone, together))
  return delta, differing


def same_generation(a, b) -> bool:
  return (a.ids.tolist() == b.ids.tolist() and a.attachments.tolist() == b.attachments.tolist()
          and (a.logprob, a.ranked, a.finished, a.steps, a.positions)
          == (b.logprob, b.ranked, b.finished, b.steps, b.positions))


def timed_choose() -> list[float]:
  """Seconds spent in `ArticleSearch.choose` (the host pruning), accumulated in the list."""
  spent = [0.0]
  choose = pushdown_generate.ArticleSearch.choose

  def wrapped(self, *args):
    start = time.perf_counter()
    try:
      return choose(self, *args)
    finally:
      spent[0] += time.perf_counter() - start

  pushdown_generate.ArticleSearch.choose = wrapped
  return spent


def generate_bench(args, model, config, tokenizer) -> int:
  documents = embedded_corpus("validation", 100, seed=0)
  prompts = []
  for i, document in enumerate(documents[:args.articles + 2]):
    sequence = encode_document(document[:2 + i % 3], tokenizer, "lin1")
    prompts.append(sequence.take(np.arange(len(sequence) - 1)))  # the summary follows: no EOS
  warmup, timed = prompts[:2], prompts[2:]
  options = dict(beam=args.beam or 6, max_tokens=args.max_tokens)
  alone_of = lambda ps: [joint_generate(model, tokenizer, p, **options) for p in ps]
  batched = lambda ps: joint_generate_many(model, tokenizer, ps, concurrent=args.concurrent,
                                           **options)
  start = time.perf_counter()
  for ps in (warmup, timed):  # every width and lane count the timed passes ask for compiles here
    alone_of(ps)
    batched(ps)
  print(f"PushdownLM d={args.d_model} L={args.layers} H={args.heads} V={tokenizer.vocab_size} "
        f"({param_count(config) / 1e6:.2f}M decoder parameters), backend "
        f"{jax.default_backend()}; {len(timed)} articles (prompts of "
        f"{min(len(p) for p in timed)}-{max(len(p) for p in timed)} lin1 tokens), beam "
        f"{options['beam']}, max_tokens {args.max_tokens}; batched: {args.concurrent} at a time; "
        f"compile + warm-up {time.perf_counter() - start:.0f} s")
  host = timed_choose()
  lines = []
  for repeat in range(args.repeats):
    start = time.perf_counter()
    alone = alone_of(timed)
    t_one = time.perf_counter() - start
    host[0] = 0.0
    start = time.perf_counter()
    together = batched(timed)
    t_many = time.perf_counter() - start
    tokens = sum(len(g.ids) for g in alone)
    delta = max(abs(a.logprob - b.logprob) for a, b in zip(alone, together))
    differing = sum(not same_generation(a, b) for a, b in zip(alone, together))
    lines.append([repeat + 1, f"{len(timed) / t_one:.2f}", f"{len(timed) / t_many:.2f}",
                  f"{tokens / t_one:.1f}", f"{tokens / t_many:.1f}", f"{t_one / t_many:.2f}",
                  f"{delta:.1e}", differing, f"{100 * host[0] / t_many:.0f} %"])
  print(table(["pass", "one-article summaries/s", "batched summaries/s",
               "one-article tokens/s", "batched tokens/s", "ratio", "max abs Δ log-prob",
               "differing", "batched host share"], lines, right_align=True))
  return 0


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--sentences", type=int, default=8)
  parser.add_argument("--sentences-per-batch", type=int, default=8)
  parser.add_argument("--beam", type=int, default=None, help="300; --generate: 6")
  parser.add_argument("--generate", action="store_true")
  parser.add_argument("--articles", type=int, default=8)
  parser.add_argument("--concurrent", type=int, default=8)
  parser.add_argument("--max-tokens", type=int, default=24)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--min-words", type=int, default=6)
  parser.add_argument("--max-words", type=int, default=12)
  parser.add_argument("--d-model", type=int, default=64)
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--heads", type=int, default=2)
  args = parser.parse_args()

  documents = embedded_corpus("train", 200, seed=0)
  tokenizer = make_tokenizer("word", words=(w for d in documents for t in d for w in t.leaves()))
  pool = [t.leaves() for d in embedded_corpus("validation", 100, seed=0) for t in d]
  sentences = [s for s in pool if args.min_words <= len(s) <= args.max_words]
  warmup, timed = sentences[:2], sentences[2:2 + args.sentences]
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=args.d_model,
                       n_layers=args.layers, n_heads=args.heads, compute_dtype=jnp.float32,
                       attention_impl="xla", pushdown_depths=8)
  model = PushdownLM(config, rngs=nnx.Rngs(0))
  model.depth_embed[...] = model.depth_embed[...] * 30
  if args.generate:
    return generate_bench(args, model, config, tokenizer)
  args.beam = args.beam or 300
  scorer = PushdownScorer(model, tokenizer, scoring_configuration(CONFIGURATIONS["pushdown"]),
                          beam=args.beam)
  warm_rows, rows = rows_of(scorer, warmup), rows_of(scorer, timed)
  words = sum(map(len, timed))
  batched = lambda r: beam_score_many(model, r, args.beam, args.sentences_per_batch)
  start = time.perf_counter()
  for r in (warm_rows, rows):  # every bucket the timed passes ask for compiles here
    one_at_a_time(model, r, args.beam)
    batched(r)
  print(f"PushdownLM d={args.d_model} L={args.layers} H={args.heads} V={tokenizer.vocab_size} "
        f"({param_count(config) / 1e6:.2f}M decoder parameters), beam {args.beam}, backend "
        f"{jax.default_backend()}; {len(timed)} sentences, {words} words "
        f"({args.min_words}-{args.max_words} a sentence); batched: "
        f"{args.sentences_per_batch} at a time; compile + warm-up "
        f"{time.perf_counter() - start:.0f} s")
  lines = []
  for repeat in range(args.repeats):
    start = time.perf_counter()
    alone = one_at_a_time(model, rows, args.beam)
    t_one = time.perf_counter() - start
    start = time.perf_counter()
    together = batched(rows)
    t_many = time.perf_counter() - start
    delta, differing = differences(alone, together)
    lines.append([repeat + 1, f"{words / t_one:.1f}", f"{words / t_many:.1f}",
                  f"{t_one / t_many:.2f}", f"{delta:.1e}", differing])
  print(table(["pass", "one-row words/s", "batched words/s", "ratio", "max abs Δ log-prob",
               "differing"], lines, right_align=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
