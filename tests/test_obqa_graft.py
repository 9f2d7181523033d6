"""OpenBookQA's grafted lines (`downstream.obqa_graft`) on hand-written trees, against the lines
written by hand from qlwpc/TG-Interpolation `datatools/obqa_tree_clean.py` @ 8e909852
(`find_choice_in_line`, `normalize_sample`, `_graft`); a word under a phrase stands for the
code's preterminal."""

from __future__ import annotations

from slm_jax.downstream.obqa_graft import Located, graft, locate
from slm_jax.ptb import parse_trees


def line(*trees: str):
  return [parse_trees(t, normalize=None)[0] for t in trees]


def text(trees) -> list[str]:
  return [t.to_bracketed() for t in trees]


Q = "(SBARQ (WHNP What) (SQ makes (S (NP plants) (VP grow))) ?)"


def test_a_gold_option_that_begins_a_sentence_takes_each_option_from_its_start():
  """Gold "Light. Water" starts tree 1 (multi-tree mode, no node): every line is the gold's
  trees before it + the option's node as a tree of its own (or its trees from its start)."""
  lines = [line(Q, "(NP Light .)", "(NP Water .)"),
           line("(SBARQ (WHNP What) (SQ makes (NP plants) (VP grow)) ?)", "(NP Soil .)"),
           line(Q, "(NP Some warm air .)"),
           line(Q, "(NP Sun .)", "(NP Rain .)")]
  options = ["Light. Water", "Soil", "Some warm air", "Sun. Rain"]
  assert locate(lines[0], options[0]) == Located(1, None, False)
  assert locate(lines[1], options[1]) == Located(1, (0,), True)  # the word: the code's (NN Soil)
  assert locate(lines[2], options[2]) == Located(1, (), True)  # no exact node: the whole tree
  grafted, events = graft(lines, options, 0)
  assert [text(g) for g in grafted] == [
      [Q, "(NP Light .)", "(NP Water .)"],  # the gold's own line again
      [Q, "(NP Soil)"],  # the gold's question; the code's bare " Soil", wrapped here (counted)
      [Q, "(NP Some warm air .)"],
      [Q, "(NP Sun .)", "(NP Rain .)"]]
  assert events == [("multi_tree",), ("multi_tree", "bare_word"), ("multi_tree",),
                    ("multi_tree",)]


def test_an_option_that_begins_a_sentence_keeps_the_gold_tree_it_would_replace():
  """Gold "Water" is the word of the last tree; option "Rain. Snow" starts tree 1 of its line:
  the code keeps the gold's tree 1 whole and appends the option's trees (`_graft`, gold
  boundary without a source node)."""
  q = "(SBARQ (NP Plants) (VP need (WHNP what)) ?)"
  lines = [line(q, "(NP Water .)"), line(q, "(NP Rain .)", "(NP Snow .)"),
           line(q, "(NP Warm air .)"), line(q, "(NP Sunlight .)")]
  grafted, events = graft(lines, ["Water", "Rain. Snow", "Warm air", "Moonlight"], 0)
  assert [text(g) for g in grafted] == [
      [q, "(NP Water .)"],
      [q, "(NP Water .)", "(NP Rain .)", "(NP Snow .)"],
      [q, "(NP (NP Warm air .) .)"],  # the option's whole tree in place of the gold's word
      [q, "(NP Sunlight .)"]]  # "Moonlight" is not in its line: kept as parsed
  assert events == [(), ("multi_tree",), (), ("not_grafted",)]


def test_an_option_inside_a_sentence_of_a_multi_sentence_line():
  """Gold "plants growing. They need light" starts at leaf 5 of tree 0: its node is the span
  from there to the end of tree 0's content; an option found the same way brings its own later
  trees, a one-sentence option none."""
  sun = "(S (NP The sun) (VP is (ADJP responsible (PP for {}))) .)"
  lines = [line(sun.format("(NP (NP plants) (VP growing))"),
                "(S (NP They) (VP need (NP light)) .)"),
           line(sun.format("(NP flowers)")),
           line(sun.format("(S (NP animals) (VP sleeping))"), "(S (NP They) (VP rest) .)")]
  options = ["plants growing. They need light", "flowers", "animals sleeping. They rest"]
  assert locate(lines[0], options[0]) == Located(0, (1, 1, 1, 1), False)
  grafted, events = graft(lines, options, 0)
  assert [text(g) for g in grafted] == [
      text(lines[0]),
      [sun.format("(NP flowers)")],
      [sun.format("(S (NP animals) (VP sleeping))"), "(S (NP They) (VP rest) .)"]]
  assert events == [("multi_tree",)] * 3


def test_a_single_word_option_is_grafted_at_its_word_as_the_code_does_at_its_preterminal():
  """The code's exact-span node of "light" is its preterminal (NN light): the graft replaces the
  word, and "for" stays (the tightest containing node, the PP, would drop it)."""
  sun = "(S (NP The sun) (VP is (ADJP responsible (PP for {}))) .)"
  lines = [line(sun.format("light")), line(sun.format("(NP warm air)")), line(sun.format("heat"))]
  grafted, events = graft(lines, ["light", "warm air", "heat"], 0)
  assert [text(g)[0] for g in grafted] == [sun.format("light"), sun.format("(NP warm air)"),
                                          sun.format("heat")]
  assert events == [()] * 3


def test_a_gold_option_not_found_leaves_every_line_as_parsed():
  lines = [line("(S (NP It) (VP is (NP water)) .)"), line("(S (NP It) (VP is (NP ice)) .)")]
  grafted, events = graft(lines, ["steam", "ice"], 0)
  assert grafted == lines and events == [("not_grafted",)] * 2
