"""Syntactic evaluation: teacher-forced scoring, KV-cache decoding, word-synchronous beam search,
SyntaxGym (paper §5.2, App. B; SPEC §9).

- `scorer.Scorer`: per-token log-probabilities and target sums of linearized sequences; terminal
  scoring of word sentences (terminal, pause and Tree-Shuffle models).
- `incremental.IncrementalDecoder`: KV cache + incremental TG metadata for N hypotheses.
- `grammaticality.Grammar`: which structural tokens may come next, per linearization.
- `beam.word_synchronous_beam`: prefix probabilities p̃(x≤w) and sentence probabilities of tree
  models; its completed hypotheses are `proposals.BeamProposals`.
- `syntaxgym.evaluate_syntaxgym`: suites, regions, formulas, per-suite verdicts (the first
  prediction decides an item); `sg_aggregate`: suite sets (hu31, paper32), circuits pooled over
  items, the headline SG, Hu et al.'s released results.
- `blimp`, `docppl`, `proposals`, `bootstrap` (paired, and macro averages over tasks), `report`
  (the paper's table layouts), `live` (syntactic metrics during training).
"""

from slm_jax.eval.beam import BeamResult, BeamSearcher, Completed, word_synchronous_beam
from slm_jax.eval.grammaticality import Grammar, GrammarState
from slm_jax.eval.incremental import IncrementalDecoder
from slm_jax.eval.proposals import BeamProposals, FileProposals, ProposalSource
from slm_jax.eval.recompute import RecomputeDecoder
from slm_jax.eval.scorer import Scorer, logsumexp
from slm_jax.eval.syntaxgym import (evaluate_syntaxgym, load_suite, parse_formula,
                                    prefix_logprob_fn, tokenize_region)

__all__ = [
    "BeamResult", "BeamSearcher", "Completed", "word_synchronous_beam", "BeamProposals",
    "FileProposals", "ProposalSource", "Grammar", "GrammarState",
    "IncrementalDecoder", "RecomputeDecoder", "Scorer", "logsumexp",
    "evaluate_syntaxgym", "load_suite", "parse_formula", "prefix_logprob_fn", "tokenize_region",
]
