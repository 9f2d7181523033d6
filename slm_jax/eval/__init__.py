"""Syntactic evaluation (paper §5.2, App. B; SPEC §9): SyntaxGym, BLiMP, doc-PPL and their
proposals, statistics and reports. The models are run by the inference engine (`slm_jax.inference`:
teacher-forced scoring, KV-cache decoding, word-synchronous beam search).

- `syntaxgym.evaluate_syntaxgym`: suites, regions, formulas, per-suite verdicts (the first
  prediction decides an item); `sg_aggregate`: suite sets (hu31, paper32), circuits pooled over
  items, the headline SG, Hu et al.'s released results; `sg_partial`: finished suites and
  paradigms kept so a killed evaluation resumes.
- `proposals`: parse proposals for tree-model marginalization (`FileProposals`, the beam's
  completed hypotheses as `BeamProposals`; `grammar_posterior`, `parser_proposals`).
- `blimp`, `docppl`, `raw_text` / `raw_docppl` (pretrained checkpoints on raw text), `tfds_sets`,
  `bootstrap` (paired, and macro averages over tasks), `report` (the paper's table layouts),
  `live` (syntactic metrics during training).
"""

from slm_jax.eval.proposals import BeamProposals, FileProposals, ProposalSource
from slm_jax.eval.syntaxgym import (evaluate_syntaxgym, load_suite, parse_formula,
                                    prefix_logprob_fn, tokenize_region)

__all__ = [
    "BeamProposals", "FileProposals", "ProposalSource",
    "evaluate_syntaxgym", "load_suite", "parse_formula", "prefix_logprob_fn", "tokenize_region",
]
