"""Hand-checks of the test oracle (tests/oracle.py) against values derived by hand from SPEC §2–§5."""

from __future__ import annotations

import pytest

from slm_jax.kinds import Kind
from slm_jax.trees import Tree
from tests import oracle

B, E, W, O, C, C1, C2, P, PAD = (Kind.BOS, Kind.EOS, Kind.TERMINAL, Kind.ONT, Kind.CNT, Kind.CNT1,
                                 Kind.CNT2, Kind.PAUSE, Kind.PAD)

CATS = Tree("S", ("Cats", Tree("VP", ("chase", "mice"))))
HUNGRY = Tree("S", (Tree("NP", ("the", "hungry", "cat")), Tree("VP", ("meows",))))
NESTED = Tree("S", (Tree("VP", ("will", Tree("VP", ("go",)))),))


# ---------------------------------------------------------------------------------------------
# Linearization: SPEC §2 Table 1, token for token
# ---------------------------------------------------------------------------------------------

TABLE1 = {
    "lin0": ("Cats chase mice", [W, W, W]),
    "lin1": ("(S Cats (VP chase mice VP) S)", [O, W, O, W, W, C, C]),
    "lin2": ("(S Cats (VP chase mice VP) VP) S) S)", [O, W, O, W, W, C1, C2, C1, C2]),
    "lin3": ("(S Cats (VP chase mice VP) VP) VP) S) S) S)",
             [O, W, O, W, W, C, C2, C2, C, C2, C2]),
    "lin1_noont": ("Cats chase mice VP) S)", [W, W, W, C, C]),
    "lin1_merge": ("(S Cats (VP chase mice )", [O, W, O, W, W, C]),
    "pause1": ("Cats <P> chase <P> mice <P>", [W, P, W, P, W, P]),
    "pause2": ("Cats <P> <P> chase <P> <P> mice <P> <P>", [W, P, P, W, P, P, W, P, P]),
}


@pytest.mark.parametrize("scheme", sorted(TABLE1))
def test_table1(scheme):
  symbols, kinds = oracle.loop_linearize([CATS], scheme)
  assert symbols[0] == "<s>" and kinds[0] == B
  assert symbols[-1] == "</s>" and kinds[-1] == E
  want_symbols, want_kinds = TABLE1[scheme]
  assert " ".join(symbols[1:-1]) == want_symbols
  assert kinds[1:-1] == want_kinds


def test_merge_runs_and_multi_sentence_document():
  # (S (NP a b) (VP c (PP d))) then (S e): closings "PP) VP) S)" merge into one ")".
  t1 = Tree("S", (Tree("NP", ("a", "b")), Tree("VP", ("c", Tree("PP", ("d",))))))
  t2 = Tree("S", ("e",))
  symbols, kinds = oracle.loop_linearize([t1, t2], "lin1_merge")
  assert " ".join(symbols) == "<s> (S (NP a b ) (VP c (PP d ) (S e ) </s>"
  assert kinds == [B, O, O, W, W, C, O, W, O, W, C, O, W, C, E]
  symbols, _ = oracle.loop_linearize([t1, t2], "lin0")
  assert " ".join(symbols) == "<s> a b c d e </s>"


def test_shuffle_is_not_implemented():
  with pytest.raises(ValueError):
    oracle.loop_linearize([CATS], "lin1_shuf")


# ---------------------------------------------------------------------------------------------
# Metadata and tg masks, derived by hand
# ---------------------------------------------------------------------------------------------

