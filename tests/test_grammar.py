"""The grammar format, loader and compiled PCFG (slm_jax.corpus.grammar)."""

from __future__ import annotations

import math
import pathlib
import re

import pytest

from slm_jax.corpus.grammar import (HIDDEN, LEXICAL, PHRASE, GrammarError, base_name,
                                    default_grammar, load_grammar, output_label)
from slm_jax.kinds import PTB_LABELS
from slm_jax.trees import Tree


def feature(symbol: str) -> str | None:
  return symbol[symbol.index("[") + 1:-1] if "[" in symbol else None


@pytest.fixture(scope="module")
def grammar():
  return default_grammar()


def test_probabilities_sum_to_one_per_lhs(grammar):
  totals: dict[str, float] = {}
  for r in grammar.rules:
    assert r.prob > 0
    totals[r.lhs] = totals.get(r.lhs, 0.0) + r.prob
  for r in grammar.lexical_rules:
    assert r.prob > 0
    totals[r.lhs] = totals.get(r.lhs, 0.0) + r.prob
  assert set(totals) == set(grammar.nonterminals)
  for nt, total in totals.items():
    assert math.isclose(total, 1.0, abs_tol=1e-9), nt


def test_true_cfg_shape(grammar):
  for nt in grammar.nonterminals:
    if grammar.kind(nt) == LEXICAL:
      assert grammar.lexical_by_lhs[nt] and not grammar.rules_by_lhs[nt]
    else:
      assert grammar.rules_by_lhs[nt] and not grammar.lexical_by_lhs[nt]
  for r in grammar.rules:
    assert r.rhs and all(s in grammar.kinds for s in r.rhs)
  assert len({(r.lhs, r.rhs) for r in grammar.rules}) == len(grammar.rules)


def test_every_nonterminal_reachable_and_productive(grammar):
  reached, stack = {grammar.start}, [grammar.start]
  while stack:
    for r in grammar.rules_by_lhs[stack.pop()]:
      for s in r.rhs:
        if s not in reached:
          reached.add(s)
          stack.append(s)
  assert reached == set(grammar.nonterminals)
  productive = {nt for nt in grammar.nonterminals if grammar.kind(nt) == LEXICAL}
  while True:
    new = {r.lhs for r in grammar.rules if all(s in productive for s in r.rhs)} - productive
    if not new:
      break
    productive |= new
  assert productive == set(grammar.nonterminals)


def test_consistent_with_finite_expected_length(grammar):
  assert grammar.spectral_radius() < 0.95
  lengths = grammar.expected_lengths()
  assert 9.0 < lengths[grammar.start] < 15.0
  assert all(math.isfinite(x) and x >= 1.0 for x in lengths.values())


def test_kinds_and_labels(grammar):
  assert grammar.kind(grammar.start) in (PHRASE, HIDDEN)
  for nt in grammar.nonterminals:
    if grammar.kind(nt) == PHRASE:
      assert grammar.labels[nt] in PTB_LABELS
      assert grammar.labels[nt] == output_label(nt)
  assert output_label("NP[sg]") == "NP" and output_label("SBAR_orc") == "SBAR"
  assert base_name("NP_c1[pl]") == "NP_c1"
  assert {grammar.labels[nt] for nt in grammar.labels} >= {"S", "SBAR", "NP", "VP", "PP", "ADJP",
                                                          "ADVP", "WHNP", "SQ"}


def test_features_expanded_into_atoms(grammar):
  assert {"NP[sg]", "NP[pl]", "VP[sg]", "VP[pl]", "VP[past]", "VP[base]"} <= set(grammar.kinds)
  assert not any(re.search(r"\[[^\]]*\b[nmtf]\b", nt) for nt in grammar.nonterminals)


