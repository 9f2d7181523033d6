"""A toy MCQA task with gold trees: subject-verb agreement across an attractor (GTCA, SPEC §10).

Each item is a sentence of the embedded PCFG (`slm_jax.corpus`) whose finite verb agrees with a
subject that carries a modifier with a noun of the other number (the attractor): a prepositional
phrase ("the keys near the cabinet ___"), a subject relative ("the key that likes the guards ___")
or an object relative ("the key that the guards like ___"). The question is the sentence with
the verb replaced by the slot word `___`; the options are the verb's singular and plural forms
(`is`/`are`, `laughs`/`laugh`, `does`/`do`, …) in a seeded order (`option_order="random"`) or
always singular first (`"fixed"`: the easy variant, where the letter names the subject's number);
the answer is the letter of the agreeing form. The gold tree is the grammar's tree of the question (the slot word standing where
the verb was), so a GTCA branch can be fed perfect structure.

Why this task: the agreement decision needs the subject's head, which the hierarchy makes near
(NP sibling of VP) while the surface makes the attractor nearer. A structure-blind model can
fall for the attractor; the tree says which noun governs the verb.

Determinism: item i of a split is sampled from `SeedSequence([seed, 1000 + stream, i])`
(streams as in `slm_jax.corpus.treebank.SPLITS`: train 0, dev 1, test 2), redrawing until a
sentence qualifies; item i asks for subject number `("sg", "pl")[i % 2]` so every split is
balanced and a verb-form prior alone scores 50%. Dev and test drop questions that occur in an
earlier split (train, then dev), so the splits are disjoint; the counts say how many.
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
from typing import Sequence

import numpy as np

from slm_jax import files
from slm_jax.corpus import treebank
from slm_jax.corpus.grammar import DATA_DIR, Grammar, GrammarError, base_name, default_grammar
from slm_jax.trees import Tree

SLOT = "___"
LETTERS = "ABCDEFGH"
SPLIT_STREAMS = {"train": 0, "dev": 1, "test": 2}
ATTRACTORS = ("pp", "src", "orc")
NUMBERS = ("sg", "pl")
_MAX_DRAWS = 20_000
_NOUNISH = ("NP", "NP_c1", "NP_c2")


@dataclasses.dataclass(frozen=True)
class ToyItem:
  """One question. `words` are the question's words (the slot included), `tree` their gold tree,
  `slot` the slot's word index, `answer` the index of the right option in `options`."""
  question: str
  words: tuple[str, ...]
  options: tuple[str, ...]
  answer: int
  tree: Tree
  slot: int
  attractor: str  # "pp" | "src" | "orc": the modifier next to the verb
  number: str     # the subject's number, "sg" | "pl"
  split: str
  index: int

  @property
  def answer_letter(self) -> str:
    return LETTERS[self.answer]


@dataclasses.dataclass
class ToyTask:
  """The three splits and their counts (`counts[split]`: items, sampled sentences, duplicates
  dropped, per attractor, per number)."""
  splits: dict[str, list[ToyItem]]
  counts: dict[str, dict]
  seed: int

  def summary(self) -> str:
    """One line per split, e.g. `train: 2000 items (pp 1210, src 420, orc 370; sg 1000, pl
    1000) from 31234 sentences, 0 duplicates dropped`."""
    lines = []
    for split, c in self.counts.items():
      att = ", ".join(f"{a} {c['attractor'].get(a, 0)}" for a in ATTRACTORS)
      num = ", ".join(f"{n} {c['number'].get(n, 0)}" for n in NUMBERS)
      lines.append(f"{split}: {c['items']} items ({att}; {num}) from {c['sampled']} sentences, "
                   f"{c['duplicates']} duplicates dropped")
    return "\n".join(lines)


