"""The per-token Pushdown `Stack`: it replays the silver attachments (tapes, options, spans) and
names bad pushes."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.kinds import Kind
from slm_jax.linearize import base_sequence
from slm_jax.pushdown.stack import Stack
from slm_jax.pushdown.structure import pushdown_rows, reduce_options, stack_tape
from tests.test_pushdown_structure import HAND_MADE


def test_stack_replays_the_silver_attachments_and_options():
  trees = ptb.parse_trees(" ".join(HAND_MADE[:3]))
  base = base_sequence(trees)
  rows = pushdown_rows(base.kinds, np.ones(len(base), np.int32))
  n = int((rows.kind != Kind.PAD).sum())
  tape = stack_tape(rows.span_start[:n], rows.span_end[:n])
  options = reduce_options(rows)
  stack = Stack(n)
  for e in range(n):
    if e and rows.sentence[e] != rows.sentence[e - 1] and rows.kind[e] == Kind.TERMINAL:
      stack.start_sentence()
    if e and rows.kind[e] == Kind.TERMINAL:  # token e's options, seen from query e − 1
      assert sorted(stack.options()) == np.flatnonzero(options[e - 1]).tolist()
    stack.push(e, int(rows.attach[e]))
    assert stack.depth.tolist() == tape[e].tolist()
  np.testing.assert_array_equal(stack.span_end, np.minimum(rows.span_end[:n], n))


def test_bad_pushes_name_the_token():
  stack = Stack(4)
  stack.push(0, 0)
  with pytest.raises(ValueError, match="token 2: pushed out of order"):
    stack.push(2, 2)
  stack.start_sentence()
  stack.push(1, 1)
  with pytest.raises(ValueError, match=r"token 2: attachment 0 is not an element"):
    stack.push(2, 0)  # BOS is never an option
