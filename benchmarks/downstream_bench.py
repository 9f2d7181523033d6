"""Downstream generation throughput (SPEC §11 decoding): KV cache vs recomputing every prefix.

  python benchmarks/downstream_bench.py [--beam 6] [--max-words 12] [--max-tokens 24]
                                        [--article-sentences 3] [--repeats 1]
                                        [--large-d-model 512] [--large-layers 6]

One process, the same random-weight models (speed does not depend on training), the same prompt
(the first `--article-sentences` sentences of an embedded-treebank document, in each model's
linearization, the article a summary follows) and the same searches:
  word-synchronous  `word_synchronous_generate` (tgtree: lin2, causal): beam 6, ≤ 4
                    consecutive ONTs, ≤ `--max-words` words; words/s = word steps the search
                    ran per second (`Generation.positions`: every beam hypothesis advanced one
                    word; the search may stop early once `beam` hypotheses have ended)
  terminal beam     `beam_generate` (terminal: lin0): beam 6, ≤ `--max-tokens` tokens;
                    tokens/s = token positions the search ran per second
"output units" are the words / tokens of the best output; "decoder calls" count batched
`step_rows` calls (ms/call: seconds per call, search overhead included).
each with the KV cache (`IncrementalDecoder`: prompt prefilled once, one token per fed
hypothesis) and with recompute (`RecomputeDecoder`: the full forward pass over every fed
hypothesis' prefix each step), on a tiny model (d 128, L 2) and a d512 L6 one. Every search runs
once untimed first (compiles every shape it meets); the median of `--repeats` timed runs is
reported, with the speed-up of the cache and whether both decoders produced the same output.
A random model rarely ends a summary early, so the searches run to their limits (the worst
case). A second table times multiple-choice scoring (items/s, terminal vs tree model, the same
items; `multiple_choice_rows`).
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
import jax.numpy as jnp
from flax import nnx

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slm_jax.benchtools import median_of, parser as make_parser, table  # noqa: E402
from slm_jax.configurations import get_configuration  # noqa: E402
from slm_jax.corpus.treebank import embedded_corpus  # noqa: E402
from slm_jax.data.encode import encode_document  # noqa: E402
from slm_jax.inference.generate import beam_generate, word_synchronous_generate  # noqa: E402
from slm_jax.model import Decoder, ModelConfig  # noqa: E402
from slm_jax.model.decoder import param_count  # noqa: E402
from slm_jax.tokenizer import make_tokenizer  # noqa: E402

HEADERS = ("group", "model", "config", "decoder", "prompt tokens", "output units",
           "search steps", "decoder calls", "seconds", "steps/s", "ms/call", "cache speed-up",
           "same output")


def build_model(tokenizer, configuration, d_model: int, layers: int, heads: int) -> Decoder:
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=d_model, n_layers=layers,
                       n_heads=heads, compute_dtype=jnp.float32,
                       attention=configuration.attention)
  return Decoder(config, rngs=nnx.Rngs(0))


def generation_rows(args, tokenizer, article, sizes) -> list[tuple]:
  """KV cache vs recompute for word-synchronous (tgtree) and terminal beam generation."""
  rows = []
  searches = (("word-synchronous (words/s)", "tgtree", word_synchronous_generate,
               dict(beam=args.beam, max_words=args.max_words, max_open=4)),
              ("terminal beam (tokens/s)", "terminal", beam_generate,
               dict(beam=args.beam, max_tokens=args.max_tokens)))
  for group, name, search, options in searches:
    configuration = get_configuration(name)
    sequence = encode_document(article, tokenizer, configuration.linearization)
    prompt = (sequence.tokens[:-1], sequence.kinds[:-1])  # the article, without its EOS
    for label, (d_model, layers, heads) in sizes:
      model = build_model(tokenizer, configuration, d_model, layers, heads)
      model_name = f"{label} d{d_model} L{layers} ({param_count(model.config) / 1e6:.1f}M)"
      outputs = {}
      for decoder in ("kv-cache", "recompute"):
        run = lambda: search(model, tokenizer, configuration, prompt[0], prompt_kinds=prompt[1],
                             recompute=decoder == "recompute", **options)
        seconds, out = median_of(args.repeats, run, warmup=1)
        outputs[decoder] = (seconds, out)
      kv_seconds, kv = outputs["kv-cache"]
      for decoder, (seconds, out) in outputs.items():
        same = out.ids.tolist() == kv.ids.tolist() and abs(out.logprob - kv.logprob) < 1e-3
        rows.append((group, model_name, name, decoder, len(prompt[0]), out.words,
                     out.positions, out.steps, f"{seconds:.3f}", f"{out.positions / seconds:.1f}",
                     f"{1000 * seconds / out.steps:.1f}", f"{seconds / kv_seconds:.1f}x",
                     "yes" if same else "NO"))
  return rows


MC_HEADERS = ("task", "model", "config", "tree source", "items", "options", "tokens/option",
              "seconds", "items/s", "vs terminal")


def multiple_choice_rows(args, tokenizer, documents, sizes) -> list[tuple]:
  """Multiple-choice scoring items/s (SPEC §11 S_full / S_term through `scoring.evaluate_task`),
  terminal vs tree model, same process, same items: `--mc-items` ARC-style 4-option items
  built from embedded-treebank sentences (question = one sentence, options = the first words of
  four others), 3 shots. Tree models read flat trees and, with `--mc-parser`, the shipped
  parser's trees; the untimed pass parses and caches every sentence, so the timed pass measures
  scoring alone (the parser's trees are deeper: longer sequences)."""
  import tempfile  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.encoding import make_tree_source  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.example import TaskExample  # pylint: disable=g-import-not-at-top
  from slm_jax.downstream.scoring import as_scorer, evaluate_task  # pylint: disable=g-import-not-at-top
  sentences = [" ".join(t.leaves()) for d in documents for t in d]
  def item(i: int) -> TaskExample:
    options = tuple(" ".join(sentences[(7 * i + k + 1) % len(sentences)].split()[:4])
                    for k in range(4))
    return TaskExample("arc_easy", sentences[i % len(sentences)], options, i % 4, f"bench:{i}")
  shots = [item(10_000 + k) for k in range(3)]
  items = [item(i) for i in range(args.mc_items)]
  warm = items  # the same shapes: the timed pass compiles nothing
  sources = [("terminal", None)] + [("tgtree", "flat")] + (
      [("tgtree", "parser")] if args.mc_parser else [])
  rows, terminal_rate = [], {}
  for label, (d_model, layers, heads) in sizes:
    for name, spec in sources:
      configuration = get_configuration(name)
      model = build_model(tokenizer, configuration, d_model, layers, heads)
      scorer = as_scorer(_Run(model, tokenizer, configuration), batch_size=32)
      source = make_tree_source(spec) if spec else None
      with tempfile.TemporaryDirectory() as out:
        evaluate_task(scorer, "arc_easy", warm, shots, out + "/warm", source, progress=False)
        start = time.perf_counter()
        evaluate_task(scorer, "arc_easy", items, shots, out + "/timed", source, progress=False)
        seconds = time.perf_counter() - start
      from slm_jax.downstream.encoding import TextEncoder  # pylint: disable=g-import-not-at-top
      from slm_jax.downstream.prompts import build_prompts  # pylint: disable=g-import-not-at-top
      encoder = TextEncoder(tokenizer, configuration, source)
      lengths = [len(encoder.encode(p.components)) for x in items[:8]
                 for p in build_prompts(x, shots)]
      rate = len(items) / seconds
      if name == "terminal":
        terminal_rate[label] = rate
      model_name = f"{label} d{d_model} L{layers} ({param_count(model.config) / 1e6:.1f}M)"
      rows.append(("arc-style, 3 shots", model_name, name, spec or "-", len(items), 4,
                   f"{sum(lengths) / len(lengths):.0f}", f"{seconds:.2f}", f"{rate:.1f}",
                   f"{rate / terminal_rate[label]:.2f}x"))
  return rows


class _Run:
  """What `scoring.as_scorer` reads from a loaded run."""

  def __init__(self, model, tokenizer, configuration):
    self.model, self.tokenizer, self.configuration = model, tokenizer, configuration


def main() -> int:
  parser = make_parser(__doc__)
  parser.add_argument("--beam", type=int, default=6)
  parser.add_argument("--max-words", type=int, default=12)
  parser.add_argument("--max-tokens", type=int, default=24)
  parser.add_argument("--article-sentences", type=int, default=3)
  parser.add_argument("--repeats", type=int, default=1)
  parser.add_argument("--large-d-model", type=int, default=512)
  parser.add_argument("--large-layers", type=int, default=6)
  parser.add_argument("--mc-items", type=int, default=64, help="multiple-choice items timed")
  parser.add_argument("--mc-parser", action="store_true",
                      help="also time the tree model on the shipped parser's trees")
  parser.add_argument("--skip-generation", action="store_true")
  args = parser.parse_args()

  documents = embedded_corpus("train", 200, seed=0)
  tokenizer = make_tokenizer("word", words=(w for d in documents for t in d for w in t.leaves()))
  article = next(d for d in documents if len(d) >= args.article_sentences)
  article = article[:args.article_sentences]
  sizes = (("tiny", (128, 2, 4)), ("large", (args.large_d_model, args.large_layers, 8)))
  rows = [] if args.skip_generation else generation_rows(args, tokenizer, article, sizes)
  mc_rows = multiple_choice_rows(args, tokenizer, documents, sizes)
  print(f"backend {jax.default_backend()}; V={tokenizer.vocab_size} (word-level); beam "
        f"{args.beam}; ≤ {args.max_words} words (trees), ≤ {args.max_tokens} tokens (terminal); "
        f"median of {args.repeats} run(s) after a compiling one")
  if rows:
    print(table(HEADERS, rows))
  print("\nmultiple-choice scoring (items/s; one item = 4 options scored, S_full and S_term)")
  print(table(MC_HEADERS, mc_rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
