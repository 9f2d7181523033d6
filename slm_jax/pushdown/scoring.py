"""The evaluators' scorer for Pushdown runs: per-token log-probabilities marginalized by the beam.

SG, BLiMP and doc-PPL score a Pushdown run as a terminal model (`scoring_configuration`: its
sentences are written in lin0, every token after BOS is a target) through `PushdownScorer`, a
`Scorer` whose `logprobs` are the increments of the attachment beam's prefix log-probabilities
(`inference.beam_score`, SPEC §14: beam 300): token t gets log p̃(x≤t) − log p̃(x<t), so a
region's surprisal, a sentence's log-probability (their sum) and a document's follow the
evaluators' own terminal-model code. The sentences of a document are the sentences of its
sequence (`Sequence.sentence`): no word reduces with an earlier sentence.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence as SequenceT

import numpy as np

from slm_jax.configurations import Configuration
from slm_jax.eval.scorer import Scorer
from slm_jax.linearize import Sequence
from slm_jax.pushdown.inference import BEAM, beam_score


def scoring_configuration(configuration: Configuration) -> Configuration:
  """How a Pushdown run is scored: its terminals in lin0 (it reads lin1 rows only to train)."""
  if configuration.reference != "pushdown":
    raise ValueError(f"{configuration.name} is not a Pushdown run")
  return dataclasses.replace(configuration, linearization="lin0")


class PushdownScorer(Scorer):
  """`Scorer` of a `PushdownLM` whose per-token log-probabilities marginalize attachments."""

  def __init__(self, model, tokenizer, configuration: Configuration, *, beam: int = BEAM,
               batch_size: int = 32, max_len: int | None = None):
    if configuration.linearization != "lin0":
      raise ValueError(f"PushdownScorer scores lin0 sequences; got configuration "
                       f"{configuration.name} in {configuration.linearization} (use "
                       "scoring_configuration)")
    super().__init__(model, tokenizer, configuration, batch_size=batch_size, max_len=max_len)
    self.beam = int(beam)

  def logprobs(self, sequences: SequenceT[Sequence]) -> list[np.ndarray]:
    out = []
    for index, sequence in enumerate(sequences):
      tokens, kinds = self._ids(sequence, index)
      result = beam_score(self.model, tokens, kinds, np.asarray(sequence.sentence), self.beam)
      out.append(np.diff(result.prefix_log_probs))
    return out
