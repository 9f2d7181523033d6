"""The inference engine: a trained decoder run on sequences and searched over (paper App. B.2;
SPEC §9), used by the evaluators (`slm_jax.eval`), downstream tasks and GTCA.

- `scorer.Scorer`: per-token log-probabilities and target sums of linearized sequences; terminal
  scoring of word sentences (terminal, pause and Tree-Shuffle models); `BatchScorer`, the one
  batching loop of every teacher-forced scorer. `text_scorer.TextScorer`: plain token sequences
  (`python -m slm_jax.score`).
- `incremental.IncrementalDecoder`: KV cache + incremental TG metadata for N hypotheses;
  `recompute.RecomputeDecoder`: the same interface without a cache (the baselines).
- `grammaticality.Grammar`: which structural tokens may come next, per linearization.
- `beam.word_synchronous_beam` / `BeamSearcher`: prefix probabilities p̃(x≤w) and sentence
  probabilities of tree models; `beam_batch` (many sentences in one decoder), `beam_loop` (the
  word loop compiled on the device), `beam_feed` (feeding chosen expansions), `beam_result`
  (what a search returns).
"""

from slm_jax.inference.beam import BeamResult, BeamSearcher, Completed, word_synchronous_beam
from slm_jax.inference.grammaticality import Grammar, GrammarState
from slm_jax.inference.incremental import IncrementalDecoder
from slm_jax.inference.recompute import RecomputeDecoder
from slm_jax.inference.scorer import Scorer, logsumexp

__all__ = [
    "BeamResult", "BeamSearcher", "Completed", "word_synchronous_beam", "Grammar", "GrammarState",
    "IncrementalDecoder", "RecomputeDecoder", "Scorer", "logsumexp",
]
