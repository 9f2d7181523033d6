"""evalb scoring (`slm_jax.parser.evalb`) on hand-made cases whose numbers follow from COLLINS.prm:
punctuation removed before span endpoints, zero-length brackets dropped, ADVP ≡ PRT, each test
bracket matched once, micro averages over sentences."""

from __future__ import annotations

import json

import pytest

from slm_jax.parser import evalb
from slm_jax.ptb import parse_trees


def trees(text: str):
  return parse_trees(text)


def score(gold: str, test: str) -> evalb.Score:
  return evalb.score_trees(trees(gold), trees(test))


def test_punctuation_at_span_edges_does_not_count():
  # Gold S(0,3) NP(0,2) VP(2,3); the test's VP also covers "." — removed before endpoints.
  s = score("(S (NP The cat) (VP sat) .)", "(S (NP The cat) (VP sat .))")
  assert (s.total.gold, s.total.test, s.total.matched) == (3, 3, 3)
  assert s.f1 == 100.0 and s.exact == 1


def test_leading_quote_inside_or_outside_a_constituent():
  s = score("(S `` (NP He) (VP left) '')", "(S (NP `` He) (VP left ''))")
  assert s.f1 == 100.0


def test_a_bracket_over_punctuation_only_is_dropped():
  # (PRN -LRB- -RRB-) has no words left: a zero-length bracket, in neither count.
  s = score("(S (NP Yes) (PRN -LRB- -RRB-) .)", "(S (NP Yes) -LRB- -RRB- .)")
  assert (s.total.gold, s.total.test, s.total.matched) == (2, 2, 2)


def test_unary_chain_counts_each_label():
  # Gold S(0,2) and VP(0,2); the test has only S(0,2): P = 1/1, R = 1/2.
  s = score("(S (VP Go home))", "(S Go home)")
  assert (s.total.gold, s.total.test, s.total.matched) == (2, 1, 1)
  assert s.precision == 100.0 and s.recall == 50.0
  assert s.f1 == pytest.approx(200 / 3)
  assert s.exact == 0


def test_advp_and_prt_are_one_label():
  assert score("(S (NP He) (VP gave (PRT up)))", "(S (NP He) (VP gave (ADVP up)))").f1 == 100.0
  s = score("(S (NP He) (VP gave (PRT up)))", "(S (NP He) (VP gave (PP up)))")
  assert (s.total.gold, s.total.test, s.total.matched) == (4, 4, 3)
  assert s.per_label["ADVP"].gold == 1 and s.per_label["ADVP"].matched == 0
  assert s.per_label["PP"].test == 1


def test_duplicate_brackets_are_matched_once_each():
  s = score("(NP (NP the dog))", "(NP the dog)")
  assert (s.total.gold, s.total.test, s.total.matched) == (2, 1, 1)
  s = score("(NP (NP the dog))", "(NP (NP (NP the dog)))")
  assert (s.total.gold, s.total.test, s.total.matched) == (2, 3, 2)
  assert s.precision == pytest.approx(200 / 3) and s.recall == 100.0


def test_micro_average_over_sentences():
  # Sentence 1: 2 gold, 1 test, 1 matched; sentence 2: 2 gold, 1 test, 1 matched.
  s = score("(S (VP Go home)) (NP (NP the dog))", "(S Go home) (NP the dog)")
  assert (s.sentences, s.total.gold, s.total.test, s.total.matched) == (2, 4, 2, 2)
  assert s.precision == 100.0 and s.recall == 50.0 and s.f1 == pytest.approx(200 / 3)
  assert s.exact_match == 0.0
  # A macro average would differ once the sentences differ in size:
  s = score("(S (NP a) (VP b (NP c))) (S d e)", "(S a (VP b c)) (S d e)")
  assert (s.total.gold, s.total.test, s.total.matched) == (5, 3, 3)
  assert s.recall == 60.0 and s.exact == 1


def test_long_sentences_are_scored_too():
  words = " ".join(f"w{k}" for k in range(60))
  s = score(f"(S {words})", f"(S {words})")
  assert s.sentences == 1 and s.f1 == 100.0


@pytest.mark.parametrize("gold, test, message", [
    ("(S a b) (S c d)", "(S a b) (S c)", "sentence 1: length mismatch"),
    ("(S a b)", "(S a c)", "sentence 0: words differ at word 1"),
    ("(S a b) (S c d)", "(S a b)", "2 gold trees but 1 test"),
])
def test_mismatches_name_the_sentence(gold, test, message):
  with pytest.raises(ValueError, match=message):
    score(gold, test)


def test_cli_reads_wrapped_gold_with_pos_tags(tmp_path, capsys):
  gold = tmp_path / "gold.ptb"
  pred = tmp_path / "pred.ptb"
  gold.write_text("(ROOT (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))\n"
                  "(ROOT (S (VP (VB Go) (ADVP (RB home)))))\n")
  pred.write_text("(S (NP The cat) (VP sat .))\n(S Go (ADVP home))\n")
  assert evalb.main([str(gold), str(pred), "--json"]) == 0
  result = json.loads(capsys.readouterr().out)
  # Sentence 1: 3/3/3; sentence 2: gold S, VP, ADVP; test S, ADVP → 3 gold, 2 test, 2 matched.
  assert (result["gold_brackets"], result["test_brackets"], result["matched"]) == (6, 5, 5)
  assert result["exact_match"] == 50.0
  assert result["per_label"]["VP"]["gold"] == 2 and result["per_label"]["VP"]["matched"] == 1


def test_cli_error_names_the_sentence(tmp_path, capsys):
  from slm_jax import cli
  gold = tmp_path / "gold.ptb"
  pred = tmp_path / "pred.ptb"
  gold.write_text("(S a b)\n(S c d)\n")
  pred.write_text("(S a b)\n(S c d e)\n")
  assert cli.run(evalb.main, [str(gold), str(pred)]) == cli.EXIT_USAGE
  assert "error: sentence 1: length mismatch" in capsys.readouterr().err


def test_unlabeled_scoring_ignores_labels():
  s = evalb.score_trees(trees("(S (NP He) (VP gave (PRT up)))"),
                        trees("(S (NP He) (VP gave (PP up)))"), labeled=False)
  assert s.f1 == 100.0


def test_right_branching_baseline():
  from slm_jax.parser.baseline import right_branching
  assert str(right_branching(["a"])) == "(S a)"
  assert str(right_branching(["a", "b", "c", "d"])) == "(S a (VP b (VP c d)))"
  with pytest.raises(ValueError):
    right_branching([])
  gold = trees("(S (NP The cat) (VP sat (PP on (NP the mat))) .)")
  # Over the 6 non-punctuation words the baseline has S(0,6) and VP(k,6) for k = 1..5 (6 brackets;
  # VP(mat .) is (5,6)); gold S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6). Labelled matches: S(0,6),
  # VP(2,6); unlabelled: (0,6), (2,6), (3,6), (4,6).
  baseline = [right_branching(gold[0].leaves())]
  labelled = evalb.score_trees(gold, baseline)
  assert (labelled.total.gold, labelled.total.test, labelled.total.matched) == (5, 6, 2)
  unlabelled = evalb.score_trees(gold, baseline, labeled=False)
  assert unlabelled.total.matched == 4
