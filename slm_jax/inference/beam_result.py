"""What a word-synchronous beam search returns (`beam`, `beam_batch`):
the per-sentence `BeamResult` and the completed hypotheses it lists (`Completed`). Its own module
so the one-sentence and the batched searches both build it without importing each other."""

from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass
class Completed:
  """A hypothesis closed and ended by EOS: its tokens after BOS up to but excluding EOS."""
  ids: np.ndarray  # [T] int64 token ids (a word is all its pieces, consecutive)
  kinds: np.ndarray  # [T] int8 `Kind`s (lin2/lin3 closings: CNT1/CNT then CNT2 copies)
  symbols: list[str]  # [T] `Tokenizer.decode(ids)`: one string per token (word pieces unjoined)
  logprob: float  # joint log p(words, structure, EOS): the summand of `sentence_logprob`
  terminal_logprob: float = math.nan  # Σ log p over its terminals and EOS only


@dataclasses.dataclass
class BeamResult:
  words: list[str]
  prefix_logprobs: np.ndarray  # [L] log p̃(x≤w), w = 1..L (−inf once the beam is empty)
  sentence_logprob: float  # logsumexp over hypotheses closed and ended by EOS (nan: not asked)
  terminal_prefix_logprobs: np.ndarray  # [L] max over B_w of terminal-only log-probs
  sentence_terminal_logprob: float  # max over completed hypotheses of terminal + EOS log-probs
  best: list[list[str]]  # per word: the best hypothesis' symbols after BOS
  best_complete: list[str] | None  # the best completed hypothesis (with EOS), if any
  beam_sizes: np.ndarray  # [L] hypotheses kept after each word
  cap: int  # the length cap used
  steps: int  # batched decoder steps
  expansions: int  # hypotheses created (candidates kept and fed)
  pruned: int = 0  # valid hypotheses dropped (sub-beam, word beam, or left in the frontier)
  complete: list[Completed] = dataclasses.field(default_factory=list)  # best first (complete=True)