def test_hungry_cat_lin2():
  symbols, kinds = oracle.loop_linearize([HUNGRY], "lin2")
  assert " ".join(symbols) == (
      "<s> (S (NP the hungry cat NP) NP) (VP meows VP) VP) S) S) </s>")
  #        0  1   2   3   4      5   6    7    8    9     10   11   12  13  14
  assert kinds == [B, O, O, W, W, W, C1, C2, O, W, C1, C2, C1, C2, E]
  depth, pop = oracle.stack_walk_metadata(kinds)
  assert depth == [0, 0, 1, 2, 2, 2, 1, 1, 1, 2, 1, 1, 0, 0, 0]
  assert pop == [15, 12, 6, 6, 6, 6, 12, 8, 10, 10, 12, 12, 15, 14, 15]
  assert oracle.stack_walk_attends(kinds, "tg") == [
      [0],  # <s>
      [0, 1],  # (S
      [0, 1, 2],  # (NP
      [0, 1, 2, 3],  # the
      [0, 1, 2, 3, 4],  # hungry
      [0, 1, 2, 3, 4, 5],  # cat
      [2, 3, 4, 5, 6],  # NP) CNT1: (NP the hungry cat + itself
      [0, 1, 6, 7],  # NP) CNT2: <s> (S NP) + itself
      [0, 1, 6, 8],  # (VP
      [0, 1, 6, 8, 9],  # meows
      [8, 9, 10],  # VP) CNT1
      [0, 1, 6, 10, 11],  # VP) CNT2
      [1, 6, 10, 12],  # S) CNT1: (S NP) VP) + itself
      [0, 12, 13],  # S) CNT2
      [0, 12, 14],  # </s>
  ]
  # tg_nomask: non-compose queries see every earlier key except CNT2 keys (7, 11, 13), and
  # themselves; compose queries (6, 10, 12) as tg.
  nomask = oracle.stack_walk_attends(kinds, "tg_nomask")
  assert nomask[7] == [0, 1, 2, 3, 4, 5, 6, 7]
  assert nomask[8] == [0, 1, 2, 3, 4, 5, 6, 8]
  assert nomask[11] == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
  assert nomask[14] == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 14]
  assert nomask[6] == [2, 3, 4, 5, 6]
  assert nomask[10] == [8, 9, 10]
  assert nomask[12] == [1, 6, 10, 12]
  aug = oracle.stack_walk_attends(kinds, "tg_nomask_aug")
  for i in range(15):
    if i not in (6, 10, 12):
      assert aug[i] == list(range(i + 1))
  assert [aug[6], aug[10], aug[12]] == [[2, 3, 4, 5, 6], [8, 9, 10], [1, 6, 10, 12]]
  causal = oracle.stack_walk_attends(kinds, "causal")
  assert causal == [list(range(i + 1)) for i in range(15)]


def test_nested_same_label_closings():
  symbols, kinds = oracle.loop_linearize([NESTED], "lin2")
  assert " ".join(symbols) == "<s> (S (VP will (VP go VP) VP) VP) VP) S) S) </s>"
  #                              0  1  2   3    4   5  6   7   8   9   10 11 12
  assert kinds == [B, O, O, W, O, W, C1, C2, C1, C2, C1, C2, E]
  depth, pop = oracle.stack_walk_metadata(kinds)
  assert depth == [0, 0, 1, 2, 2, 3, 2, 2, 1, 1, 0, 0, 0]
  assert pop == [13, 10, 8, 8, 6, 6, 8, 8, 10, 10, 13, 12, 13]
  assert oracle.stack_walk_attends(kinds, "tg") == [
      [0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5],
      [4, 5, 6],  # inner VP) CNT1
      [0, 1, 2, 3, 6, 7],  # inner VP) CNT2 (same id as the next token, which is a CNT1)
      [2, 3, 6, 8],  # outer VP) CNT1: (VP will VP) + itself
      [0, 1, 8, 9],
      [1, 8, 10],  # S) CNT1
      [0, 10, 11],
      [0, 10, 12],
  ]


