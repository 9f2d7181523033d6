"""The paper format's query beyond its text (SPEC §11): what the paper code's tokens are made of.

qlwpc/TG-Interpolation `olmo/eval/downstream.py` @ cd50d9ef builds each option's query in
`ICLMultiChoiceTaskDataset.prep_examples` (WinoGrande: its own `prep_examples`) from
`token_encode(ctx)` and `token_encode(continuation)`, and scores it with `ICLMetric.update`.
Three facts of that code hold in every format of `--mc_format=paper`:

- No BOS. `token_encode` is `encode_TG_string`, i.e. `tokenizer.encode(s,
  add_special_tokens=False)` (`olmo/data/util.py`), and the query is `ctx + continuation`; only the
  Pushdown branch prepends `vocab.bos` itself. `TextEncoder(paper=True)` starts the query with the
  context's first token.
- The tree family's closings, converted twice (`code_closings`). The parsed lines encode to the
  tree format (one closing per constituent). `token_encode` runs `convert_grammar_input` on each
  string (the context, each continuation) and `prep_examples` runs it again on the query and the
  continuation. For `tree` it is `convert_TGnpy_to_tree`, which reads every closing followed by
  the same id as a TG closing pair and keeps one (`olmo/data/tgmasking/mask.cpp`,
  `convert_TGnpy_to_tree_impl`, read at b9d3c0e7: the only version the index holds): on tree
  input it merges adjacent closings of the same label pairwise, a run of k becoming ⌈k/2⌉, and
  ⌈⌈k/2⌉/2⌉ after the second pass. `tree_noont` and `tree_triplecnt` run the same step before
  their own (drop the openings; write every closing three times, the comment's "3 copies
  instead of 1" and `datatools/parse_pretrain_data/make_tree_variant.py`'s training rule), so
  NoONT reads ⌈⌈k/2⌉/2⌉ closings and TripleCNT 3·⌈3·⌈k/2⌉/2⌉ (a lone closing: 6 copies; the
  code's own comment on its overflow truncation notes that the second conversion inflates
  TripleCNT queries). `tree_compress` writes each run as one `<X)>`, which neither pass changes.
  `tgtree` is converted once (a no-op there); the TG attention family and the terminal and pause
  formats have no such step. Training data never went through it (`make_tree_variant` works on
  the plain tree stream), so the tree models were scored on closings they were not trained on;
  the paper format reproduces that. A run is counted within one string of the code (a context or
  a continuation): the code's second pass over the whole query could also merge a run that the
  OpenBookQA cut splits, and then scores logits one position off; that is not reproduced.
- S_full's divisor counts the structure (`full_divisor`). `cont_str_len = len(continuation_str)
  - 1` with `continuation_str = token_decode(continuation)` of the converted continuation
  (`skip_special_tokens=False`), so the closings and openings are written out as the code's
  tokenizer spells them (`<(NP>`, `<NP)>`, `<X)>` for Compress; no spaces around them) and
  every copy counts; `ICLMetric.update` divides the full sum by it (`len_norm`). The terminal
  score divides by the same string of the terminal tokens only (`cont_str_len_term`), the
  prompt's own divisor. Pause tokens are inserted after `cont_str_len` is taken: not counted.
"""

from __future__ import annotations

import numpy as np

from slm_jax.kinds import CNT1_CODE, CNT2_CODE, CNT_CODE, MERGED_CLOSE_SYMBOL
from slm_jax.linearize import Sequence


def _halve(n):
  """`convert_TGnpy_to_tree` on a run of n equal closing ids: ⌈n/2⌉ (vectorized)."""
  return -(-n // 2)


def _halve_triple(n):
  """`tree_triplecnt`'s pass: halve, then write every closing three times."""
  return 3 * _halve(n)


# scheme → (tokens per closing in its linearization, one `convert_grammar_input` pass on the
# length n of a run of one closing id); schemes absent here are left as they are.
CODE_PASSES = {"lin1": (1, _halve), "lin1_noont": (1, _halve), "lin3": (3, _halve_triple)}
CLOSING_KINDS = (CNT_CODE, CNT1_CODE, CNT2_CODE)
COMPRESS_CLOSING = "<X)>"  # the code's label-less merged closing token


def code_closing_count(k: np.ndarray, scheme: str) -> np.ndarray:
  """How many closing tokens the code's query holds for a run of `k` adjacent closings of one
  label (k constituents) in `scheme` (module docstring): both passes of its conversion."""
  copies, one_pass = CODE_PASSES.get(scheme, (1, None))
  k = np.asarray(k)
  if one_pass is None:
    return k * copies
  return one_pass(one_pass(k))


def code_closings(sequence: Sequence, component_T: np.ndarray, scheme: str
                  ) -> tuple[Sequence, np.ndarray]:
  """`sequence` with each run of one closing id (within one component) cut or repeated to the
  code's count (`code_closing_count`); its components alongside. Copies added after a run repeat
  its last token (a CNT2 in lin3)."""
  if scheme not in CODE_PASSES or not len(sequence):
    return sequence, component_T
  copies = CODE_PASSES[scheme][0]
  tokens_T, kinds_T = sequence.tokens, sequence.kinds
  closing_T = np.isin(kinds_T, CLOSING_KINDS)
  continues_T = np.zeros(len(kinds_T), bool)
  continues_T[1:] = (closing_T[1:] & closing_T[:-1] & (tokens_T[1:] == tokens_T[:-1])
                     & (component_T[1:] == component_T[:-1]))
  starts = np.flatnonzero(~continues_T)
  run_T = np.cumsum(~continues_T) - 1
  length_R = np.diff(np.append(starts, len(kinds_T)))
  want_R = np.where(closing_T[starts], code_closing_count(length_R // copies, scheme), length_R)
  rank_T = np.arange(len(kinds_T)) - starts[run_T]
  keep_R = np.minimum(want_R, length_R)
  repeats_T = (rank_T < keep_R[run_T]).astype(np.int64)
  last_T = rank_T == keep_R[run_T] - 1
  repeats_T[last_T] += (want_R - keep_R)[run_T[last_T]]
  index = np.repeat(np.arange(len(kinds_T)), repeats_T)
  return sequence.take(index), component_T[index]


def structure_chars(tokens_T: np.ndarray, tokenizer) -> int:
  """Characters the code's tokenizer writes for the structure tokens among `tokens_T`
  (`<(L>`, `<L)>`: the symbol plus its angle brackets; Compress's merged closing `<X)>`)."""
  tokens_T = np.asarray(tokens_T)
  symbols = tokenizer.decode(tokens_T[tokenizer.is_structural(tokens_T)])
  return sum(len(COMPRESS_CLOSING) if s == MERGED_CLOSE_SYMBOL else len(s) + 2 for s in symbols)


def full_divisor(terminal_divisor: int, tokens_T: np.ndarray, tokenizer) -> int:
  """S_full's divisor: the code's `cont_str_len` of a continuation whose plain words give
  `terminal_divisor` and whose tokens (the code's continuation, HellaSwag's head included) are
  `tokens_T`."""
  return terminal_divisor + structure_chars(tokens_T, tokenizer)


__all__ = ["CODE_PASSES", "code_closing_count", "code_closings", "full_divisor",
           "structure_chars"]
