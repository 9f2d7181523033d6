"""Silver Pushdown structure: the vectorized spans / attachments / tapes equal the loop oracle.

Hand-made trees (unary chains, flat n-ary nodes, several sentences per document, packed rows
holding two documents), the traced (jax.numpy) path against numpy, and every GUM tree and
document (../shared/data; skipped when absent).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.kinds import Kind
from slm_jax.linearize import base_sequence
from slm_jax.pushdown.stack import oracle_document
from slm_jax.pushdown.structure import pushdown_rows, reduce_options, stack_tape
from tests.shared_data import require_shared

HAND_MADE = [
    "(S Cats (VP chase mice))",
    "(S (NP the cat) (VP sat (PP on (NP the mat))) .)",
    "(S (NP (NP (NP a))) (VP b c d e))",  # unary chain, flat 4-ary VP
    "(X Understand)",  # a one-word sentence
    "(S (S a b) (CC and) (S c (VP d e)) .)",
    "(NP (NP a b) (PP c (NP d (SBAR e (S f g)))))",
]


def _check(trees):
  base = base_sequence(trees)
  rows = pushdown_rows(base.kinds, np.ones(len(base), np.int32))
  n = int((rows.kind != Kind.PAD).sum())
  attach, tape = oracle_document(trees)
  assert rows.attach[:n].tolist() == attach.tolist(), [str(t) for t in trees]
  got = stack_tape(rows.span_start[:n], rows.span_end[:n])
  assert np.array_equal(got, tape), [str(t) for t in trees]
  words = n - 2
  assert int((rows.span_end[:n] < len(base)).sum()) == words - len(trees)  # L − 1 per sentence
  return rows, n, tape


@pytest.mark.parametrize("text", HAND_MADE)
def test_hand_made_trees_equal_the_oracle(text):
  _check(ptb.parse_trees(text))


def test_running_example():
  """(S Cats (VP chase mice)) → (Cats (chase mice)): mice reduces twice, attaching to Cats."""
  rows, n, tape = _check(ptb.parse_trees("(S Cats (VP chase mice))"))
  assert rows.attach[:n].tolist() == [0, 1, 2, 1, 4]
  assert tape[3].tolist() == [0, 1, 2, 2, 0]
  assert rows.kind[:n].tolist() == [Kind.BOS, Kind.TERMINAL, Kind.TERMINAL, Kind.TERMINAL,
                                    Kind.EOS]


def test_documents_of_several_sentences_and_packed_rows():
  trees = ptb.parse_trees(" ".join(HAND_MADE))
  _check(trees)
  # Two documents in one padded row: the second's indices are offset, nothing crosses over.
  one, two = base_sequence(trees[:2]), base_sequence(trees[2:4])
  kinds = np.concatenate([one.kinds, two.kinds, np.zeros(5, np.int8)])
  segment = np.concatenate([np.full(len(one), 1), np.full(len(two), 2), np.zeros(5)])
  rows = pushdown_rows(kinds, segment.astype(np.int32))
  a1, _ = oracle_document(trees[:2])
  a2, _ = oracle_document(trees[2:4])
  n1, n2 = len(a1), len(a2)
  assert rows.attach[:n1 + n2].tolist() == a1.tolist() + (a2 + n1).tolist()
  assert rows.segment[:n1 + n2 + 1].tolist() == [1] * n1 + [2] * n2 + [0]
  assert (rows.source[n1 + n2:] == len(kinds)).all()


def test_traced_path_equals_numpy():
  trees = ptb.parse_trees(" ".join(HAND_MADE))
  base = base_sequence(trees)
  kinds = np.stack([base.kinds, np.concatenate([base.kinds[:9], np.zeros(len(base) - 9, np.int8)])])
  segment = (kinds != 0).astype(np.int32)
  want = pushdown_rows(kinds, segment)
  got = jax.jit(lambda k, s: pushdown_rows(k, s, jnp))(kinds, segment)
  for name, a, b in zip(want._fields, want, got):
    assert np.array_equal(a, np.asarray(b)), name
  tape = jax.jit(lambda a, b: stack_tape(a, b, jnp))(got.span_start, got.span_end)
  assert np.array_equal(np.asarray(tape), stack_tape(want.span_start, want.span_end))
  options = jax.jit(lambda r: reduce_options(r, jnp))(got)
  assert np.array_equal(np.asarray(options), reduce_options(want))


@functools.lru_cache(maxsize=None)
def _gum():
  return tuple(tuple(trees) for _, trees in ptb.read_folder(require_shared("gum") / "const",
                                                            ("*.ptb",)))


@pytest.mark.slow
def test_every_gum_tree_and_document_equals_the_oracle():
  documents = _gum()
  trees = [tree for document in documents for tree in document]
  assert len(trees) == 14597
  for tree in trees:
    _check([tree])
  for document in documents:
    _check(list(document))
