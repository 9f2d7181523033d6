"""The GTCA toy task (agreement across attractors) and the tree ablations (the real sets' readers:
tests/test_gtca_real_sets.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from flax import nnx

from slm_jax.corpus.grammar import default_grammar
from slm_jax.gtca import ablations, toy_task
from slm_jax.gtca.spans import ANSWER, OPTIONS, SpanNode, SpanTree
from slm_jax.parser.api import load_parser
from slm_jax.parser.config import named_config
from slm_jax.parser.labels import LabelVocab
from slm_jax.parser.model import SpanScorer
from slm_jax.parser.vocab import Vocab
from slm_jax.parser.weights import save_parser
from slm_jax.trees import Tree


def T(label, *kids):
  return Tree(label, tuple(kids))


def _derivation(verb_phrase, subject_number="pl", attractor_number="sg"):
  """`the keys near the cabinet <VP> .` as a grammar derivation."""
  n, m = subject_number, attractor_number
  noun = {"sg": "key", "pl": "keys"}
  other = {"sg": "cabinet", "pl": "cabinets"}
  subject = T(f"NP[{n}]", T(f"NP[{n}]", T(f"Det[{n}]", "the"), T(f"Nbar[{n}]", T(f"N[{n}]", noun[n]))),
              T("PP", T("P", "near"), T(f"NP[{m}]", T(f"Det[{m}]", "the"),
                                         T(f"Nbar[{m}]", T(f"N[{m}]", other[m])))))
  return T("ROOT", T("S_root", T("Clause", subject, verb_phrase), T("Punct", ".")))


@pytest.fixture(scope="module")
def task():
  return toy_task.make_toy_task(train=40, dev=10, test=20, seed=3)


def test_item_from_a_hand_built_derivation():
  vp = T("VP[pl]", T("Cop[pl]", "are"), T("Pred[pl]", T("ADJP", T("Adj", "big"))))
  rng = np.random.default_rng(0)
  item = toy_task.make_item(_derivation(vp), default_grammar(), toy_task.verb_pairs(), rng, None)
  assert item.question == "the keys near the cabinet ___ big ."
  assert sorted(item.options) == ["are", "is"] and item.options[item.answer] == "are"
  assert item.attractor == "pp" and item.number == "pl" and item.slot == 5
  assert item.tree.leaves() == list(item.words)
  assert item.tree.to_bracketed() == ("(S (NP (NP the keys) (PP near (NP the cabinet))) "
                                      "(VP ___ (ADJP big)) .)")
  words, tree = toy_task.filled(item, item.answer)
  assert words[5] == "are" and tree.leaves() == words


def test_items_need_an_attractor_and_a_visible_agreement_marker():
  grammar, pairs, rng = default_grammar(), toy_task.verb_pairs(), np.random.default_rng(0)
  big = T("Pred[pl]", T("ADJP", T("Adj", "big")))
  same_number = _derivation(T("VP[pl]", T("Cop[pl]", "are"), big), "pl", "pl")
  modal = _derivation(T("VP[pl]", T("Modal", "can"), T("VP[base]", T("VPc[base]",
                                                                      T("Vi[base]", "sleep")))))
  sleep = lambda: T("VPc[pl]", T("Vi[pl]", "sleep"))
  coordinated = _derivation(T("VP[pl]", T("VP[pl]", sleep()), T("Conj", "and"),
                              T("VP[pl]", sleep())))
  for derivation in (same_number, modal, coordinated):
    assert toy_task.make_item(derivation, grammar, pairs, rng, None) is None
  ok = _derivation(T("VP[pl]", sleep()))
  assert toy_task.make_item(ok, grammar, pairs, rng, "sg") is None  # wrong subject number asked
  assert toy_task.make_item(ok, grammar, pairs, rng, "pl").options[0] in ("sleep", "sleeps")


def test_verb_pairs_read_the_paradigms():
  pairs = toy_task.verb_pairs()
  assert pairs[("Cop", "is")] == {"sg": "is", "pl": "are"}
  assert pairs[("Vi", "laughs")] == {"sg": "laughs", "pl": "laugh"}
  assert pairs[("Do", "do")] == {"sg": "does", "pl": "do"}


def test_task_is_deterministic_balanced_and_disjoint(task):
  again = toy_task.make_toy_task(train=40, dev=10, test=20, seed=3)
  assert [x.question for x in again.splits["test"]] == [x.question for x in task.splits["test"]]
  other = toy_task.make_toy_task(train=40, dev=10, test=20, seed=4)
  assert [x.question for x in other.splits["test"]] != [x.question for x in task.splits["test"]]
  questions = {s: {x.question for x in items} for s, items in task.splits.items()}
  assert not questions["train"] & questions["test"] and not questions["dev"] & questions["test"]
  pairs = toy_task.verb_pairs()
  for split, items in task.splits.items():
    assert task.counts[split]["items"] == len(items)
    assert task.counts[split]["number"] == {"sg": len(items) // 2, "pl": len(items) // 2}
    assert sum(task.counts[split]["attractor"].values()) == len(items)
    for item in items:
      assert item.words[item.slot] == toy_task.SLOT and item.tree.leaves() == list(item.words)
      right, wrong = item.options[item.answer], item.options[1 - item.answer]
      forms = [f for (cat, w), f in pairs.items() if w == right]
      assert any(f[item.number] == right and wrong in f.values() for f in forms), item
  assert "train: 40 items" in task.summary()
  answers = [x.answer for x in task.splits["train"]]
  assert 0 < sum(answers) < len(answers)  # both letters are right sometimes


def test_fixed_option_order_puts_the_singular_first():
  fixed = toy_task.make_toy_task(train=10, dev=0, test=0, seed=3, option_order="fixed")
  pairs = toy_task.verb_pairs()
  for item in fixed.splits["train"]:
    assert item.answer == (item.number == "pl")
    assert any(f["sg"] == item.options[0] for (c, w), f in pairs.items() if w == item.options[1])
  with pytest.raises(ValueError, match="option_order"):
    toy_task.make_item(None, default_grammar(), {}, np.random.default_rng(0), None,
                       option_order="sorted")


def test_bad_sizes_are_errors():
  with pytest.raises(ValueError, match="dev size"):
    toy_task.make_toy_task(train=1, dev=-1, test=1)


# ---- tree ablations ---------------------------------------------------------------------------
def _spans(node):
  out = []
  stack = [node]
  while stack:
    n = stack.pop()
    if isinstance(n, Tree):
      out.append(len(n.children))
      stack.extend(n.children)
  return out


def test_right_branching_and_random_bracketing():
  words = list("abcde")
  rb = ablations.right_branching(words)
  assert rb.to_bracketed() == "(X a (X b (X c (X d e))))"
  rng = np.random.default_rng(0)
  trees = [ablations.random_bracketing(words, rng) for _ in range(20)]
  for tree in trees:
    assert tree.leaves() == words and all(k == 2 for k in _spans(tree))  # binary, in order
  assert len({t.to_bracketed() for t in trees}) > 3
  again = [ablations.random_bracketing(words, np.random.default_rng(0)) for _ in range(1)]
  assert again[0] == trees[0]
  assert ablations.random_bracketing(["a"], rng).leaves() == ["a"]
  with pytest.raises(ValueError, match="unknown tree source"):
    ablations.question_tree(rb, "oracle", rng)


def test_weak_parser_is_a_trained_parser_and_right_branching_its_own_source(tmp_path):
  """The weak-parser ablation reads a trained parser's trees (here a tiny random one), not
  right-branching trees (which it gave before); right-branching is its own source."""
  words = ["the", "cats", "near", "the", "dog", "sleep"]
  cfg = dataclasses.replace(named_config("tiny").model, max_words=12)
  vocab = Vocab.from_sentences([words], min_count=1)
  labels = LabelVocab(("∅", "NP", "VP", "S", "PP"))
  folder = save_parser(tmp_path / "weak", SpanScorer(cfg, len(vocab.words), len(vocab.chars),
                                                      len(labels), nnx.Rngs(3)), vocab, labels)
  gold = Tree("S", (Tree("NP", (Tree("NP", ("the", "cats")), Tree("PP", ("near", Tree(
      "NP", ("the", "dog")))))), Tree("VP", ("sleep",))))
  weak, = ablations.weak_trees([gold.leaves()], str(folder))
  assert weak == load_parser(folder).parse([words])[0] and weak.leaves() == words
  rng = np.random.default_rng(0)
  assert ablations.question_tree(gold, "weak", rng, weak) == weak
  assert ablations.question_tree(gold, "right_branching", rng) == ablations.right_branching(words)
  assert "weak" in ablations.TREE_SOURCES and "right_branching" in ablations.TREE_SOURCES
  with pytest.raises(ValueError, match="needs the weak parser's tree"):
    ablations.question_tree(gold, "weak", rng)  # no silent right-branching fallback
  with pytest.raises(ValueError, match="weak_parser=FOLDER"):
    ablations.weak_trees([words], "")


def test_permuted_leaves_keep_topology_and_leave_options_alone():
  leaf = lambda s: SpanNode("w", s, s + 1)
  question = SpanNode("S", 1, 5, (SpanNode("NP", 1, 3, (leaf(1), leaf(2))), leaf(3), leaf(4)))
  options = SpanNode(OPTIONS, 6, 10, (SpanNode("A", 6, 8), SpanNode("B", 8, 10)))
  answer = SpanNode(ANSWER, 10, 11)
  tree = SpanTree(SpanNode("ROOT", 1, 11, (question, options, answer)), 11, ((5, 10),))
  seen = set()
  for seed in range(10):
    out = ablations.permute_leaves(tree, np.random.default_rng(seed))
    q, o, a = out.root.children
    assert (o, a, out.masked, out.n_tokens) == (options, answer, tree.masked, tree.n_tokens)
    np_node = q.children[0]
    assert [len(c.children) for c in q.children] == [2, 0, 0]  # same topology
    leaves = sorted((c.start for c in np_node.children)) + [q.children[1].start,
                                                            q.children[2].start]
    assert sorted(leaves) == [1, 2, 3, 4]
    assert np_node.start == min(c.start for c in np_node.children)  # hulls
    assert np_node.end == max(c.end for c in np_node.children)
    seen.add(tuple(c.start for c in np_node.children))
  assert len(seen) > 1
