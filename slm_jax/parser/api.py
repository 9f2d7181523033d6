"""The parser's library API: `load_parser(path=None) -> Parser` and `Parser.parse` /
`Parser.proposals` / `Parser.proposals_batch`.

Sentences are lists of PTB words (the leaves of the output trees, kept as given). They are sorted
by length and batched by length bucket (`BUCKETS`; batch_words // N rows of padded length N, a
short batch padded with dummy one-word rows to a power of two), so each bucket compiles a few
shapes once per process. `parse` is Viterbi CKY, with the saved `empty_bias` added to s(·, ·, ∅)
(a decoding constant tuned on dev that balances precision and recall). `proposals` draws exact
CRF samples (no bias), deduplicates them after debinarization (the key is the tree's labelled
span set, which determines the SPEC §1 tree), adds the unbiased Viterbi tree, draws further rounds
while fewer than k are distinct (at most `rounds` rounds; a sentence whose CRF mass sits on fewer
trees gets fewer than k), and returns them best first by log p(tree) under the CRF (the labelled
binary tree's probability; every binarization of a tree scores the same since s(·, ·, ∅) = 0).
All trees are debinarized and normalized per SPEC §1. A folder may hold an ensemble
(`model.Ensemble`, e.g. the shipped model): everything above then runs on the members' mean span
scores.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.parser import crf
from slm_jax.parser.labels import LabelVocab, debinarize, spans_key
from slm_jax.parser.model import Ensemble, SpanScorer
from slm_jax.parser.vocab import Vocab, padded_length
from slm_jax.parser.weights import load_parts
from slm_jax.ptb import normalize_tree
from slm_jax.trees import Tree

SHIPPED = pathlib.Path(__file__).resolve().parent / "data" / "gum"
BUCKETS = (16, 32, 48, 80, 144, 304)
_SAMPLE_BUDGET = 1 << 24  # B · S · P · L label logits per sampling call


@nnx.jit
def _score(model: SpanScorer | Ensemble, word_ids_BT, char_ids_BTC, lengths_B):
  return model(word_ids_BT, char_ids_BTC, lengths_B)


@nnx.jit
def _viterbi(model: SpanScorer | Ensemble, word_ids_BT, char_ids_BTC, lengths_B, empty_bias):
  scores_BFFL = model(word_ids_BT, char_ids_BTC, lengths_B)
  return crf.viterbi(scores_BFFL.at[..., 0].add(empty_bias), lengths_B)


@dataclasses.dataclass(frozen=True)
class Proposal:
  tree: Tree
  logprob: float  # log p(labelled binary tree) under the CRF


class Parser:
  """A loaded chart parser (see the module docstring)."""

  def __init__(self, model: SpanScorer | Ensemble, vocab: Vocab, labels: LabelVocab,
               batch_words: int = 2048, source: str = "<memory>", empty_bias: float = 0.0):
    model.eval()
    self.model = model
    self.vocab = vocab
    self.labels = labels
    self.batch_words = int(batch_words)
    self.source = source
    # Added to s(i, j, ∅) by `parse` only (Viterbi): > 0 trades recall for precision. Tuned on
    # dev after training (`train.tune_empty_bias`) and saved in config.json; proposals sample the
    # CRF as trained.
    self.empty_bias = float(empty_bias)

  @property
  def max_words(self) -> int:
    return self.model.cfg.max_words

  def _check(self, sentences: Sequence[Sequence[str]]) -> None:
    for index, words in enumerate(sentences):
      if not words:
        raise ValueError(f"sentence {index} is empty")
      if len(words) > self.max_words:
        raise ValueError(f"sentence {index} has {len(words)} words; the parser takes at most "
                         f"{self.max_words}")

  def _batches(self, sentences: Sequence[Sequence[str]], per_row: int = 1):
    """(indices, padded length, batch rows) over sentences sorted by length."""
    order = sorted(range(len(sentences)), key=lambda k: len(sentences[k]))
    start = 0
    while start < len(order):
      N = padded_length(len(sentences[order[start]]), BUCKETS)
      rows = max(1, self.batch_words // (N * per_row))
      stop = start
      while (stop < len(order) and stop - start < rows
             and padded_length(len(sentences[order[stop]]), BUCKETS) == N):
        stop += 1
      # A short batch is padded to a power of two rows only (few shapes, little waste).
      yield order[start:stop], N, min(rows, 1 << (stop - start - 1).bit_length())
      start = stop

  def _encode(self, batch: list[Sequence[str]], N: int, rows: int):
    padded = list(batch) + [["."]] * (rows - len(batch))
    word_ids, char_ids, lengths = self.vocab.encode(padded, N, self.model.cfg.max_word_chars)
    return jnp.asarray(word_ids), jnp.asarray(char_ids), jnp.asarray(lengths)

  def _tree(self, words: Sequence[str], spans_P3: np.ndarray) -> Tree:
    tree = normalize_tree(debinarize(list(words), spans_P3, self.labels))
    assert tree is not None
    return tree

  def parse(self, sentences: Sequence[Sequence[str]]) -> list[Tree]:
    """The Viterbi tree of each sentence, in input order."""
    self._check(sentences)
    out: list[Tree | None] = [None] * len(sentences)
    for indices, N, rows in self._batches(sentences):
      batch = [sentences[k] for k in indices]
      spans_BP3, valid_BP, _ = jax.device_get(_viterbi(self.model, *self._encode(batch, N, rows),
                                                       self.empty_bias))
      for b, k in enumerate(indices):
        out[k] = self._tree(batch[b], spans_BP3[b][valid_BP[b]])
    return out  # type: ignore[return-value]

  def proposals(self, words: Sequence[str], k: int = 300, seed: int = 0) -> list[Tree]:
    """At most k distinct trees over `words`, best first (see the module docstring)."""
    return [p.tree for p in self.proposals_batch([words], k, seed)[0]]

  def proposals_batch(self, sentences: Sequence[Sequence[str]], k: int = 300, seed: int = 0,
                      rounds: int = 4) -> list[list[Proposal]]:
    """`Proposal`s (tree, log p) per sentence, in input order, each list best first."""
    if k < 1:
      raise ValueError(f"need k >= 1 proposals, got {k}")
    self._check(sentences)
    out: list[list[Proposal]] = [[] for _ in sentences]
    labels = len(self.labels)
    key = jax.random.key(seed)
    for indices, N, rows in self._batches(sentences):
      rows = max(1, min(rows, _SAMPLE_BUDGET // (k * (2 * N - 1) * labels)))
      for start in range(0, len(indices), rows):
        part = indices[start:start + rows]
        batch = [sentences[j] for j in part]
        arrays = self._encode(batch, N, rows)
        scores_BFFL = _score(self.model, *arrays)
        lengths_B = arrays[2]
        found: list[dict] = [{} for _ in part]
        best_BP3, best_valid_BP, best_B = jax.device_get(crf.viterbi(scores_BFFL, lengths_B))
        for b in range(len(part)):
          rows_P3 = best_BP3[b][best_valid_BP[b]]
          found[b][spans_key(rows_P3)] = (float(best_B[b]), rows_P3)
        logz_B = None
        for _ in range(rounds):
          if all(len(f) >= k for f in found):
            break
          key, sub = jax.random.split(jax.random.fold_in(key, part[0]))
          spans, valid, score, logz = jax.device_get(
              crf.sample(scores_BFFL, lengths_B, sub, num_samples=k))
          logz_B = logz
          for b in range(len(part)):
            seen = found[b]
            for s in range(k):
              if len(seen) >= k:
                break
              rows_P3 = spans[b, s][valid[b, s]]
              seen.setdefault(spans_key(rows_P3), (float(score[b, s]), rows_P3))
        if logz_B is None:
          logz_B = jax.device_get(crf.log_partition(scores_BFFL, lengths_B))
        for b, j in enumerate(part):
          ranked = sorted(found[b].values(), key=lambda item: -item[0])[:k]
          out[j] = [Proposal(self._tree(batch[b], rows_P3), score - float(logz_B[b]))
                    for score, rows_P3 in ranked]
    return out


def load_parser(path: str | pathlib.Path | None = None, batch_words: int = 2048) -> Parser:
  """The parser saved in folder `path` (None: the shipped GUM model)."""
  folder = SHIPPED if path is None else pathlib.Path(path)
  model, vocab, labels, config = load_parts(folder)
  return Parser(model, vocab, labels, batch_words=batch_words, source=str(folder),
                empty_bias=float(config.get("empty_bias", 0.0)))
