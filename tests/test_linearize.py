"""Linearizations: paper Table 1 token for token, inverses, determinism, and properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from slm_jax.kinds import Kind
from slm_jax.kinds import CLOSING_KINDS, STRUCTURAL_KINDS, is_closing, is_structural
from slm_jax.linearize import (INVERTIBLE_SCHEMES, SCHEME_TABLE, SCHEMES, LinearizationError,
                               base_sequence, delinearize, derive, document_key, get_scheme,
                               linearize)
from slm_jax.trees import Tree
from tests import oracle
from tests.strategies import documents

CATS = Tree("S", ("Cats", Tree("VP", ("chase", "mice"))))

TABLE_1 = {  # SPEC §2 / paper Table 1
    "lin0": "Cats chase mice",
    "lin1": "(S Cats (VP chase mice VP) S)",
    "lin2": "(S Cats (VP chase mice VP) VP) S) S)",
    "lin3": "(S Cats (VP chase mice VP) VP) VP) S) S) S)",
    "lin1_noont": "Cats chase mice VP) S)",
    "lin1_merge": "(S Cats (VP chase mice )",
    "pause1": "Cats <P> chase <P> mice <P>",
    "pause2": "Cats <P> <P> chase <P> <P> mice <P> <P>",
}
K = Kind
TABLE_1_KINDS = {
    "lin1": [K.ONT, K.TERMINAL, K.ONT, K.TERMINAL, K.TERMINAL, K.CNT, K.CNT],
    "lin2": [K.ONT, K.TERMINAL, K.ONT, K.TERMINAL, K.TERMINAL, K.CNT1, K.CNT2, K.CNT1, K.CNT2],
    "lin3": [K.ONT, K.TERMINAL, K.ONT, K.TERMINAL, K.TERMINAL, K.CNT, K.CNT2, K.CNT2, K.CNT,
             K.CNT2, K.CNT2],
    "pause1": [K.TERMINAL, K.PAUSE] * 3,
}


@pytest.mark.parametrize("scheme", sorted(TABLE_1))
def test_paper_table_1(scheme):
  sequence = linearize(CATS, scheme)
  assert sequence.symbols() == ["<s>"] + TABLE_1[scheme].split() + ["</s>"]
  assert sequence.kinds[0] == Kind.BOS and sequence.kinds[-1] == Kind.EOS
  if scheme in TABLE_1_KINDS:
    assert sequence.kinds[1:-1].tolist() == TABLE_1_KINDS[scheme]


def test_shuffle_keeps_words_and_nt_multiset_and_is_deterministic():
  a = linearize(CATS, "lin1_shuf", seed=3)
  assert a.symbols() == linearize(CATS, "lin1_shuf", seed=3).symbols()
  words = [s for s, k in zip(a.symbols(), a.kinds) if k == Kind.TERMINAL]
  assert words == ["Cats", "chase", "mice"]
  assert sorted(a.symbols()) == sorted(linearize(CATS, "lin1").symbols())
  seen = {" ".join(linearize(CATS, "lin1_shuf", seed=s).symbols()) for s in range(40)}
  assert len(seen) > 5  # the seed matters


def test_shuffle_moves_whole_words_and_stays_within_sentences():
  doc = [CATS, Tree("S", (Tree("NP", ("dogs",)), Tree("VP", ("bark",))))]
  base = base_sequence(doc)
  # Expand "chase" into two pieces: the pieces must stay adjacent after shuffling.
  repeats = np.ones(len(base), int)
  chase = base.symbols().index("chase")
  repeats[chase] = 2
  tokens = np.repeat(base.tokens, repeats)
  tokens[chase + 1] = "##se"
  pieces = base.expand(repeats, tokens)
  for seed in range(20):
    out = derive(pieces, "lin1_shuf", seed=seed, doc_key=document_key(base))
    symbols = out.symbols()
    assert symbols[symbols.index("chase") + 1] == "##se"
    assert out.sentence.tolist() == sorted(out.sentence.tolist())
    word_level = derive(base, "lin1_shuf", seed=seed)
    assert [s for s in symbols if s != "##se"] == word_level.symbols()


def test_pause_after_every_piece():
  base = base_sequence(CATS)
  repeats = np.where(np.asarray(base.symbols()) == "Cats", 2, 1)
  pieces = base.expand(repeats, np.repeat(base.tokens, repeats))
  out = derive(pieces, "pause1")
  assert out.symbols() == "<s> Cats <P> Cats <P> chase <P> mice <P> </s>".split()


def test_sentence_index_and_merge_across_sentences():
  doc = [CATS, CATS]
  seq = linearize(doc, "lin1_merge")
  assert seq.symbols() == ("<s> (S Cats (VP chase mice ) (S Cats (VP chase mice ) </s>").split()
  assert seq.sentence.tolist() == [0] * 7 + [1] * 7


def test_empty_document_is_an_error():
  with pytest.raises(ValueError, match="empty document"):
    base_sequence([])


def test_unknown_scheme():
  with pytest.raises(ValueError, match="unknown linearization"):
    linearize(CATS, "lin9")


@pytest.mark.parametrize("symbols, scheme, message", [
    ("<s> (S Cats (VP chase mice S) VP) </s>", "lin1", "does not match"),
    ("<s> (S Cats (VP chase mice VP) </s>", "lin1", "inside an open constituent"),
    ("<s> Cats </s>", "lin1", "outside any constituent"),
    ("<s> (S Cats (VP chase mice VP) S) S) </s>", "lin2", "CNT2"),
    ("<s> (S S) </s>", "lin1", "empty constituent"),
])
def test_delinearize_errors(symbols, scheme, message):
  sequence = linearize(CATS, scheme)
  tokens = symbols.split()
  kinds = []
  for t in tokens:
    if t == "<s>":
      kinds.append(Kind.BOS)
    elif t == "</s>":
      kinds.append(Kind.EOS)
    elif t.startswith("("):
      kinds.append(Kind.ONT)
    elif t.endswith(")"):
      kinds.append(Kind.CNT1 if scheme == "lin2" else Kind.CNT)
    else:
      kinds.append(Kind.TERMINAL)
  del sequence
  with pytest.raises(LinearizationError, match=message):
    delinearize(tokens, kinds, scheme)


@settings(max_examples=150, deadline=None)
@given(documents())
def test_terminal_projection_of_every_scheme_is_the_words(document):
  words = [w for tree in document for w in tree.leaves()]
  for scheme in SCHEMES:
    sequence = linearize(document, scheme, seed=1)
    projected = [s for s, k in zip(sequence.symbols(), sequence.kinds) if k == Kind.TERMINAL]
    assert projected == words, scheme


@settings(max_examples=150, deadline=None)
@given(documents())
def test_inverse_of_linearize_is_identity(document):
  for scheme in INVERTIBLE_SCHEMES:
    sequence = linearize(document, scheme)
    assert delinearize(sequence.symbols(), sequence.kinds, scheme) == list(document)


@settings(max_examples=150, deadline=None)
@given(documents())
def test_matches_the_loop_oracle(document):
  for scheme in oracle.SCHEMES:
    symbols, kinds = oracle.loop_linearize(document, scheme)
    sequence = linearize(document, scheme)
    assert sequence.symbols() == symbols, scheme
    assert sequence.kinds.tolist() == [int(k) for k in kinds], scheme


NESTED = [Tree("S", (Tree("NP", ("the", "cat")), Tree("VP", ("will", Tree("VP", ("go",)))))),
          Tree("S", ("Cats", Tree("VP", ("chase", "mice"))))]


@pytest.mark.parametrize("name", SCHEMES)
def test_scheme_table_agrees_with_the_derivations(name):
  """Every fact of the one scheme table is what `derive` actually produces."""
  facts = get_scheme(name)
  base = base_sequence(NESTED)
  out = derive(base, name, seed=1)
  kinds = out.kinds.tolist()
  assert facts.has_brackets == any(is_structural(k) for k in kinds)
  assert facts.opens == (Kind.ONT in kinds)
  closings = np.flatnonzero(is_closing(out.kinds))
  if facts.closing_expansion and name != "lin1_merge":  # merge: one `)` per run of closings
    copies = len(facts.closing_expansion)
    for start in closings:
      assert tuple(kinds[start:start + copies]) == facts.closing_expansion
  assert facts.invertible == (name in ("lin1", "lin2", "lin3"))
  if facts.invertible:
    assert delinearize(out.symbols(), out.kinds, name) == NESTED
  # Cutting the base to `tokenize_from` first changes nothing (so dropped tokens need no ids).
  cut = derive(base, facts.tokenize_from)
  assert derive(cut, name, seed=1, doc_key=document_key(base)).symbols() == out.symbols()
  assert get_scheme(facts.scored_as).has_brackets == facts.scored_with_structure
  assert facts.terminal_format in ("lin0", "pause1", "pause2")
  if facts.shuffled:
    assert derive(base, name, seed=2).symbols() != out.symbols()
  with pytest.raises(ValueError, match="unknown linearization 'lin9'"):
    get_scheme("lin9")


def test_kind_sets_are_defined_once():
  codes = np.arange(len(Kind))
  assert [Kind(c) for c in codes[is_closing(codes)]] == list(CLOSING_KINDS)
  assert [Kind(c) for c in codes[is_structural(codes)]] == list(STRUCTURAL_KINDS)
  assert INVERTIBLE_SCHEMES == tuple(s for s in SCHEME_TABLE if SCHEME_TABLE[s].invertible)
