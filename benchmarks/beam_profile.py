"""The issue #46 parts of `beam_bench.py` (run through it): where a word's time goes
(`--profile`) and the compiled word loop's projection to a full-size model (`--project`).

`profile`: every device call of the one-sentence search, the batched search with host rounds and
with the compiled word loop timed to completion (`CallTimer`: decoder calls; for the loop its
`rounds`, which hold every round's device work, and the host's edits and reads), the rest
counted as the host's bookkeeping, per word and per host visit (an expansion round of the host
searches, a `rounds` call of the loop).

`projection`: the compiled word loop (`inference.beam_loop`) on a model of the named scale's widths
(`run_config.build(config, scale)`: d_model, heads, FFN) with `--project-layers` of its layers,
float32 (the evaluation's dtype), as many sentences in flight as the full model's key/value arena
allows on this device (`beam.fit_in_memory`), and the same search on the bench's small model
(d 128, L 2: the loop's own floor, its bookkeeping and the host's visits). A word's time is
taken as floor + per-layer time × layers (the decoder steps are layer after layer; the rows fed
per word do not depend on the model), so the full model's seconds per word are
floor + (measured − floor) · layers / `--project-layers`, and the full SyntaxGym (hu31, every
item: `--sg-words` 38,478 words, docs/BEAM_BENCH.md §4) takes that × words. A projection from a
measurement, not a measurement of the full model (its compile alone would take minutes).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.benchtools import table
from slm_jax.inference.beam import BeamSearcher, fit_in_memory
from slm_jax.inference.incremental import arena_bytes
from slm_jax.kinds import Kind
from slm_jax.model import Decoder
from slm_jax.model.decoder import param_count
from slm_jax.train import run_config

SG_WORDS = 38_478  # full hu31 SyntaxGym, every item (docs/BEAM_BENCH.md §4)


DECODER_CALLS = ("step_rows", "gather", "copy_rows", "start_rows", "_compact_arena")
LOOP_CALLS = ("rounds", "begin", "read_pools", "read_rows", "held_lengths")


class CallTimer:
  """Times every call of `names` on `owner` (a decoder, or a compiled word loop), blocked until
  its results (or the decoder's arrays) are ready. `visits`: the host's visits — the calls of
  `visit`, or without `visit` a `gather` of more than one column (an expansion round; the
  feed's gathers read one)."""

  def __init__(self, owner, names, decoder, visit: str | None = None):
    self.owner, self.names, self.decoder, self.visit = owner, names, decoder, visit
    self.seconds = dict.fromkeys(names, 0.0)
    self.calls = dict.fromkeys(names, 0)
    self.visits = 0
    # The owner's own attributes (the loop's jitted calls) are put back; a decoder's methods
    # are the class's, uncovered by deleting the wrapper.
    self.own = {name: owner.__dict__[name] for name in names if name in owner.__dict__}
    for name in names:
      setattr(owner, name, self._timed(name, getattr(owner, name)))

  def _timed(self, name, method):
    def call(*args, **kwargs):
      start = time.perf_counter()
      out = method(*args, **kwargs)
      # A loop call's results (its inputs are donated), else the decoder's arrays.
      jax.block_until_ready(out if out is not None else (self.decoder.cache,
                                                         self.decoder._logprobs))
      self.seconds[name] += time.perf_counter() - start
      self.calls[name] += 1
      if name == self.visit or (self.visit is None and name == "gather"
                                and np.shape(args[0])[1] > 1):
        self.visits += 1
      return out
    return call

  def restore(self) -> None:
    for name in self.names:
      if name in self.own:
        setattr(self.owner, name, self.own[name])
      else:
        delattr(self.owner, name)


def _timers(searcher, decoder) -> list[CallTimer]:
  if not searcher.compiled:
    return [CallTimer(decoder, DECODER_CALLS, decoder)]
  return [CallTimer(searcher._word_loop, LOOP_CALLS, decoder, visit="rounds"),
          CallTimer(decoder, ("start_rows", "_compact_arena"), decoder, visit="")]


def profile(args, model, tokenizer, configuration, warmup, timed) -> None:
  """Where a word's time goes (module docstring): one table row per search."""
  options = dict(beam=args.beam, fast_track=args.fast_track,
                 sentences_per_batch=args.sentences_per_batch)
  rows = args.sentences_per_batch * BeamSearcher(model, tokenizer, configuration,
                                                 **options).capacity
  searches = [("one-sentence", BeamSearcher(model, tokenizer, configuration, batched=False,
                                            **options), None),
              ("batched, host rounds", BeamSearcher(model, tokenizer, configuration, **options),
               rows),
              ("batched, compiled loop", BeamSearcher(model, tokenizer, configuration,
                                                      compiled=True, **options), rows)]
  slots = max(searches[0][1].slots(s) for s in warmup + timed)
  words = sum(map(len, timed))
  per_word = lambda x: f"{1e3 * x / words:.1f}"
  lines = []
  for name, searcher, batch in searches:
    decoder = searcher.decoder(slots, rows=batch)
    decoder.start([tokenizer.bos_id], [int(Kind.BOS)])
    decoder.precompile()
    searcher.search_many(warmup, complete=False)
    timers = _timers(searcher, decoder)
    start = time.perf_counter()
    searcher.search_many(timed, complete=False)
    total = time.perf_counter() - start
    for timer in timers:
      timer.restore()
    if searcher.compiled and searcher._word_loop is not timers[0].owner:
      raise SystemExit(f"--profile: the {name} search built a new word loop for the timed "
                       "sentences (wider words or fewer in flight than the warm-up's); its "
                       "calls were not timed")
    device = sum(sum(t.seconds.values()) for t in timers)
    visits = sum(t.visits for t in timers)
    steps = timers[0].seconds.get("step_rows")
    lines.append([name, f"{words / total:.2f}", f"{visits / words:.1f}",
                  f"{sum(sum(t.calls.values()) for t in timers) / words:.1f}", per_word(device),
                  "in the loop" if steps is None else per_word(steps), per_word(total - device),
                  f"{1e3 * (total - device) / visits:.2f}",
                  f"{100 * (total - device) / total:.0f} %"])
  print(f"{len(timed)} sentences, {words} words, {args.sentences_per_batch} in flight "
        "(batched); every device call blocked until done")
  print(table(["search", "words/s", "host visits/word", "device calls/word", "device ms/word",
               "of which step_rows", "host ms/word", "host ms/visit", "host share"], lines))


def _words_per_second(searcher, tokenizer, slots: int, rows: int, warmup, timed) -> float:
  """The searcher's words/s on `timed` after compiling and searching `warmup` untimed."""
  decoder = searcher.decoder(slots, rows=rows)
  decoder.start([tokenizer.bos_id], [int(Kind.BOS)])
  decoder.precompile()
  searcher.search_many(warmup, complete=False)
  start = time.perf_counter()
  searcher.search_many(timed, complete=False)
  return sum(map(len, timed)) / (time.perf_counter() - start)


def projection(args, small_model, tokenizer, configuration, warmup, timed) -> None:
  """The full model's seconds per word and SyntaxGym hours from two measured models (module
  docstring)."""
  full = run_config.validate(run_config.build(args.config, args.project)).model.replace(
      vocab_size=tokenizer.vocab_size, compute_dtype=jnp.float32)
  measured = full.replace(n_layers=args.project_layers)
  options = dict(beam=args.beam, fast_track=args.fast_track, compiled=True)
  sizing = BeamSearcher(small_model, tokenizer, configuration, **options)
  slots = max(sizing.slots(s) for s in warmup + timed)
  in_flight = fit_in_memory(lambda n: arena_bytes(full, n * sizing.capacity, slots),
                            args.sentences_per_batch, "sentences")
  rows, seconds = [], {}
  for name, model in (("floor (small model)", small_model),
                       (f"{args.project} widths, {measured.n_layers} layers",
                        Decoder(measured, rngs=nnx.Rngs(0)))):
    searcher = BeamSearcher(model, tokenizer, configuration, sentences_per_batch=in_flight,
                            **options)
    rate = _words_per_second(searcher, tokenizer, slots, in_flight * searcher.capacity, warmup,
                             timed)
    seconds[name] = 1 / rate
    config = model.config
    rows.append([name, f"d {config.d_model}, L {config.n_layers}, H {config.n_heads}",
                 f"{param_count(config) / 1e6:.1f}M", in_flight, f"{rate:.2f}",
                 f"{1e3 / rate:.1f}"])
  floor, per_model = seconds.values()
  per_word = floor + (per_model - floor) * full.n_layers / measured.n_layers
  rows.append([f"{args.project}, projected", f"d {full.d_model}, L {full.n_layers}, "
               f"H {full.n_heads}", f"{param_count(full) / 1e6:.1f}M", in_flight,
               f"{1 / per_word:.2f}", f"{1e3 * per_word:.1f}"])
  print(f"compiled word loop on {jax.devices()[0].device_kind}; float32; b = {args.beam}, fast "
        f"track {args.fast_track}; {len(timed)} sentences, {sum(map(len, timed))} words")
  print(table(["model", "dims", "parameters", "sentences in flight", "words/s", "ms/word"], rows))
  if per_model <= floor:
    print("no projection: the measured model was not slower than the floor (noise)")
    return
  print(f"projected full SyntaxGym ({args.sg_words} words) with the {args.project} model: "
        f"{args.sg_words * per_word / 3600:.2f} device-hours")
