"""Labelled bracketing scores with evalb's COLLINS.prm conventions (SPEC §12), and its CLI:

  python -m slm_jax.parser.evalb GOLD PRED [--per_label] [--json]

Rules, as evalb applies them to trees without POS tags (SPEC §1):
- A wrapper root (`ROOT`, `TOP`, empty label) is dropped by the SPEC §1 reader; every other node
  is a bracket, the root constituent and one-word constituents included.
- Punctuation words (`PUNCTUATION`: the words PTB tags `` '' , . : -LRB- -RRB- # $, raw forms
  included) are removed before span endpoints are computed; a bracket left without words is
  dropped (evalb's "zero element").
- ADVP and PRT are one label (EQ_LABEL); function tags are already stripped by the reader.
- Matching is per sentence, each test bracket used once (multiset intersection of (start, end,
  label)); counts are summed over sentences (micro average), sentences of any length.
- Exact match: a sentence whose gold and test bracket counts both equal the matched count.
- Gold and test must have the same words, in order (evalb's length / word mismatch); anything else
  is a `ValueError` naming the sentence index (0-based).
The word `'` is both a closing quote ('' ) and a possessive (POS) in PTB; without tags it counts as
punctuation.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import sys
from typing import Iterable, Sequence

from slm_jax import cli, ptb
from slm_jax.tables import markdown, number
from slm_jax.trees import Tree

PUNCTUATION = frozenset((
    ",", ".", "?", "!", ":", ";", "--", "...", "…", "``", "''", "`", "'", '"', "“", "”", "‘", "’",
    "-LRB-", "-RRB-", "-LSB-", "-RSB-", "-LCB-", "-RCB-", "(", ")", "[", "]", "{", "}", "#", "$"))
EQUIVALENT = {"PRT": "ADVP"}


def brackets(tree: Tree, punctuation: frozenset = PUNCTUATION,
             labeled: bool = True) -> list[tuple[int, int, str]]:
  """(start, end, label) of every node over the non-punctuation words (start < end); the label
  is "" when not `labeled` (evalb's LABELED 0)."""
  out: list[tuple[int, int, str]] = []
  # Post-order walk: (node, start position, next child index).
  stack: list[list] = [[tree, 0, 0]]
  position = 0
  while stack:
    frame = stack[-1]
    node, start, index = frame
    if index < len(node.children):
      frame[2] += 1
      child = node.children[index]
      if isinstance(child, str):
        position += child not in punctuation
      else:
        stack.append([child, position, 0])
      continue
    stack.pop()
    if position > start:
      out.append((start, position, EQUIVALENT.get(node.label, node.label) if labeled else ""))
  return out


@dataclasses.dataclass
class Counts:
  gold: int = 0
  test: int = 0
  matched: int = 0

  def add(self, gold: int, test: int, matched: int) -> None:
    self.gold += gold
    self.test += test
    self.matched += matched

  @property
  def precision(self) -> float:
    return 100.0 * self.matched / self.test if self.test else 0.0

  @property
  def recall(self) -> float:
    return 100.0 * self.matched / self.gold if self.gold else 0.0

  @property
  def f1(self) -> float:
    p, r = self.precision, self.recall
    return 2 * p * r / (p + r) if p + r else 0.0


@dataclasses.dataclass
class Score:
  """Micro-averaged bracketing scores (percentages) over `sentences`."""

  total: Counts = dataclasses.field(default_factory=Counts)
  sentences: int = 0
  exact: int = 0
  per_label: dict[str, Counts] = dataclasses.field(
      default_factory=lambda: collections.defaultdict(Counts))

  @property
  def precision(self) -> float:
    return self.total.precision

  @property
  def recall(self) -> float:
    return self.total.recall

  @property
  def f1(self) -> float:
    return self.total.f1

  @property
  def exact_match(self) -> float:
    return 100.0 * self.exact / self.sentences if self.sentences else 0.0

  def to_json(self) -> dict:
    return {"sentences": self.sentences, "precision": self.precision, "recall": self.recall,
            "f1": self.f1, "exact_match": self.exact_match, "gold_brackets": self.total.gold,
            "test_brackets": self.total.test, "matched": self.total.matched,
            "per_label": {label: {"gold": c.gold, "test": c.test, "matched": c.matched,
                                  "precision": c.precision, "recall": c.recall, "f1": c.f1}
                          for label, c in sorted(self.per_label.items())}}

  def table(self) -> str:
    """The summary line, then a Markdown table per label (most gold brackets first)."""
    rows = [[label, c.gold, c.test, c.matched, number(c.precision, 2), number(c.recall, 2),
             number(c.f1, 2)]
            for label, c in sorted(self.per_label.items(), key=lambda item: -item[1].gold)]
    return (f"sentences {self.sentences}  precision {self.precision:.2f}  recall "
            f"{self.recall:.2f}  F1 {self.f1:.2f}  exact {self.exact_match:.2f}\n"
            + markdown(["label", "gold", "test", "matched", "P", "R", "F1"], rows))


def score_trees(gold: Sequence[Tree], test: Sequence[Tree], labeled: bool = True) -> Score:
  """evalb over parallel lists of trees (module docstring); ValueError on any mismatch."""
  if len(gold) != len(test):
    raise ValueError(f"{len(gold)} gold trees but {len(test)} test trees")
  score = Score()
  for index, (g, t) in enumerate(zip(gold, test)):
    g_words, t_words = g.leaves(), t.leaves()
    if len(g_words) != len(t_words):
      raise ValueError(f"sentence {index}: length mismatch ({len(g_words)} gold words, "
                       f"{len(t_words)} test words)")
    if g_words != t_words:
      at = next(k for k, (a, b) in enumerate(zip(g_words, t_words)) if a != b)
      raise ValueError(f"sentence {index}: words differ at word {at} "
                       f"({g_words[at]!r} gold, {t_words[at]!r} test)")
    g_brackets = collections.Counter(brackets(g, labeled=labeled))
    t_brackets = collections.Counter(brackets(t, labeled=labeled))
    matched = g_brackets & t_brackets
    n_gold, n_test, n_match = (sum(c.values()) for c in (g_brackets, t_brackets, matched))
    score.total.add(n_gold, n_test, n_match)
    score.sentences += 1
    score.exact += n_gold == n_test == n_match
    for counter, field in ((g_brackets, "gold"), (t_brackets, "test"), (matched, "matched")):
      for (_, _, label), count in counter.items():
        setattr(score.per_label[label], field, getattr(score.per_label[label], field) + count)
  return score


def read_trees(path: str) -> list[Tree]:
  return [tree for document in ptb.read_documents(path, sentences=True) for tree in document]


@cli.options
class EvalbOptions:
  """The flags of `python -m slm_jax.parser.evalb` (the module docstring)."""

  gold: str = cli.option(positional=True, help="gold PTB trees (a file or folder)")
  pred: str = cli.option(positional=True, help="predicted PTB trees, one per gold tree, same "
                         "order")
  per_label: bool = cli.option(False, help="print the per-label table")
  json: bool = cli.option(False, help="print the scores as JSON")
  unlabeled: bool = cli.option(False, help="ignore labels (LABELED 0)")


def score_files(options: EvalbOptions) -> Score:
  """The bracket scores of `options.pred` against `options.gold`."""
  return score_trees(read_trees(options.gold), read_trees(options.pred),
                     labeled=not options.unlabeled)


def main(argv: Iterable[str] | None = None) -> int:
  options = cli.parse_options(EvalbOptions, argv, prog="python -m slm_jax.parser.evalb",
                              doc=__doc__.split("\n\n", 1)[0])
  score = score_files(options)
  if options.json:
    print(json.dumps(score.to_json(), indent=1))
  else:
    print(score.table() if options.per_label else score.table().split("\n", 1)[0])
  return 0


if __name__ == "__main__":
  sys.exit(cli.run(main))
