"""Teacher-forced scoring of linearized sequences (per-token log-probabilities, sums over targets).

`Scorer(model, tokenizer, configuration)`:
  logprobs(sequences)  -> per sequence, float64 [T-1]: log p(token_t | tokens_<t), t = 1..T-1
  score(sequences)     -> float64 [n]: the sum over the configuration's targets (SPEC §4: CNT2
                          excluded under TG-family attention, NT tokens under lin1_shuf); a
                          `mask_fn(kinds_T) -> bool [T]` overrides the selection
  terminal_logprobs(sentences) / terminal_logprob(words) -> the log-probability of sentences of
                          words scored directly, in the terminal format the model reads
                          (lin0, or pause1/pause2 with the pause tokens inserted as in training;
                          tree configurations are scored in lin0, the Tree-Shuffle protocol)
  terminal_word_logprobs(sentences) -> per sentence, float64 [L]: the log-probability of each
                          word (its pieces and the pause tokens that follow it; no EOS)

Each sequence is one segment of its own row (`row_metadata`, segment 1, positions from 0); rows
are padded (segment 0) to a length bucket (`slm_jax.buckets`) and batched, so results do not
depend on batching. That batching is `batched_rows` (`BatchScorer.batched`), the one loop of every scorer:
`Scorer`, the Pushdown scorers (`pushdown.scoring`), `text_scorer.TextScorer`
(plain token ids, e.g. a Hugging Face checkpoint's text) and GTCA's letter and sentence scores
(`gtca.scoring`: one fixed row width, each row's span tree and letters found by its index).
All natural logarithms.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Sequence as SequenceT

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.buckets import bucket
from slm_jax.configurations import Configuration
from slm_jax.data.encode import encode_document
from slm_jax.kinds import Kind
from slm_jax.linearize import Sequence
from slm_jax.model.decoder import Decoder
from slm_jax.structure import RowMetadata, row_metadata, target_mask
from slm_jax.tokenizer import Tokenizer
from slm_jax.trees import Tree

LENGTH_BUCKET = 16  # shortest padded row (slm_jax.buckets: 16, 24, 32, 48, …)


class StaticGraph:
  """A model's graphdef as a jit static argument whose hash is computed once: flax hashes a
  GraphDef by walking it, ~1 ms per call on CPU (a sixth of a beam step for the tiny model).
  Equal when the graphdefs are (the same object: no walk)."""

  __slots__ = ("graphdef", "_hash")

  def __init__(self, graphdef):
    self.graphdef, self._hash = graphdef, hash(graphdef)

  def __hash__(self) -> int:
    return self._hash

  def __eq__(self, other) -> bool:
    return self is other or (isinstance(other, StaticGraph) and self._hash == other._hash
                             and self.graphdef == other.graphdef)


_INTERNED: dict = {}  # graphdef -> its one StaticGraph (jit's cache then matches by identity)


def split_model(model: Decoder) -> tuple[StaticGraph, object]:
  """(static graph, parameters) of a model for the jitted scoring functions; equal graphdefs
  share one `StaticGraph`, so every later jit lookup is an identity check."""
  graphdef, params = nnx.split(model)
  graph = _INTERNED.get(graphdef)
  if graph is None:
    graph = _INTERNED[graphdef] = StaticGraph(graphdef)
  return graph, params


@functools.partial(jax.jit, static_argnums=(0,))
def _token_logprobs(graph: StaticGraph, params, tokens_BT, meta: RowMetadata):
  """log p(tokens[:, t] | tokens[:, <t]) for t >= 1, float32 [B, T-1]."""
  model = nnx.merge(graph.graphdef, params)
  logits_BTV = model(tokens_BT, meta)[:, :-1]
  logz_BT = jax.nn.logsumexp(logits_BTV, axis=-1)
  picked_BT = jnp.take_along_axis(logits_BTV, tokens_BT[:, 1:, None], axis=-1)[..., 0]
  return picked_BT - logz_BT


def check_attention(model: Decoder, configuration: Configuration) -> None:
  """The configuration must decode with the attention the model was trained with."""
  if configuration.attention != model.config.attention:
    raise ValueError(f"configuration {configuration.name} uses attention "
                     f"{configuration.attention.name} but the model was built with "
                     f"{model.config.attention.name}")


class BatchScorer:
  """The batching every scorer shares (`Scorer`, `TextScorer`, the Pushdown scorers; GTCA's
  scorers call `batched_rows` itself, having no `Decoder` to split): sequences
  sorted by length, cut into chunks of `batch_size`, each chunk one padded batch — one sequence
  per row (segment 1, padding segment 0 and `pad_id`), the width a length bucket, the row count
  a bucket of at most `batch_size` (`slm_jax.buckets`, so few shapes compile) — handed to a
  device call; its outputs are returned per sequence, in input order."""

  def __init__(self, model, *, batch_size: int, pad_id: int, max_len: int | None = None):
    if batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    self.model = model
    self.batch_size = int(batch_size)
    self.pad_id = int(pad_id)
    self.max_len = max_len
    self.graphdef, self.params = split_model(model)

  def batched(self, arrays: SequenceT[tuple[np.ndarray, np.ndarray]], call: Callable[..., tuple],
              **options) -> list[tuple[np.ndarray | None, ...]]:
    """`batched_rows` with this scorer's batch size and padding id."""
    return batched_rows(arrays, call, batch_size=self.batch_size, pad_id=self.pad_id, **options)


