"""The evaluators' scorers for Pushdown runs: attachments marginalized, or the structure supplied.

SG, BLiMP and doc-PPL score a Pushdown run as a terminal model (`scoring_configuration`: its
sentences are written in lin0, every token after BOS is a target) through `PushdownScorer`, a
`Scorer` whose `logprobs` are the increments of the attachment beam's prefix log-probabilities
(SPEC §14: beam 300; `beam_batch.beam_score_many`: `sentences_per_batch` sequences advanced
together, equal bit for bit to `beam.beam_score` one at a time): token t gets
log p̃(x≤t) − log p̃(x<t), so a region's surprisal, a sentence's log-probability (their sum) and
a document's follow the evaluators' own terminal-model code. The sentences of a document are the
sentences of its sequence (`Sequence.sentence`): no word reduces with an earlier sentence.

The downstream multiple-choice tasks and BoolQ (SPEC §11, §14) score a Pushdown run teacher-forced
with *supplied* parser spans through `PushdownTeacherScorer`, a `Scorer` of the run's own
configuration (lin1): `downstream.encoding.TextEncoder` parses every component with the tree
source and writes the prompt in lin1; `logprobs` compacts each lin1 sequence to its terminal row
(`model.terminal_inputs`: BOS, terminals, EOS) with the silver stack tape of those trees, runs
`PushdownLM.forward` on it (jitted, batched and length-bucketed like `Scorer.logprobs`) and
returns per lin1 token the LM log-probability of each terminal and EOS under that tape — and 0
for every structure token: the structure is given, not scored (neither the brackets nor the
attachments enter a score). `target_mask` keeps terminals and EOS only, so S_full counts the
continuation's terminals (and EOS) and S_term its terminals: `downstream.scoring` works
unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence as SequenceT

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.configurations import Configuration
from slm_jax.inference.beam import SENTENCES_PER_BATCH
from slm_jax.inference.scorer import Scorer
from slm_jax.kinds import EOS_CODE, TERMINAL_CODE
from slm_jax.linearize import Sequence
from slm_jax.pushdown.beam import BEAM
from slm_jax.pushdown.beam_batch import beam_score_many
from slm_jax.pushdown.model import terminal_inputs


def scoring_configuration(configuration: Configuration) -> Configuration:
  """How a Pushdown run is scored: its terminals in lin0 (it reads lin1 rows only to train)."""
  if configuration.reference != "pushdown":
    raise ValueError(f"{configuration.name} is not a Pushdown run")
  return dataclasses.replace(configuration, linearization="lin0")


class PushdownScorer(Scorer):
  """`Scorer` of a `PushdownLM` whose per-token log-probabilities marginalize attachments."""

  def __init__(self, model, tokenizer, configuration: Configuration, *, beam: int = BEAM,
               batch_size: int = 32, max_len: int | None = None,
               sentences_per_batch: int = SENTENCES_PER_BATCH):
    if configuration.linearization != "lin0":
      raise ValueError(f"PushdownScorer scores lin0 sequences; got configuration "
                       f"{configuration.name} in {configuration.linearization} (use "
                       "scoring_configuration)")
    if sentences_per_batch < 1:
      raise ValueError(f"PushdownScorer: sentences_per_batch must be ≥ 1, got "
                       f"{sentences_per_batch}")
    super().__init__(model, tokenizer, configuration, batch_size=batch_size, max_len=max_len)
    self.beam = int(beam)
    self.sentences_per_batch = int(sentences_per_batch)

  def logprobs(self, sequences: SequenceT[Sequence]) -> list[np.ndarray]:
    rows = [(*self._ids(sequence, index), np.asarray(sequence.sentence))
            for index, sequence in enumerate(sequences)]
    results = beam_score_many(self.model, rows, self.beam, self.sentences_per_batch)
    return [np.diff(result.prefix_log_probs) for result in results]


@functools.partial(jax.jit, static_argnums=(0,))
def _teacher_logprobs(graph, params, tokens_BT, kind_BT, segment_BT):
  """Per lin1 token t ≥ 1 [B, T-1] float32: log p of a terminal / EOS given the compact row
  before it and the silver tape of the row's trees; 0 for every other token."""
  model = nnx.merge(graph.graphdef, params)
  rows, terms_BC, meta, _, tape_BCC = terminal_inputs(tokens_BT, kind_BT, segment_BT)
  logits_BCV, _ = model.forward(terms_BC, meta, tape_BCC)
  logp_BCV = jax.nn.log_softmax(logits_BCV[:, :-1].astype(jnp.float32), axis=-1)
  picked_BC = jnp.take_along_axis(logp_BCV, terms_BC[:, 1:, None], axis=-1)[..., 0]
  B, T = tokens_BT.shape
  source_BC = rows.source[:, 1:]  # compact slot c + 1 holds lin1 token source (T: empty)
  out_BT = jnp.zeros((B, T), jnp.float32).at[
      jnp.arange(B)[:, None], source_BC].set(picked_BC, mode="drop")
  return out_BT[:, 1:]


class PushdownTeacherScorer(Scorer):
  """`Scorer` of a `PushdownLM` on lin1 sequences whose trees are given (module docstring)."""

  def __init__(self, model, tokenizer, configuration: Configuration, *, batch_size: int = 32,
               max_len: int | None = None):
    if configuration.reference != "pushdown" or configuration.linearization != "lin1":
      raise ValueError(f"PushdownTeacherScorer scores a Pushdown run's own lin1 sequences; got "
                       f"configuration {configuration.name} ({configuration.linearization})")
    super().__init__(model, tokenizer, configuration, batch_size=batch_size, max_len=max_len)

  def batch_logprobs(self, tokens_BT, kinds_BT, segment_BT) -> jax.Array:
    """[B, T-1]: log p of terminals and EOS under the supplied structure, 0 for structure tokens
    (`Scorer.logprobs` batches and buckets the sequences)."""
    return _teacher_logprobs(self.graphdef, self.params, jnp.asarray(tokens_BT),
                             jnp.asarray(kinds_BT), jnp.asarray(segment_BT))

  def target_mask(self, kinds_T: np.ndarray) -> np.ndarray:
    """SPEC §4 targets that the model scores: terminals and EOS (the structure is supplied)."""
    kinds = np.asarray(kinds_T)
    return super().target_mask(kinds) & np.isin(kinds, (TERMINAL_CODE, EOS_CODE))

  def terminal_sequence(self, sentences):
    raise NotImplementedError("PushdownTeacherScorer scores lin1 sequences with their trees; "
                              "terminal scoring (SG, BLiMP, doc-PPL) is PushdownScorer's")