def verb_pairs(lexicon: str | pathlib.Path = DATA_DIR / "english.lexicon"
               ) -> dict[tuple[str, str], dict[str, str]]:
  """(category, word) → {"sg": form, "pl": form} for every lexicon row that has both a
  `Cat[sg]` and a `Cat[pl]` column (`Vi`, `Vt`, `Vs`, `Cop`, `CopPast`, `Do`, also `N`, `Det`).
  Read from the lexicon's `%paradigm` rows, the only place where forms are paired."""
  path = pathlib.Path(lexicon)
  out: dict[tuple[str, str], dict[str, str]] = {}
  columns = None
  for number, raw in enumerate(files.read_lines(path), 1):
    line = raw.split("#", 1)[0].strip()
    if not line:
      continue
    tokens = line.split()
    if tokens[0] == "%paradigm":
      columns = [col.split("+") for col in tokens[1:]]
      continue
    if columns is None:
      raise GrammarError(f"{path}:{number}", "words before the first %paradigm line")
    forms: dict[str, dict[str, str]] = {}
    for word, cats in zip(tokens, columns):
      for cat in cats:
        name, _, feats = cat.partition("[")
        feat = feats.rstrip("]")
        if feat in NUMBERS:
          forms.setdefault(name, {})[feat] = word
    for name, pair in forms.items():
      if len(pair) == 2:
        for word in pair.values():
          out[(name, word)] = dict(pair)
  return out


def _feature(label: str) -> str:
  return label[label.index("[") + 1:-1] if "[" in label else ""


def _words(node) -> list[str]:
  return [node] if isinstance(node, str) else node.leaves()


def _agreeing_verb(vp: Tree, number: str) -> tuple[Tree, str] | None:
  """The preterminal of VP[number]'s agreeing verb and its category, or None when the VP has
  no agreement marker (a modal) or is a coordination (its second verb would give it away)."""
  first = vp.children[0]
  if not isinstance(first, Tree):
    return None
  name = base_name(first.label)
  if name == "VPc":
    first = first.children[0]
    name = base_name(first.label)
  if name in ("Vi", "Vt", "Vs", "Cop", "CopPast", "Do") and _feature(first.label) == number:
    return first, name
  return None


def _has_opposite_noun(node: Tree, number: str) -> bool:
  return any(base_name(t.label) in _NOUNISH and _feature(t.label) in NUMBERS
             and _feature(t.label) != number for t in node.subtrees())


def _attractor(subject: Tree, number: str) -> str | None:
  """The subject's modifier next to the verb, when it holds a noun of the other number:
  `NP[n] -> NP[n] PP | NP[n] SBAR_src[n] | NP[n] SBAR_orc`. Coordinated subjects are skipped."""
  kids = subject.children
  if len(kids) != 2 or not all(isinstance(k, Tree) for k in kids):
    return None
  head, modifier = kids
  if base_name(head.label) != "NP" or any(base_name(t.label) == "ConjAnd"
                                          for t in subject.subtrees()):
    return None
  kind = {"PP": "pp", "SBAR_src": "src", "SBAR_orc": "orc"}.get(base_name(modifier.label))
  if kind is None or not _has_opposite_noun(modifier, number):
    return None
  return kind


def _candidates(derivation: Tree):
  """(leaf index of the verb, its category, subject number, attractor) for every clause
  `NP[n] (ADVP_pre) VP[n]` of a derivation whose subject has an attractor."""
  found = []

  def walk(node, offset: int) -> int:
    if isinstance(node, str):
      return offset + 1
    kids = node.children
    if node.label == "Clause" and len(kids) in (2, 3) and isinstance(kids[0], Tree):
      subject, vp = kids[0], kids[-1]
      number = _feature(subject.label)
      if (base_name(subject.label) == "NP" and number in NUMBERS and isinstance(vp, Tree)
          and vp.label == f"VP[{number}]"
          and (len(kids) == 2 or base_name(kids[1].label) == "ADVP_pre")):
        verb = _agreeing_verb(vp, number)
        attractor = _attractor(subject, number)
        if verb is not None and attractor is not None:
          index = offset + sum(len(_words(k)) for k in kids[:-1])
          index += _words(vp).index(verb[0].children[0])  # the verb is the VP's first word
          found.append((index, verb[1], number, attractor))
    for kid in kids:
      offset = walk(kid, offset)
    return offset

  walk(derivation, 0)
  return found


def _replace_leaf(tree: Tree, index: int, word: str) -> Tree:
  """`tree` with its `index`-th leaf replaced by `word`."""
  counter = [0]

  def rebuild(node):
    if isinstance(node, str):
      counter[0] += 1
      return word if counter[0] - 1 == index else node
    return Tree(node.label, tuple(rebuild(k) for k in node.children))

  return rebuild(tree)