def test_clause_rules_pair_subject_and_verb_in_number(grammar):
  """Every subject-predicate rule pairs NP[x] with VP[x] (or a non-agreeing past VP)."""
  checked = 0
  for r in grammar.rules:
    if base_name(r.lhs) not in ("Clause", "S_orc", "S_orc2"):
      continue
    nps = [s for s in r.rhs if output_label(s) == "NP" and grammar.kind(s) == PHRASE]
    vps = [s for s in r.rhs if output_label(s) == "VP" and grammar.kind(s) == PHRASE]
    if nps and vps:
      assert feature(vps[0]) in (feature(nps[0]), "past"), r
      checked += 1
  assert checked >= 8
  for r in grammar.rules:  # questions: the fronted auxiliary agrees with the subject
    if r.lhs == "SQ" and feature(r.rhs[0]) != "past" and base_name(r.rhs[0]) != "Modal":
      assert feature(r.rhs[0]) == feature(r.rhs[1]), r
    if base_name(r.lhs) == "S_src":  # subject relatives agree with their head
      assert feature(r.rhs[0]) in (feature(r.lhs), "past"), r


def _words(grammar, cat: str) -> set[str]:
  return {r.word for r in grammar.lexical_rules if r.lhs == cat}


def test_lexical_variety(grammar):
  assert 40 <= len(_words(grammar, "N[sg]")) <= 80
  assert _words(grammar, "N[sg]").isdisjoint(_words(grammar, "N[pl]"))
  verbs = set.union(*(_words(grammar, f"{v}[sg]") for v in ("Vi", "Vt", "Vs")))
  assert 30 <= len(verbs) <= 60
  assert len(_words(grammar, "Adj")) >= 20
  assert len(_words(grammar, "P")) >= 15
  for v in ("Vi", "Vt", "Vs"):
    sg, pl, past = (_words(grammar, f"{v}[{x}]") for x in ("sg", "pl", "past"))
    assert sg.isdisjoint(pl) and sg.isdisjoint(past) and pl.isdisjoint(past)
    assert _words(grammar, f"{v}[base]") == pl
  assert _words(grammar, "Det[sg]") & _words(grammar, "Det[pl]") == {"the", "no"}


def test_to_output_tree_splices_hidden_and_drops_lexical(grammar):
  np_ = Tree("NP[pl]", (Tree("Det[pl]", ("the",)), Tree("Nbar[pl]", (Tree("N[pl]", ("dogs",)),))))
  vp = Tree("VP[pl]", (Tree("VPc[pl]", (Tree("Vi[pl]", ("bark",)),)),))
  deriv = Tree("ROOT", (Tree("S_root", (Tree("Clause", (np_, vp)), Tree("Punct", (".",)))),))
  assert grammar.to_output_tree(deriv).to_bracketed() == "(S (NP the dogs) (VP bark) .)"


# ---- small grammars written to disk ------------------------------------------------------------

LEXICON = """\
%paradigm N[sg] N[pl]
dog dogs
%paradigm V[sg] V[pl]
barks bark
%paradigm P
near
"""

GRAMMAR = """\
%start S
%lexicon tiny.lexicon
%feature n = sg pl
%phrase S NP VP PP
%hidden Nb
%lexical N V P
S -> NP[n] VP[n]
NP[n] -> Nb[n] 3 | NP[n] PP 1
Nb[n] -> N[n]
PP -> P NP[n] 2
VP[n] -> V[n]
"""


def write(tmp_path: pathlib.Path, grammar: str, lexicon: str = LEXICON) -> pathlib.Path:
  (tmp_path / "tiny.lexicon").write_text(lexicon)
  path = tmp_path / "tiny.grammar"
  path.write_text(grammar)
  return path


def test_tiny_grammar_expands_and_normalizes(tmp_path):
  g = load_grammar(write(tmp_path, GRAMMAR))
  probs = {(r.lhs, r.rhs): r.prob for r in g.rules}
  assert probs[("S", ("NP[sg]", "VP[sg]"))] == pytest.approx(0.5)
  assert probs[("NP[pl]", ("Nb[pl]",))] == pytest.approx(0.75)
  assert probs[("PP", ("P", "NP[sg]"))] == pytest.approx(0.5)  # RHS-only variable splits weight
  assert g.kind("Nb[sg]") == HIDDEN and g.kind("N[pl]") == LEXICAL and g.labels["NP[sg]"] == "NP"
  assert g.vocabulary == ("bark", "barks", "dog", "dogs", "near")
  # E[NP] = 0.75 + 0.25 (E[NP] + E[PP]) with E[PP] = 1 + E[NP]  =>  E[NP] = 2; E[S] = 3
  assert g.expected_lengths()["S"] == pytest.approx(3.0)