def batched_rows(arrays: SequenceT[tuple[np.ndarray, np.ndarray]], call: Callable[..., tuple], *,
                 batch_size: int, pad_id: int = 0, width: int | None = None,
                 full_rows: bool = False, with_index: bool = False
                 ) -> list[tuple[np.ndarray | None, ...]]:
  """The one batching loop (`BatchScorer`). `arrays` = (ids [T], kinds [T]) per sequence;
  `call(tokens_BT, kinds_BT, segment_BT)` — with `with_index` also `index_B` (int32 [B]: the
  position in `arrays` of each row's sequence, −1 for a padding row), for callers that add
  per-row fields of their own (GTCA's chunks and option letters) — returns a tuple of [B, …]
  arrays (or None): per sequence, the tuple of its rows (host arrays, the padding not cut).
  Rows are padded to a length bucket, or to `width` for every batch (one compiled shape); the
  row count is a bucket of at most `batch_size`, or `batch_size` itself with `full_rows`."""
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  longest = max((len(ids) for ids, _ in arrays), default=0)
  if width is not None and longest > width:
    raise ValueError(f"a sequence of {longest} tokens does not fit rows of width {width}")
  out: list[tuple[np.ndarray | None, ...]] = [()] * len(arrays)
  order = sorted(range(len(arrays)), key=lambda i: len(arrays[i][0]))
  for start in range(0, len(order), batch_size):
    chunk = order[start:start + batch_size]
    cols = width or bucket(len(arrays[chunk[-1]][0]), LENGTH_BUCKET)
    rows = batch_size if full_rows else bucket(len(chunk), 1, batch_size)
    tokens = np.full((rows, cols), pad_id, np.int32)
    kinds = np.zeros((rows, cols), np.int32)
    segment = np.zeros((rows, cols), np.int32)
    index = np.full(rows, -1, np.int32)
    for r, i in enumerate(chunk):
      ids, kind = arrays[i]
      tokens[r, :len(ids)], kinds[r, :len(ids)], segment[r, :len(ids)] = ids, kind, 1
      index[r] = i
    results = call(tokens, kinds, segment, *((index,) if with_index else ()))
    results = [None if x is None else np.asarray(x) for x in results]
    for r, i in enumerate(chunk):
      out[i] = tuple(None if x is None else x[r] for x in results)
  return out