OPTION_ORDERS = ("random", "fixed")


def make_item(derivation: Tree, grammar: Grammar, pairs, rng: np.random.Generator,
              number: str | None, split: str = "", index: int = 0,
              option_order: str = "random") -> ToyItem | None:
  """The item of one sampled derivation (the last qualifying clause), None if none qualifies
  (or none has subject `number`, when given). The option order is drawn from `rng` ("random")
  or singular first ("fixed")."""
  if option_order not in OPTION_ORDERS:
    raise ValueError(f"option_order {option_order!r} is not one of {', '.join(OPTION_ORDERS)}")
  candidates = [c for c in _candidates(derivation) if number is None or c[2] == number]
  if not candidates:
    return None
  slot, category, subject_number, attractor = candidates[-1]
  tree = grammar.to_output_tree(derivation)
  words = tree.leaves()
  verb = words[slot]
  forms = pairs.get((category, verb))
  if forms is None:
    raise GrammarError(f"{grammar.source}", f"verb {verb!r} ({category}) has no sg/pl pair "
                       "in the lexicon")
  options = [forms["sg"], forms["pl"]]
  if rng.random() < 0.5 and option_order == "random":
    options.reverse()
  words[slot] = SLOT
  return ToyItem(" ".join(words), tuple(words), tuple(options), options.index(verb),
                 _replace_leaf(tree, slot, SLOT), slot, attractor, subject_number, split, index)


def _split_items(split: str, count: int, seed: int, max_words: int, grammar: Grammar, pairs,
                 seen: set[str], option_order: str) -> tuple[list[ToyItem], dict]:
  items, sampled, duplicates = [], 0, 0
  for i in range(count):
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1000 + SPLIT_STREAMS[split], i]))
    for _ in range(_MAX_DRAWS):
      sampled += 1
      derivation = treebank.generate_sentence(rng, grammar, max_words=max_words, derivation=True)
      item = make_item(derivation, grammar, pairs, rng, NUMBERS[i % 2], split, i, option_order)
      if item is None:
        continue
      if item.question in seen:
        duplicates += 1
        continue
      break
    else:
      raise RuntimeError(f"toy task {split} item {i}: no qualifying sentence of at most "
                         f"{max_words} words in {_MAX_DRAWS} draws")
    items.append(item)
  for item in items:
    seen.add(item.question)
  counts = {"items": len(items), "sampled": sampled, "duplicates": duplicates,
            "attractor": dict(collections.Counter(x.attractor for x in items)),
            "number": dict(collections.Counter(x.number for x in items))}
  return items, counts


def make_toy_task(train: int = 2000, dev: int = 200, test: int = 500, seed: int = 0, *,
                  max_words: int = 20, grammar: Grammar | None = None,
                  option_order: str = "random") -> ToyTask:
  """The three splits (sizes in items), deterministic for `seed` (see the module docstring)."""
  for name, n in (("train", train), ("dev", dev), ("test", test)):
    if n < 0:
      raise ValueError(f"toy task: {name} size must be >= 0, got {n}")
  grammar = grammar or default_grammar()
  pairs = verb_pairs()
  seen: set[str] = set()
  splits, counts = {}, {}
  for name, n in (("train", train), ("dev", dev), ("test", test)):
    splits[name], counts[name] = _split_items(name, n, seed, max_words, grammar, pairs, seen,
                                              option_order)
  return ToyTask(splits, counts, seed)


def filled(item: ToyItem, option: int) -> tuple[list[str], Tree]:
  """The question's words and gold tree with option `option` in the slot (a BLiMP-style pair is
  `filled(item, item.answer)` vs the other option)."""
  words = list(item.words)
  words[item.slot] = item.options[option]
  return words, _replace_leaf(item.tree, item.slot, item.options[option])


def as_mcqa(items: Sequence[ToyItem]) -> list[dict]:
  """Items as plain MCQA records `{"question", "options", "answer", "tree"}` (answer: index),
  the layout `slm_jax.gtca.mcqa_data` readers produce."""
  return [{"question": x.question, "options": list(x.options), "answer": x.answer,
           "tree": x.tree} for x in items]
