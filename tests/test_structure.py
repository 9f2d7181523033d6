"""Metadata, the mask predicate, dense masks and targets against the stack-walk oracle."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slm_jax.configurations import CONFIGURATIONS
from slm_jax.kinds import Kind
from slm_jax.linearize import linearize
from slm_jax.structure import (Attention, AttentionSpec, attends, dense_mask,
                               parse_attention, row_metadata, target_mask)
from slm_jax.trees import Tree
from tests import oracle
from tests.strategies import documents

SINGLE = ("causal", "tg", "tg_nomask", "tg_nomask_aug")
HYBRIDS = ("mix(tg_nomask,tg)", "mix(causal,tg)")
HUNGRY_CAT = Tree("S", (Tree("NP", ("the", "hungry", "cat")), Tree("VP", ("meows",))))
WILL_GO = Tree("S", (Tree("VP", ("will", Tree("VP", ("go",)))),))


def one_row(kinds):
  return row_metadata(np.asarray(kinds, np.int8), np.ones(len(kinds), np.int32))


def oracle_masks(kinds, attention):
  masks = oracle.stack_walk_mask([Kind(int(k)) for k in kinds], attention)
  return np.asarray(masks if isinstance(masks[0][0], list) else [masks], dtype=bool)


def test_hungry_cat_by_hand():
  seq = linearize(HUNGRY_CAT, "lin2")
  # <s> (S (NP the hungry cat NP) NP) (VP meows VP) VP) S) S) </s>
  meta = one_row(seq.kinds)
  assert meta.depth.tolist() == [0, 0, 1, 2, 2, 2, 1, 1, 1, 2, 1, 1, 0, 0, 0]
  assert meta.pop.tolist() == [15, 12, 6, 6, 6, 6, 12, 8, 10, 10, 12, 12, 15, 14, 15]
  mask = dense_mask(meta, parse_attention("tg"))[0]
  expected = {
      6: [2, 3, 4, 5, 6],  # NP) COMPOSE: (NP and its children, and itself
      7: [0, 1, 6, 7],  # NP) CNT2: the stack and itself
      8: [0, 1, 6, 8],  # (VP
      12: [1, 6, 10, 12],  # S) COMPOSE: (S, NP), VP) — never the CNT2 right before it
      13: [0, 12, 13],
      14: [0, 12, 14],  # </s> sees BOS and the sentence
  }
  for query, keys in expected.items():
    assert np.flatnonzero(mask[query]).tolist() == keys, query


def test_nested_same_label_closings():
  seq = linearize(WILL_GO, "lin2")
  # <s> (S (VP will (VP go VP) VP) VP) VP) S) S) </s>
  meta = one_row(seq.kinds)
  assert meta.pop.tolist() == [13, 10, 8, 8, 6, 6, 8, 8, 10, 10, 13, 12, 13]
  mask = dense_mask(meta, parse_attention("tg"))[0]
  assert np.flatnonzero(mask[6]).tolist() == [4, 5, 6]  # inner VP) composes (VP go
  assert np.flatnonzero(mask[8]).tolist() == [2, 3, 6, 8]  # outer VP) composes (VP will VP)
  assert np.array_equal(mask, oracle_masks(seq.kinds, "tg")[0])


def test_three_sentence_document_keeps_earlier_sentences_as_their_root():
  doc = [HUNGRY_CAT, WILL_GO, Tree("S", ("yes",))]
  seq = linearize(doc, "lin2")
  mask = dense_mask(one_row(seq.kinds), parse_attention("tg"))[0]
  symbols = seq.symbols()
  third_open = len(symbols) - 5  # (S yes S) S) </s>
  visible = [symbols[j] for j in np.flatnonzero(mask[third_open])]
  assert visible == ["<s>", "S)", "S)", "(S"]  # BOS, both earlier roots (CNT1), itself
  for attention in SINGLE:
    assert np.array_equal(dense_mask(one_row(seq.kinds), parse_attention(attention))[0],
                          oracle_masks(seq.kinds, attention)[0]), attention


@pytest.mark.parametrize("attention", SINGLE + HYBRIDS)
def test_packed_row_two_documents_plus_padding(attention):
  docs = [linearize([HUNGRY_CAT, WILL_GO], "lin2"), linearize(WILL_GO, "lin2")]
  pad_to = sum(len(d) for d in docs) + 5
  kinds = np.concatenate([d.kinds for d in docs] + [np.zeros(5, np.int8)])
  segment = np.concatenate([np.full(len(d), i + 1) for i, d in enumerate(docs)] + [np.zeros(5)])
  meta = row_metadata(kinds, segment.astype(np.int32))
  expected = oracle.packed_row_metadata([d.kinds.tolist() for d in docs], pad_to, attention)
  real = segment > 0
  for field in ("depth", "pop", "position"):
    assert getattr(meta, field)[real].tolist() == np.asarray(expected[field])[real].tolist()
  assert meta.pop[~real].tolist() == [pad_to] * 5
  mask = dense_mask(meta, parse_attention(attention))
  want = oracle.packed_row_mask([d.kinds.tolist() for d in docs], pad_to, attention)
  want = np.asarray(want if isinstance(want[0][0], list) else [want])
  assert np.array_equal(mask, want)
  pads = np.flatnonzero(~real)
  assert all(np.flatnonzero(mask[g, p]).tolist() == [p] for g in range(len(mask)) for p in pads)


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
def test_targets_match_oracle_for_every_configuration(name):
  config = CONFIGURATIONS[name]
  seq = linearize([HUNGRY_CAT, WILL_GO], config.linearization, seed=2)
  got = target_mask(seq.kinds, np.ones(len(seq), np.int32), config.linearization,
                    config.attention)
  attention = oracle.CONFIGS[name][1]
  assert got.tolist() == oracle.loop_targets(seq.kinds.tolist(), attention, config.linearization)
  if config.linearization == "lin2" and config.attention.tg_family:
    assert not got[seq.kinds == Kind.CNT2].any()
  assert got[seq.kinds == Kind.EOS].all()


def test_targets_first_token_of_a_continued_document_is_not_a_target():
  kinds = np.array([Kind.TERMINAL, Kind.TERMINAL, Kind.EOS, Kind.BOS, Kind.TERMINAL, Kind.PAD])
  segment = np.array([1, 1, 1, 2, 2, 0])
  assert target_mask(kinds, segment, "lin0", parse_attention("causal")).tolist() == [
      False, True, True, False, True, False]


def test_predicate_with_per_head_codes_equals_per_group_masks():
  seq = linearize([HUNGRY_CAT, WILL_GO], "lin2")
  meta = one_row(seq.kinds)
  codes = np.array([0, 1, 2, 3, 1])[:, None, None]
  per_head = attends(meta.query(), meta.key(), codes)
  for h, code in enumerate(codes[:, 0, 0]):
    single = dense_mask(meta, AttentionSpec((Attention(code),)))[0]
    assert np.array_equal(per_head[h], single)


def test_head_codes_of_hybrids():
  spec = parse_attention("mix(tg_nomask,tg)")
  assert spec.head_codes(4).tolist() == [2, 2, 1, 1]
  with pytest.raises(ValueError, match="divisible"):
    spec.head_codes(3)
  with pytest.raises(ValueError, match="unknown attention"):
    parse_attention("stack")


def test_metadata_and_mask_under_jit_equal_numpy():
  docs = [linearize([HUNGRY_CAT, WILL_GO], "lin2"), linearize(WILL_GO, "lin2")]
  kinds = np.concatenate([d.kinds for d in docs] + [np.zeros(3, np.int8)])
  segment = np.concatenate([np.full(len(docs[0]), 1), np.full(len(docs[1]), 2), np.zeros(3)])
  batch_kinds = np.stack([kinds, kinds[::-1].copy()])
  batch_segment = np.stack([segment, segment]).astype(np.int32)
  spec = parse_attention("mix(causal,tg)")

  @jax.jit
  def run(k, s):
    meta = row_metadata(k, s, xp=jnp)
    return meta, dense_mask(meta, spec, xp=jnp), target_mask(k, s, "lin2", spec, xp=jnp)

  meta_j, mask_j, target_j = run(batch_kinds, batch_segment)
  meta_n = row_metadata(batch_kinds, batch_segment)
  for a, b in zip(meta_j, meta_n):
    assert np.array_equal(np.asarray(a), b)
  assert np.array_equal(np.asarray(mask_j), dense_mask(meta_n, spec))
  assert np.array_equal(np.asarray(target_j), target_mask(batch_kinds, batch_segment, "lin2", spec))


@st.composite
def packed_rows(draw):
  """A row of 1-3 random documents in a random scheme, then padding."""
  scheme = draw(st.sampled_from(("lin0", "lin1", "lin2", "lin3", "lin1_noont", "lin1_merge",
                                 "lin1_shuf", "pause1")))
  docs = draw(st.lists(documents(max_sentences=3), min_size=1, max_size=3))
  seqs = [linearize(d, scheme, seed=draw(st.integers(0, 5))) for d in docs]
  pad = draw(st.integers(0, 4))
  kinds = np.concatenate([s.kinds for s in seqs] + [np.zeros(pad, np.int8)])
  segment = np.concatenate([np.full(len(s), i + 1) for i, s in enumerate(seqs)] +
                           [np.zeros(pad)]).astype(np.int32)
  return scheme, seqs, kinds, segment


@settings(max_examples=120, deadline=None)
@given(packed_rows())
def test_random_rows_against_oracle_and_invariants(row):
  scheme, seqs, kinds, segment = row
  meta = row_metadata(kinds, segment)
  pad_to = len(kinds)
  expected = oracle.packed_row_metadata([s.kinds.tolist() for s in seqs], pad_to)
  real = segment > 0
  assert meta.depth[real].tolist() == np.asarray(expected["depth"])[real].tolist()
  assert meta.pop[real].tolist() == np.asarray(expected["pop"])[real].tolist()
  attentions = SINGLE + HYBRIDS if scheme == "lin2" else ("causal",)
  for attention in attentions:
    mask = dense_mask(meta, parse_attention(attention))
    index = np.arange(pad_to)
    assert mask[:, index, index].all()  # every query attends itself
    assert not np.triu(mask, k=1).any()  # never the future
    assert not (mask & (segment[:, None] != segment[None, :])).any()  # never another document
    want = oracle.packed_row_mask([s.kinds.tolist() for s in seqs], pad_to, attention)
    assert np.array_equal(mask, np.asarray(want if isinstance(want[0][0], list) else [want]))


_TRACED_METADATA = jax.jit(lambda k, s: row_metadata(k, s, xp=jnp))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(("lin1", "lin2", "lin3", "lin1_noont", "lin1_merge",
                                           "pause2")), documents(max_sentences=2)),
                min_size=1, max_size=4),
       st.integers(0, 6), st.lists(st.sampled_from([int(k) for k in Kind if k != Kind.PAD]),
                                   max_size=5))
def test_host_route_equals_traced_route_on_packed_batches(docs, pad, noise):
  """The numpy route (`_row_metadata_numpy`) and the jit route agree on [3, 40] batches cut
  from a stream of documents (documents split across rows, padding, unbalanced noise)."""
  seqs = [linearize(d, scheme).kinds for scheme, d in docs] + [np.asarray(noise, np.int8)]
  kinds = np.concatenate(seqs + [np.zeros(pad, np.int8)])
  segment = np.concatenate([np.full(len(s), i + 1) for i, s in enumerate(seqs)] +
                           [np.zeros(pad)]).astype(np.int32)
  B, T = 3, 40
  kinds = np.resize(kinds, B * T).reshape(B, T)  # wraps around: rows start mid-document
  segment = np.resize(segment, B * T).reshape(B, T)
  host = row_metadata(kinds, segment)
  traced = _TRACED_METADATA(kinds, segment)
  for field, a, b in zip(host._fields, host, traced):
    np.testing.assert_array_equal(a, np.asarray(b), err_msg=field)