class Scorer(BatchScorer):
  """Batched teacher-forced scoring with one model (see module docstring)."""

  def __init__(self, model: Decoder, tokenizer: Tokenizer, configuration: Configuration, *,
               batch_size: int = 32, max_len: int | None = None):
    if model.config.vocab_size < tokenizer.vocab_size:
      raise ValueError(f"model vocabulary ({model.config.vocab_size}) is smaller than the "
                       f"tokenizer's ({tokenizer.vocab_size})")
    check_attention(model, configuration)
    super().__init__(model, batch_size=batch_size, pad_id=tokenizer.pad_id, max_len=max_len)
    self.tokenizer = tokenizer
    self.configuration = configuration

  # ---- linearized sequences

  def logprobs(self, sequences: SequenceT[Sequence]) -> list[np.ndarray]:
    """Per-token log-probabilities of each sequence, float64 [T-1] aligned to tokens[1:]."""
    arrays = [self._ids(s, i) for i, s in enumerate(sequences)]
    rows = self.batched(arrays, lambda *batch: (self.batch_logprobs(*batch),))
    return [np.asarray(lp, np.float64)[:len(ids) - 1] for (lp,), (ids, _) in zip(rows, arrays)]

  def batch_logprobs(self, tokens_BT: np.ndarray, kinds_BT: np.ndarray,
                     segment_BT: np.ndarray) -> jax.Array:
    """The device call of one padded batch (one sequence per row, segment 1, padding 0):
    [B, T-1] log-probabilities aligned to tokens[:, 1:]. Subclasses replace it (the Pushdown
    teacher-forced scorer) and keep the batching of `BatchScorer.batched`."""
    meta = jax.tree.map(jnp.asarray, row_metadata(kinds_BT, segment_BT))
    return _token_logprobs(self.graphdef, self.params, jnp.asarray(tokens_BT), meta)

  def _ids(self, sequence: Sequence, index: int) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.asarray(sequence.tokens)
    if not np.issubdtype(tokens.dtype, np.integer):
      raise ValueError(f"sequence {index}: tokens must be vocabulary ids (use "
                       "data.encode.encode_document), got dtype " + str(tokens.dtype))
    if len(tokens) < 2:
      raise ValueError(f"sequence {index}: needs at least 2 tokens (BOS and one more)")
    if self.max_len is not None and len(tokens) > self.max_len:
      raise ValueError(f"sequence {index}: {len(tokens)} tokens exceed max_len={self.max_len}")
    if tokens.min() < 0 or tokens.max() >= self.model.config.vocab_size:
      raise ValueError(f"sequence {index}: token id outside [0, {self.model.config.vocab_size})")
    return tokens.astype(np.int32), np.asarray(sequence.kinds, np.int32)

  def target_mask(self, kinds_T: np.ndarray) -> np.ndarray:
    """SPEC §4 targets of one sequence (one segment), bool [T]."""
    kinds = np.asarray(kinds_T)
    return target_mask(kinds, np.ones_like(kinds), self.configuration.linearization,
                       self.configuration.attention)

  def score(self, sequences: SequenceT[Sequence],
            mask_fn: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Σ log p over the selected tokens of each sequence (targets by default), float64 [n]."""
    select = mask_fn or self.target_mask
    totals = []
    for sequence, lp in zip(sequences, self.logprobs(sequences)):
      mask = np.asarray(select(np.asarray(sequence.kinds)), bool)
      if mask.shape != (len(sequence),):
        raise ValueError(f"mask_fn returned shape {mask.shape} for a sequence of "
                         f"{len(sequence)} tokens")
      totals.append(float(lp[mask[1:]].sum()))
    return np.asarray(totals, np.float64)

  # ---- sentences of words scored in the terminal format

  @property
  def terminal_scheme(self) -> str:
    return self.configuration.scheme.terminal_format

  def terminal_sequence(self, sentences: SequenceT[SequenceT[str]]) -> Sequence:
    """A document of word sentences as ids in the terminal format (BOS … EOS)."""
    if not sentences or any(len(words) == 0 for words in sentences):
      raise ValueError("terminal scoring needs at least one sentence and no empty sentence")
    document = [Tree("X", tuple(words)) for words in sentences]  # X never reaches lin0/pause
    return encode_document(document, self.tokenizer, self.terminal_scheme)

  def terminal_logprobs(self, sentences: SequenceT[SequenceT[str]]) -> np.ndarray:
    """log p of each sentence (its own document: terminals, pauses, EOS), float64 [n]."""
    return self.score([self.terminal_sequence([words]) for words in sentences])

  def terminal_logprob(self, document_words) -> float:
    """log p of one sentence (a list of words) or one document (a list of word lists)."""
    words = list(document_words)
    document = words if words and not isinstance(words[0], str) else [words]
    return float(self.score([self.terminal_sequence(document)])[0])

  def terminal_word_logprobs(self, sentences: SequenceT[SequenceT[str]]) -> list[np.ndarray]:
    """Per word: Σ log p of its pieces and its trailing pause tokens; float64 [L] per sentence."""
    sequences = [self.terminal_sequence([words]) for words in sentences]
    out = []
    for words, sequence, lp in zip(sentences, sequences, self.logprobs(sequences)):
      kinds = sequence.kinds[1:]
      in_word = (kinds == Kind.TERMINAL) | (kinds == Kind.PAUSE)
      unit = sequence.unit[1:][in_word]
      first = np.flatnonzero(np.diff(unit, prepend=-1) != 0)
      sums = np.add.reduceat(lp[in_word], first) if len(first) else np.zeros(0)
      if len(sums) != len(words):
        raise AssertionError(f"{len(sums)} word groups for {len(words)} words")
      out.append(sums.astype(np.float64))
    return out


def logsumexp(values) -> float:
  """log Σ exp(values) in float64 (−inf for an empty input)."""
  values = np.asarray(values, np.float64)
  if values.size == 0:
    return -math.inf
  top = values.max()
  if not np.isfinite(top):
    return float(top)
  return float(top + np.log(np.exp(values - top).sum()))
