"""slm_jax's own constituency parser (SPEC §12): a span-based tree-CRF chart parser in JAX/NNX.

  from slm_jax.parser import load_parser
  parser = load_parser()                      # the shipped GUM model (slm_jax/parser/data/gum)
  trees = parser.parse([["The", "cat", "sat", "."]])          # Viterbi, list[Tree]
  trees = parser.proposals(["The", "cat", "sat", "."], k=300, seed=0)   # distinct, best first

Modules: `labels` (label vocabulary with unary chains, binarize / debinarize), `crf` (inside,
Viterbi, exact sampling), `vocab` (words, characters, featurization), `model` (the NNX network),
`config` (frozen configs), `weights` (safetensors files), `api` (`Parser`, `load_parser`),
`evalb` (scoring + CLI), `baseline` (right-branching), `corpus` (PTB / GUM split), `train` and
`parse` (CLIs).
"""

from __future__ import annotations

import importlib

# Loaded on first use, so `python -m slm_jax.parser.evalb` does not import JAX.
_LAZY = {"Parser": "api", "Proposal": "api", "load_parser": "api", "ParserFileError": "weights"}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
  if name in _LAZY:
    return getattr(importlib.import_module(f"slm_jax.parser.{_LAZY[name]}"), name)
  raise AttributeError(f"module 'slm_jax.parser' has no attribute {name!r}")