def test_two_sentences_first_stays_visible_as_root_cnt1():
  doc = [Tree("S", ("a",)), Tree("S", ("b",))]
  symbols, kinds = oracle.loop_linearize(doc, "lin2")
  assert " ".join(symbols) == "<s> (S a S) S) (S b S) S) </s>"
  assert kinds == [B, O, W, C1, C2, O, W, C1, C2, E]
  depth, pop = oracle.stack_walk_metadata(kinds)
  assert depth == [0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
  assert pop == [10, 3, 3, 10, 5, 7, 7, 10, 9, 10]
  assert oracle.stack_walk_attends(kinds, "tg") == [
      [0], [0, 1], [0, 1, 2], [1, 2, 3], [0, 3, 4],
      [0, 3, 5], [0, 3, 5, 6],  # the second sentence sees the first as its root CNT1 (3)
      [5, 6, 7], [0, 3, 7, 8], [0, 3, 7, 9],
  ]


def test_metadata_lin1_lin3():
  _, kinds = oracle.loop_linearize([CATS], "lin1")
  # <s> (S Cats (VP chase mice VP) S) </s>
  depth, pop = oracle.stack_walk_metadata(kinds)
  assert depth == [0, 0, 1, 1, 2, 2, 1, 0, 0]
  assert pop == [9, 7, 7, 6, 6, 6, 7, 9, 9]
  _, kinds = oracle.loop_linearize([CATS], "lin3")
  # <s> (S Cats (VP chase mice VP) VP) VP) S) S) S) </s>
  depth, pop = oracle.stack_walk_metadata(kinds)
  assert depth == [0, 0, 1, 1, 2, 2, 1, 1, 1, 0, 0, 0, 0]
  assert pop == [13, 9, 9, 6, 6, 6, 9, 8, 9, 13, 11, 12, 13]


def test_metadata_unbalanced_pin_downs():
  # lin1_noont: <s> Cats chase mice VP) S) </s>; closings with nothing open pop nothing, depth 0.
  _, kinds = oracle.loop_linearize([CATS], "lin1_noont")
  depth, pop = oracle.stack_walk_metadata(kinds)
  assert depth == [0] * 7
  assert pop == [7] * 7
  # lin1_merge: <s> (S Cats (VP chase mice ) </s>; ")" closes the innermost (VP only, (S stays open.
  _, kinds = oracle.loop_linearize([CATS], "lin1_merge")
  depth, pop = oracle.stack_walk_metadata(kinds)
  assert depth == [0, 0, 1, 1, 2, 2, 1, 0]
  assert pop == [8, 8, 8, 6, 6, 6, 8, 8]
  # A closing before any opening (as in a shuffled order), then an ONT never closed.
  kinds = [B, C, W, O, W, E]
  depth, pop = oracle.stack_walk_metadata(kinds)
  assert depth == [0, 0, 0, 0, 1, 0]  # EOS is at root level even with (X open
  assert pop == [6, 6, 6, 6, 6, 6]
  # A CNT1 with nothing open composes only itself.
  kinds = [B, W, C1, C2, E]
  assert oracle.stack_walk_attends(kinds, "tg") == [[0], [0, 1], [2], [0, 1, 2, 3], [0, 1, 2, 4]]


def test_compose_never_sees_the_cnt2_just_before_it():
  # <s> (S (NP the hungry cat NP) NP) (VP meows VP) VP) S) S) </s>: key 11 (VP)-CNT2) has
  # pop = 12 under the "own position + 1" rule, which equals the compose query 12 (S)-CNT1).
  # TG never pushes a CNT2, so COMPOSE at 12 must not attend it (nor 7, nor 13).
  _, kinds = oracle.loop_linearize([HUNGRY], "lin2")
  _, pop = oracle.stack_walk_metadata(kinds)
  assert pop[11] == 12 and kinds[12] == C1
  for attention in ("tg", "tg_nomask", "tg_nomask_aug"):
    mask = oracle.stack_walk_mask(kinds, attention)
    assert not mask[12][11]
    assert [j for j in range(15) if mask[12][j]] == [1, 6, 10, 12]


def test_stack_masks_agree_with_spec_pop_formula():
  """Cross-check: the stack simulation equals SPEC §3's pop-based table on hand examples, with
  one correction: compose queries exclude CNT2 keys other than themselves (see the test above)."""
  docs = [[HUNGRY], [NESTED], [CATS, HUNGRY, NESTED], [Tree("S", ("a",)), Tree("S", ("b",))]]
  for doc in docs:
    _, kinds = oracle.loop_linearize(doc, "lin2")
    _, pop = oracle.stack_walk_metadata(kinds)
    T = len(kinds)
    for attention in ("tg", "tg_nomask", "tg_nomask_aug", "causal"):
      mask = oracle.stack_walk_mask(kinds, attention)
      for i in range(T):
        compose = attention != "causal" and kinds[i] == C1
        for j in range(T):
          if j > i:
            want = False
          elif compose:
            want = (pop[j] == i and kinds[j] != C2) or j == i
          elif attention == "tg":
            want = pop[j] > i
          elif attention == "tg_nomask":
            want = kinds[j] != C2 or j == i
          else:
            want = True
          assert mask[i][j] == want, (doc, attention, i, j)


def test_mix():
  _, kinds = oracle.loop_linearize([HUNGRY], "lin2")
  for spelling in ("tgnomask_mix_tg", "mix(tg_nomask, tg)", "mix_tg_nomask_tg",
                   ("mix", "tg_nomask", "tg")):
    masks = oracle.stack_walk_mask(kinds, spelling)
    assert masks == [oracle.stack_walk_mask(kinds, "tg_nomask"), oracle.stack_walk_mask(kinds, "tg")]
  masks = oracle.stack_walk_mask(kinds, "tgtree_mix_tg")
  assert masks == [oracle.stack_walk_mask(kinds, "causal"), oracle.stack_walk_mask(kinds, "tg")]


def test_packed_row():
  _, k1 = oracle.loop_linearize([Tree("S", ("a",))], "lin2")  # 6 tokens
  _, k2 = oracle.loop_linearize([HUNGRY], "lin2")  # 15 tokens
  T = 24
  mask = oracle.packed_row_mask([k1, k2], T, "tg")
  m1 = oracle.stack_walk_mask(k1, "tg")
  m2 = oracle.stack_walk_mask(k2, "tg")
  for i in range(T):
    for j in range(T):
      if i < 6 and j < 6:
        want = m1[i][j]
      elif 6 <= i < 21 and 6 <= j < 21:
        want = m2[i - 6][j - 6]
      else:
        want = i >= 21 and i == j  # cross-document False; padding sees only itself
      assert mask[i][j] == want, (i, j)
  mixed = oracle.packed_row_mask([k1, k2], T, "tgtree_mix_tg")
  assert mixed[1] == mask
  assert mixed[0][20][6:21] == [True] * 15 and not any(mixed[0][20][:6])
  meta = oracle.packed_row_metadata([k1, k2], T, "tg")
  assert meta["segment"] == [1] * 6 + [2] * 15 + [0] * 3
  assert meta["position"] == list(range(6)) + list(range(15)) + [0] * 3
  # doc 1: <s> (S a S) S) </s> -> pop [6, 3, 3, 6, 5, 6] in-doc; row infinity is 24.
  assert meta["pop"][:6] == [24, 3, 3, 24, 5, 24]
  assert meta["pop"][6:9] == [24, 18, 12]
  assert meta["is_compose"][3] and meta["is_compose"][12] and not meta["is_compose"][4]
  with pytest.raises(ValueError):
    oracle.packed_row_mask([k1, k2], 20, "tg")


# ---------------------------------------------------------------------------------------------
# Targets (SPEC §4)
# ---------------------------------------------------------------------------------------------

def test_targets():
  _, kinds = oracle.loop_linearize([HUNGRY], "lin2")
  tg_targets = [False, True, True, True, True, True, True, False, True, True, True, False, True,
                False, True]
  for attention in ("tg", "tg_nomask", "tg_nomask_aug", "tgnomask_mix_tg", "tgtree_mix_tg"):
    assert oracle.loop_targets(kinds, attention, "lin2") == tg_targets
  assert oracle.loop_targets(kinds, "causal", "lin2") == [False] + [True] * 14
  for scheme in ("lin0", "lin1", "lin3", "lin1_noont", "lin1_merge", "pause1", "pause2"):
    _, kinds = oracle.loop_linearize([CATS], scheme)
    assert oracle.loop_targets(kinds, "causal", scheme) == [False] + [True] * (len(kinds) - 1)
  # lin1_shuf (a hand-made shuffled order): NT tokens are never targets.
  kinds = [B, W, C, O, W, O, C, W, E]
  assert oracle.loop_targets(kinds, "causal", "lin1_shuf") == [
      False, True, False, False, True, False, False, True, True]
  assert oracle.loop_targets([B, W, E, PAD, PAD], "causal", "lin0") == [
      False, True, True, False, False]


def test_example_printer(capsys):
  oracle.print_table([HUNGRY], "lin2", "tg")
  out = capsys.readouterr().out
  assert "(NP the hungry cat NP)" in out
  assert len(out.strip().splitlines()) == 2 + 15
