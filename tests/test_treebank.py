"""The embedded treebank generator (slm_jax.corpus.treebank)."""

from __future__ import annotations

import collections
import subprocess
import sys
import time

import numpy as np
import pytest

from slm_jax.corpus import treebank
from slm_jax.corpus.grammar import base_name, default_grammar
from slm_jax.kinds import PTB_LABELS
from slm_jax.trees import Tree

NPS = ("NP", "NP_c1", "NP_c2")
VPS = ("VP", "VP_gap")
VERBS = ("Vi", "Vt", "Vs", "Cop", "CopPast", "Do", "Modal")


@pytest.fixture(scope="module")
def derivations() -> list[Tree]:
  rng = np.random.default_rng(1234)
  return [treebank.generate_sentence(rng, derivation=True) for _ in range(2000)]


def kids(node: Tree) -> list[Tree]:
  return [c for c in node.children if isinstance(c, Tree)]


def noun_number(word: str) -> str:
  """The number of a noun, from the lexicon alone (never from the derivation's features)."""
  cats = {c for c in default_grammar().word_categories[word] if base_name(c) in ("N", "Name")}
  numbers = {"sg" if c == "Name" else c[2:-1] for c in cats}
  assert len(numbers) == 1, word
  return numbers.pop()


def head_number(np_node: Tree) -> str:
  """Number of an NP from its words: coordination is plural, else its head noun's number."""
  children = kids(np_node)
  if any(base_name(c.label) == "ConjAnd" for c in children):
    return "pl"
  first = children[0]
  if base_name(first.label) in NPS:
    return head_number(first)
  node = np_node
  while True:  # descend Nbar chains to the head noun or name
    last = kids(node)[-1]
    if base_name(last.label) in ("N", "Name"):
      return noun_number(last.children[0])
    node = last


def verb_words(vp_node: Tree) -> list[str]:
  """The finite verb or auxiliary word of a VP (one per conjunct)."""
  first = kids(vp_node)[0]
  name = base_name(first.label)
  if name in VPS:
    return [w for c in kids(vp_node) if base_name(c.label) in VPS for w in verb_words(c)]
  if name == "VPc":
    first = kids(first)[0]
  assert base_name(first.label) in VERBS, vp_node
  return [first.children[0]]


def agreement_numbers(word: str) -> set[str]:
  """sg/pl if the verb form agrees (from the lexicon), empty for past forms and modals."""
  cats = default_grammar().word_categories[word]
  return {c[-3:-1] for c in cats if base_name(c) in VERBS and c.endswith(("[sg]", "[pl]"))}


def subject_verb_pairs(deriv: Tree):
  """(subject NP, verb word) for every clause, relative clause and question in a derivation."""
  for node in deriv.subtrees():
    name, children = base_name(node.label), kids(node)
    names = [base_name(c.label) for c in children]
    if name in ("Clause", "S_orc", "S_orc2") and any(n in NPS for n in names):
      subject = next(c for c in children if base_name(c.label) in NPS)
      vp = next(c for c in children if base_name(c.label) in VPS)
      for word in verb_words(vp):
        yield subject, word
    elif name == "SQ":
      yield children[1], children[0].children[0]
    elif name in NPS and "SBAR_src" in names:
      s_src = kids(children[names.index("SBAR_src")])[1]
      for word in verb_words(kids(s_src)[0]):
        yield children[0], word


def test_determinism_and_sharding():
  a = treebank.generate_documents(12, seed=7)
  assert a == treebank.generate_documents(12, seed=7)
  assert treebank.generate_documents(3, seed=7, start=9) == a[9:]
  assert treebank.generate_documents(1, seed=7, start=4)[0] == a[4]
  assert treebank.generate_documents(12, seed=8) != a
  assert all(3 <= len(doc) <= 12 for doc in a)
  rng1, rng2 = np.random.default_rng(5), np.random.default_rng(5)
  assert treebank.generate_sentence(rng1) == treebank.generate_sentence(rng2)


def test_derivation_matches_output_tree():
  grammar = default_grammar()
  for seed in range(50):
    deriv = treebank.generate_document(np.random.default_rng(seed), derivation=True)
    plain = treebank.generate_document(np.random.default_rng(seed))
    assert [grammar.to_output_tree(d) for d in deriv] == plain


def test_trees_are_well_formed(derivations):
  grammar = default_grammar()
  for deriv in derivations:
    tree = grammar.to_output_tree(deriv)
    assert tree.label in ("S", "SQ")
    assert tree.children[-1] == ("?" if tree.label == "SQ" else ".")
    assert all(w not in (".", "?") for w in tree.leaves()[:-1])
    assert tree.leaves() == deriv.leaves()
    for node in tree.subtrees():
      assert node.label in PTB_LABELS
      assert node.children
      assert all(isinstance(c, (Tree, str)) for c in node.children)
    assert 1 <= len(tree.leaves()) <= treebank.MAX_WORDS


def test_subject_verb_agreement_across_attractors(derivations):
  pairs = 0
  for deriv in derivations:
    for subject, word in subject_verb_pairs(deriv):
      numbers = agreement_numbers(word)
      if numbers:
        assert head_number(subject) in numbers, (deriv.to_bracketed(), subject, word)
        pairs += 1
  assert pairs > 1500


