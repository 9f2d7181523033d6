"""Token kinds and the structural vocabulary every part of slm_jax agrees on (SPEC §1–§2).

A linearized sequence is a pair of parallel arrays: the token (a symbol string or a vocabulary id)
and its `Kind`. Everything downstream (metadata, masks, targets, packing, the model's loss split)
reads only the kind, never the token id, so nested closings with the same label are never confused
(SPEC §3: the paper's repository detected the first closing copy by comparing ids).
"""

from __future__ import annotations

import enum


class Kind(enum.IntEnum):
  """Kind of one linearized token. Values are stable: they are stored in prepared data."""

  PAD = 0
  BOS = 1
  EOS = 2
  TERMINAL = 3
  ONT = 4  # opening nonterminal, e.g. "(S"
  CNT = 5  # closing nonterminal (lin1, lin1_noont, lin1_merge, lin1_shuf; first copy in lin3)
  CNT1 = 6  # first copy of a closing in lin2: performs COMPOSE under TG masks
  CNT2 = 7  # second copy (lin2; 2nd and 3rd in lin3) of a closing: never pushed on the TG stack
  PAUSE = 8


NUM_KINDS = len(Kind)
# The same codes as plain ints, for hot numpy / traced code and kernels: numpy converts an IntEnum
# operand on every call (microseconds), and kernels need Python ints.
(PAD_CODE, BOS_CODE, EOS_CODE, TERMINAL_CODE, ONT_CODE, CNT_CODE, CNT1_CODE, CNT2_CODE,
 PAUSE_CODE) = (int(k) for k in Kind)

# Kinds that are structure (nonterminal) tokens: the loss's "structural" group, the reserved
# label tokens of the tokenizer.
STRUCTURAL_KINDS = (Kind.ONT, Kind.CNT, Kind.CNT1, Kind.CNT2)
# Kinds that close the innermost open constituent (pop the stack in metadata terms); CNT2 is a copy
# that closes nothing. (Not to be confused with a scheme's `closing_expansion`, the kinds of the
# tokens one closing becomes: `linearize.get_scheme(name).closing_expansion`.)
CLOSING_KINDS = (Kind.CNT, Kind.CNT1)


def is_closing(kind):
  """Elementwise `kind ∈ CLOSING_KINDS` (numpy, traced jax arrays or ints)."""
  return (kind == CNT_CODE) | (kind == CNT1_CODE)


def is_structural(kind):
  """Elementwise `kind ∈ STRUCTURAL_KINDS` (ONT, CNT, CNT1, CNT2 are the codes 4..7)."""
  return (kind >= ONT_CODE) & (kind <= CNT2_CODE)

# The 26 PTB phrase labels (SPEC §1). Order is fixed: reserved token ids follow it.
PTB_LABELS = (
    "ADJP", "ADVP", "CONJP", "FRAG", "INTJ", "LST", "NAC", "NP", "NX", "PP", "PRN", "PRT", "QP",
    "RRC", "S", "SBAR", "SBARQ", "SINV", "SQ", "UCP", "VP", "WHADJP", "WHADVP", "WHNP", "WHPP", "X",
)
UNKNOWN_LABEL = "X"

# Surface symbols of the non-word tokens (what `explain` prints and the tokenizer reserves).
BOS_SYMBOL = "<s>"
EOS_SYMBOL = "</s>"
PAD_SYMBOL = "<pad>"
PAUSE_SYMBOL = "<P>"
MERGED_CLOSE_SYMBOL = ")"


def ont_symbol(label: str) -> str:
  return "(" + label


def cnt_symbol(label: str) -> str:
  return label + ")"