@pytest.mark.parametrize("line, edit, message", [
    (9, "Nb[n] -> N[n] Adjective", "unknown symbol 'Adjective'"),
    (8, "NP[n] -> Nb[n] 3x | NP[n] PP 1", "bad weight '3x'"),
    (8, "NP[n] -> Nb[n] -2 | NP[n] PP 1", "bad weight '-2'"),
    (8, "NP[n] -> Nb[n] 0 | NP[n] PP 1", "bad weight '0'"),
    (7, "S -> NP[plural] VP[n]", "undefined feature value 'plural'"),
    (7, "S -> NP[n] VP[n] VP[n,n]", "VP used with 2 feature(s)"),
    (7, "S -> NP[n] VP[n] N[du]", "undefined feature value 'du'"),
    (7, "S -> NP VP", "NP used with 1 feature(s) here but 0"),
    (11, "VP[n] -> V[n]\nN[sg] -> V[sg]", "lexical category N cannot have grammar rules"),
    (11, "VP[n] -> V[n]\n| ", "empty right-hand side"),
    (11, "VP[n] -> V[n]\n%frobnicate", "unknown directive"),
    (11, "VP[n] -> V[n]\n%start NP[sg]", "%start given twice"),
    (11, "VP[n] -> V[n]\nVP[n] -> VP[n]", "unary cycle"),
    (11, "VP[n] -> V[n]\nVP[n] -> VP[n] VP[n] 5", "inconsistent grammar"),
])
def test_malformed_grammar_names_file_and_line(tmp_path, line, edit, message):
  lines = GRAMMAR.splitlines()
  lines[line - 1] = edit
  path = write(tmp_path, "\n".join(lines) + "\n")
  with pytest.raises(GrammarError) as info:
    load_grammar(path)
  text = str(info.value)
  assert message in text
  assert str(path) in text
  if message not in ("unary cycle", "inconsistent grammar"):
    assert f"{path}:{line}:" in text or f"{path}:{line + 1}:" in text


def test_undefined_expansion_names_the_template(tmp_path):
  lexicon = LEXICON.replace("%paradigm N[sg] N[pl]\ndog dogs", "%paradigm N[sg]\ndog")
  path = write(tmp_path, GRAMMAR, lexicon)
  with pytest.raises(GrammarError, match=rf"{re.escape(str(path))}:9: unknown symbol N\[pl\]"):
    load_grammar(path)


def test_bad_phrase_label_unreachable_and_lexicon_errors(tmp_path):
  bad = GRAMMAR.replace("%phrase S NP VP PP", "%phrase S NP VP PP Clause")
  with pytest.raises(GrammarError, match=r"tiny.grammar:4: phrase Clause .* not a PTB label"):
    load_grammar(write(tmp_path, bad))
  bad = GRAMMAR + "%phrase ADJP\nADJP -> P\n"
  with pytest.raises(GrammarError, match=r"unreachable from S: ADJP"):
    load_grammar(write(tmp_path, bad))
  with pytest.raises(GrammarError, match=r"tiny.lexicon:2: expected 2 word"):
    load_grammar(write(tmp_path, GRAMMAR, LEXICON.replace("dog dogs", "dog dogs doggies")))
  with pytest.raises(GrammarError, match=r"tiny.lexicon:4: bad weight '-1'"):
    load_grammar(write(tmp_path, GRAMMAR, LEXICON.replace("barks bark", "barks bark -1")))
  with pytest.raises(GrammarError, match=r"tiny.lexicon:5: S is not a %lexical category"):
    load_grammar(write(tmp_path, GRAMMAR, LEXICON.replace("%paradigm P", "%paradigm S")))
  with pytest.raises(GrammarError, match=r"tiny.lexicon:1: undefined feature value 'du'"):
    load_grammar(write(tmp_path, GRAMMAR, LEXICON.replace("N[pl]", "N[du]")))
  with pytest.raises(GrammarError, match=r"cannot read lexicon"):
    load_grammar(write(tmp_path, GRAMMAR.replace("tiny.lexicon", "missing.lexicon")))