def read(text: str) -> Tree:
  """A derivation from brackets, e.g. `(NP[sg] (Det[sg] a) ...)`."""
  tokens = text.replace("(", " ( ").replace(")", " ) ").split()

  def node(i: int) -> tuple[Tree, int]:
    label, i, children = tokens[i + 1], i + 2, []
    while tokens[i] != ")":
      if tokens[i] == "(":
        child, i = node(i)
      else:
        child, i = tokens[i], i + 1
      children.append(child)
    return Tree(label, tuple(children)), i + 1

  return node(0)[0]


def test_agreement_check_catches_a_violation():
  deriv = read("(Clause (NP[sg] (NP[sg] (Det[sg] the) (Nbar[sg] (N[sg] key)))"
               " (PP (P to) (NP[pl] (Det[pl] the) (Nbar[pl] (N[pl] cabinets)))))"
               " (VP[pl] (Cop[pl] are) (Pred[pl] (ADJP (Adj red)))))")
  ((subject, word),) = list(subject_verb_pairs(deriv))
  assert head_number(subject) == "sg" and agreement_numbers(word) == {"pl"}
  assert "PP attractor" in coverage(deriv)


def coverage(deriv: Tree) -> set[str]:
  found = set()
  for node in deriv.subtrees():
    name, children = base_name(node.label), kids(node)
    names = [base_name(c.label) for c in children]
    found |= {n for n in names if n in ("SBAR_src", "SBAR_orc", "SBAR_orc2", "SBAR_adv", "ConjAnd")}
    if name == "VPc" and names[0] == "Vs":
      found.add("sentential complement")
    if name in ("S_root",) and names[0] == "S":
      found.add("clause coordination")
    if name == "SQ":
      found.add("question")
  for subject, _ in subject_verb_pairs(deriv):
    head, *mods = kids(subject)
    for mod in mods:
      if base_name(mod.label) == "PP" and base_name(head.label) in NPS:
        if head_number(kids(mod)[1]) != head_number(head):
          found.add("PP attractor")
      if base_name(mod.label) == "SBAR_orc":
        inner = kids(kids(mod)[1])[0]
        if head_number(inner) != head_number(head):
          found.add("RC attractor")
  return found


def test_construction_coverage(derivations):
  counts = collections.Counter(c for d in derivations for c in coverage(d))
  wanted = ["PP attractor", "RC attractor", "SBAR_src", "SBAR_orc", "SBAR_orc2", "SBAR_adv",
            "sentential complement", "ConjAnd", "clause coordination", "question"]
  for name in wanted:
    assert counts[name] >= 5, (name, counts)


def test_length_distribution(derivations):
  lengths = np.array([len(d.leaves()) for d in derivations])
  assert 8 <= lengths.mean() <= 14
  assert lengths.max() <= treebank.MAX_WORDS
  exact = default_grammar().expected_lengths()[default_grammar().start]
  assert lengths.mean() < exact  # the cap only removes long sentences
  rng = np.random.default_rng(99)
  uncapped = [len(treebank.generate_sentence(rng, max_words=100_000).leaves()) for _ in range(2000)]
  assert abs(np.mean(uncapped) - exact) < 1.0  # ~4.5 standard errors


def test_bad_arguments_raise():
  with pytest.raises(ValueError):
    treebank.generate_document(np.random.default_rng(0), 5, 2)
  with pytest.raises(ValueError):
    treebank.generate_documents(1, seed=-1)


def test_max_words_is_respected():
  rng = np.random.default_rng(3)
  assert all(len(treebank.generate_sentence(rng, max_words=6).leaves()) <= 6 for _ in range(200))


def test_splits_are_disjoint_and_stable():
  train = treebank.embedded_corpus("train", 200, seed=1)
  valid = treebank.embedded_corpus("validation", 50, seed=1)
  test = treebank.embedded_corpus("test", 50, seed=1)
  key = lambda docs: {tuple(t.to_bracketed() for t in d) for d in docs}
  assert not key(train) & key(valid) and not key(train) & key(test) and not key(valid) & key(test)
  assert train == treebank.generate_documents(200, seed=1)
  assert treebank.embedded_corpus("test", 80, seed=1)[:50] == test
  bank = treebank.EmbeddedTreebank(train_documents=20, validation_documents=5, test_documents=5,
                                   seed=1)
  assert bank.split("train") == train[:20] and bank.split("test") == test[:5]
  with pytest.raises(ValueError):
    treebank.embedded_corpus("dev", 3)


def test_cli_writes_documents(tmp_path, capsys):
  out = tmp_path / "bank.txt"
  assert treebank.main(["--documents=4", "--seed=2", f"--out={out}"]) == 0
  blocks = out.read_text().rstrip("\n").split("\n\n")
  docs = treebank.generate_documents(4, seed=2)
  assert [b.split("\n") for b in blocks] == [[t.to_bracketed() for t in d] for d in docs]
  treebank.main(["--documents=2", "--seed=2"])
  assert capsys.readouterr().out.split("\n\n")[0].split("\n") == blocks[0].split("\n")


def test_cli_module_entry_point():
  command = [sys.executable, "-m", "slm_jax.corpus.treebank", "--documents=2", "--seed=0"]
  result = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
  assert result.stdout.count("\n\n") == 1 and result.stdout.startswith("(S")


def test_speed():
  rng = np.random.default_rng(0)
  treebank.generate_sentence(rng)
  begin = time.perf_counter()
  for _ in range(10_000):
    treebank.generate_sentence(rng)
  assert time.perf_counter() - begin < 5.0
