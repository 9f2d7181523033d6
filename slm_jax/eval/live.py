"""Live syntactic metrics during training (`train.eval_syntax_every = N`, SPEC §9 protocols).

Every N optimizer steps the trainer calls `LiveSyntax(params)` and writes the returned scalars
next to the loss (`metrics.jsonl`, TensorBoard), so syntactic generalization can be watched as it
emerges. The subsets are small and fixed, so the curves are comparable across steps and runs:

- SG: one suite per circuit (`LIVE_SUITES`), the first `train.eval_syntax_sg_items` items of
  each; the first prediction decides an item; `live_sg` = the mean of the six circuits (the
  headline rule, `slm_jax.eval.sg_aggregate`), `live_sg_suite_mean` beside it. Terminal-format
  models are scored directly, tree models by word-synchronous beam search with b = sub-beam =
  fast track = `train.eval_syntax_beam` and the cap max(3L, 10) (`LIVE_BEAM`): a cheaper search
  than the paper's (b = 300, fast track 30, max(6L, 10)), for trends during a run; the
  evaluator (`python -m slm_jax.evaluate`) gives the paper's numbers.
- BLiMP: the first `train.eval_syntax_blimp_pairs` pairs of the first paradigm (by UID) of
  each of the 13 phenomena (linguistics terms); terminal-format models score the words
  directly (every position, as trained), tree models take the beam's
  sentence marginal (logsumexp over the completed hypotheses: the model is its own parser);
  ties and non-finite scores are wrong (`live_blimp`, `live_blimp_wrong_ties_nonfinite`).

Cost is bounded by the subsets and the small beam, and tree models search the live sentences
together (`BeamSearcher.search_many`, the batched search) in one cache size read whole (one slot
width per compiled function); `live_syntax_seconds` is logged
with every record, so its share of a run can be read off `metrics.jsonl`. Nothing here touches the training state: the parameters are read,
never donated or changed, and no random numbers are drawn, so a run's losses are the same with
live metrics on or off. The data come from the shared folder (`slm_jax.cli.shared_data_dir`, or
`train.eval_syntax_data`); a run that asks for live metrics without it fails at start-up.
"""

from __future__ import annotations

import functools
import pathlib
import time
from typing import Any

import numpy as np
from flax import nnx

from slm_jax import cli
from slm_jax.configurations import Configuration
from slm_jax.eval.blimp import load_blimp, pair_verdicts, word_tokenize
from slm_jax.eval.syntaxgym import evaluate_syntaxgym, load_suites, tokenize_region
from slm_jax.inference.beam import BeamSearcher
from slm_jax.inference.incremental import IncrementalDecoder
from slm_jax.inference.scorer import Scorer
from slm_jax.tokenizer import Tokenizer

LIVE_SUITES = ("number_src", "center_embed", "mvrr", "subordination", "npi_src_any", "cleft")
LIVE_BEAM = dict(max_len_factor=3, min_len=10)  # with beam = word beam = fast track = b


def _data_root(configured: str) -> pathlib.Path:
  root = pathlib.Path(configured) if configured else cli.shared_data_dir()
  need = ("syntaxgym/json", "blimp")
  if root is None or not all((root / n).exists() for n in need):
    where = configured or "../shared/data (or $SLM_JAX_SHARED_DATA)"
    raise FileNotFoundError(f"train.eval_syntax_every needs SyntaxGym and BLiMP data "
                            f"({', '.join(need)}) under {where}: not found; set "
                            "train.eval_syntax_data=DIR or train.eval_syntax_every=0")
  return root


class LiveSyntax:
  """The live SG / BLiMP subsets of one run (see the module docstring); call with params."""

  def __init__(self, train: Any, graphdef: Any, tokenizer: Tokenizer,
               configuration: Configuration):
    self.graphdef, self.tokenizer, self.configuration = graphdef, tokenizer, configuration
    root = _data_root(train.eval_syntax_data)
    self.sg_dir = root / "syntaxgym" / "json"
    self.sg_items = int(train.eval_syntax_sg_items)
    suites = load_suites(self.sg_dir, list(LIVE_SUITES))  # every live suite exists and parses
    paradigms = load_blimp(root / "blimp", max_items=int(train.eval_syntax_blimp_pairs))
    first = {p.term: p for p in reversed(paradigms)}  # the first paradigm of each phenomenon
    self.pairs = [(tuple(word_tokenize(g)), tuple(word_tokenize(b)))
                  for p in sorted(first.values(), key=lambda p: p.uid)
                  for g, b in zip(p.good, p.bad)]
    self.sentences = list(dict.fromkeys(s for pair in self.pairs for s in pair))
    self.tree_model = configuration.scheme.scored_with_structure
    b = int(train.eval_syntax_beam)
    # One decoder size for every live sentence and every call, reading all its slots: one
    # compiled variant per function (compiling dominates a short evaluation).
    decoder_cls = functools.partial(IncrementalDecoder, slot_bucket=1 << 30)
    self.beam = dict(beam=b, fast_track=b, decoder_cls=decoder_cls, **LIVE_BEAM)
    self.sg_words = [[w for region in contents for w in tokenize_region(region)]
                     for suite in suites for item in suite.items[:self.sg_items]
                     for contents in item.conditions.values()]
    self.decoder_len: int | None = None  # the longest live sentence's cache (first call)

  def __call__(self, params: Any) -> dict[str, float]:
    start = time.perf_counter()
    scorer = Scorer(nnx.merge(self.graphdef, params), self.tokenizer, self.configuration)
    searcher = None
    if self.tree_model:
      if self.decoder_len is None:
        probe = BeamSearcher(scorer, self.tokenizer, self.configuration, **self.beam)
        self.decoder_len = max(probe.slots(w) for w in self.sg_words + self.sentences if w)
      searcher = BeamSearcher(scorer, self.tokenizer, self.configuration,
                              decoder_len=self.decoder_len, **self.beam)
    sg = evaluate_syntaxgym(searcher or scorer, self.sg_dir, suites=list(LIVE_SUITES),
                            max_items=self.sg_items)
    logp = dict(zip(self.sentences, self._sentence_logprobs(scorer, searcher)))
    good = np.asarray([logp[g] for g, _ in self.pairs])
    bad = np.asarray([logp[b] for _, b in self.pairs])
    correct, ties, nonfinite = pair_verdicts(good, bad)
    return {"live_sg": 100.0 * sg["sg"], "live_sg_suite_mean": 100.0 * sg["suite_mean"],
            "live_blimp": 100.0 * float(correct.mean()),
            "live_blimp_wrong_ties_nonfinite": ties + nonfinite,
            "live_syntax_seconds": time.perf_counter() - start}

  def _sentence_logprobs(self, scorer: Scorer, searcher: BeamSearcher | None) -> np.ndarray:
    if searcher is None:
      return scorer.terminal_logprobs(self.sentences)
    return np.asarray([r.sentence_logprob
                       for r in searcher.search_many(self.sentences, complete=True)])
