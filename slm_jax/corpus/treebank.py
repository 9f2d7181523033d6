"""The embedded treebank: documents of gold trees sampled from the project's PCFG.

The default training corpus when a user names none. Sentences are sampled top-down from the compiled
grammar (`slm_jax.corpus.grammar`, data in `data/english.grammar` and `data/english.lexicon`);
a sample with more than `max_words` leaves (punctuation included) is thrown away and drawn again.
Because that rejection depends only on the words, the trees are distributed exactly as the PCFG's
posterior P(tree | words): an inside-algorithm sampler over the same grammar is a valid oracle.
Every sentence ends with "." (questions with "?") as the last child of its root S (SQ).

Determinism: document i of a stream is drawn from `numpy.random.default_rng(SeedSequence([seed,
stream, i]))`, so it does not depend on how many documents are generated (data can be sharded).
Splits use disjoint streams: train 0, validation 1, test 2.

CLI: `python -m slm_jax.corpus.treebank --documents=N --seed=S [--split=train] [--out FILE]`
prints one bracketed tree per line and a blank line between documents.
"""

from __future__ import annotations

import bisect
import dataclasses
import sys
import weakref
from typing import Sequence

import numpy as np

from slm_jax import cli
from slm_jax.corpus.grammar import HIDDEN, LEXICAL, PHRASE, Pcfg, default_grammar
from slm_jax.trees import Tree

SPLITS = {"train": 0, "validation": 1, "test": 2}
MAX_WORDS = 40
MIN_SENTENCES = 3
MAX_SENTENCES = 12
_BLOCK = 256
_MAX_TRIES = 10_000


class _TooLong(Exception):
  pass


class _Uniforms:
  """Uniform draws from a numpy Generator, fetched in blocks for speed (deterministic)."""

  def __init__(self, rng: np.random.Generator):
    self.rng = rng
    self.buf: list[float] = []
    self.pos = 0

  def next(self) -> float:
    if self.pos == len(self.buf):
      self.buf = self.rng.random(_BLOCK).tolist()
      self.pos = 0
    self.pos += 1
    return self.buf[self.pos - 1]


class Sampler:
  """Top-down sampler over a compiled grammar, with integer-indexed tables."""

  def __init__(self, grammar: Pcfg):
    names = list(grammar.nonterminals)
    index = {nt: i for i, nt in enumerate(names)}
    self.names = names
    self.start = index[grammar.start]
    kind_code = {PHRASE: 0, HIDDEN: 1, LEXICAL: 2}
    self.kind = [kind_code[grammar.kinds[nt]] for nt in names]
    self.label = [grammar.labels.get(nt, "") for nt in names]
    self.cum: list[list[float]] = []
    self.choices: list[list] = []
    for nt in names:
      if grammar.kinds[nt] == LEXICAL:
        pairs = [(r.prob, r.word) for r in grammar.lexical_by_lhs[nt]]
      else:
        pairs = [(r.prob, tuple(index[s] for s in r.rhs)) for r in grammar.rules_by_lhs[nt]]
      total, cum = 0.0, []
      for p, _ in pairs:
        total += p
        cum.append(total)
      cum[-1] = 2.0  # uniforms are < 1: never fall off the end through rounding
      self.cum.append(cum)
      self.choices.append([c for _, c in pairs])

  def sentence(self, uniforms: _Uniforms, max_words: int = MAX_WORDS,
               derivation: bool = False) -> Tree:
    """One tree (or its derivation, labels = nonterminals); long samples are redrawn."""
    for _ in range(_MAX_TRIES):
      self.budget = max_words
      try:
        if derivation:
          return self._derive(self.start, uniforms)
        (tree,) = self._expand(self.start, uniforms)
        return tree
      except _TooLong:
        continue
    raise RuntimeError(f"no sentence of at most {max_words} words in {_MAX_TRIES} tries")

  def _pick(self, nt: int, uniforms: _Uniforms):
    choices = self.choices[nt]
    if len(choices) == 1:
      return choices[0]
    return choices[bisect.bisect_right(self.cum[nt], uniforms.next())]

  def _expand(self, nt: int, uniforms: _Uniforms) -> list:
    kind = self.kind[nt]
    if kind == 2:
      self.budget -= 1
      if self.budget < 0:
        raise _TooLong
      return [self._pick(nt, uniforms)]
    kids = []
    for child in self._pick(nt, uniforms):
      kids.extend(self._expand(child, uniforms))
    if kind == 1:
      return kids
    return [Tree(self.label[nt], tuple(kids))]

  def _derive(self, nt: int, uniforms: _Uniforms) -> Tree:
    if self.kind[nt] == 2:
      self.budget -= 1
      if self.budget < 0:
        raise _TooLong
      return Tree(self.names[nt], (self._pick(nt, uniforms),))
    return Tree(self.names[nt], tuple(self._derive(c, uniforms) for c in self._pick(nt, uniforms)))


_SAMPLERS: weakref.WeakKeyDictionary[Pcfg, Sampler] = weakref.WeakKeyDictionary()


def _sampler(grammar: Pcfg | None) -> Sampler:
  grammar = grammar or default_grammar()
  if grammar not in _SAMPLERS:
    _SAMPLERS[grammar] = Sampler(grammar)
  return _SAMPLERS[grammar]


def generate_sentence(rng: np.random.Generator, grammar: Pcfg | None = None, *,
                      max_words: int = MAX_WORDS, derivation: bool = False) -> Tree:
  """One sentence tree; with `derivation=True` the full derivation (nonterminal labels such as
  `NP[sg]`, words under preterminals) that `grammar.to_output_tree` maps to the same tree."""
  return _sampler(grammar).sentence(_Uniforms(rng), max_words, derivation)


def generate_document(rng: np.random.Generator, min_sentences: int = MIN_SENTENCES,
                      max_sentences: int = MAX_SENTENCES, grammar: Pcfg | None = None, *,
                      max_words: int = MAX_WORDS, derivation: bool = False) -> list[Tree]:
  """A document: a uniform number in [min_sentences, max_sentences] of independent sentences."""
  if not 1 <= min_sentences <= max_sentences:
    raise ValueError("need 1 <= min_sentences <= max_sentences, got "
                     f"{min_sentences}, {max_sentences}")
  sampler = _sampler(grammar)
  count = int(rng.integers(min_sentences, max_sentences + 1))
  uniforms = _Uniforms(rng)
  return [sampler.sentence(uniforms, max_words, derivation) for _ in range(count)]


def document_rng(seed: int, index: int, stream: int = 0) -> np.random.Generator:
  """The generator of document `index` of `stream` (independent of every other document)."""
  if min(seed, index, stream) < 0:
    raise ValueError("seed, index and stream must be non-negative")
  return np.random.default_rng(np.random.SeedSequence([seed, stream, index]))


def generate_documents(num_documents: int, seed: int = 0, *, start: int = 0, stream: int = 0,
                       min_sentences: int = MIN_SENTENCES, max_sentences: int = MAX_SENTENCES,
                       grammar: Pcfg | None = None, max_words: int = MAX_WORDS,
                       derivation: bool = False) -> list[list[Tree]]:
  """Documents `start .. start + num_documents - 1` of `stream`, deterministic for `seed`."""
  return [generate_document(document_rng(seed, i, stream), min_sentences, max_sentences, grammar,
                            max_words=max_words, derivation=derivation)
          for i in range(start, start + num_documents)]


def embedded_corpus(split: str, num_documents: int, seed: int = 0, *, start: int = 0,
                    **kwargs) -> list[list[Tree]]:
  """Documents of a standard split (`train`, `validation`, `test`), each from its own stream."""
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
  return generate_documents(num_documents, seed, start=start, stream=SPLITS[split], **kwargs)


@dataclasses.dataclass(frozen=True)
class EmbeddedTreebank:
  """A standard train/validation/test corpus; sizes in documents."""
  train_documents: int = 10_000
  validation_documents: int = 500
  test_documents: int = 500
  seed: int = 0

  def split(self, name: str) -> list[list[Tree]]:
    sizes = {"train": self.train_documents, "validation": self.validation_documents,
             "test": self.test_documents}
    if name not in sizes:
      raise ValueError(f"unknown split {name!r}; expected one of {', '.join(sizes)}")
    return embedded_corpus(name, sizes[name], self.seed)


def write_documents(documents: Sequence[Sequence[Tree]], out) -> None:
  """One bracketed tree per line, a blank line between documents."""
  for i, doc in enumerate(documents):
    if i:
      out.write("\n")
    for tree in doc:
      out.write(tree.to_bracketed() + "\n")


@cli.options
class TreebankOptions:
  """Print documents of the embedded treebank."""

  documents: int = cli.option(10, help="number of documents")
  seed: int = cli.option(0)
  split: str = cli.option("train", choices=sorted(SPLITS))
  start: int = cli.option(0, help="index of the first document")
  min_sentences: int = cli.option(MIN_SENTENCES)
  max_sentences: int = cli.option(MAX_SENTENCES)
  out: str | None = cli.option(None, help="output file (default: stdout)")


def write_corpus(options: TreebankOptions) -> None:
  """Writes the documents `options` asks for to `options.out` (or stdout)."""
  docs = embedded_corpus(options.split, options.documents, options.seed, start=options.start,
                         min_sentences=options.min_sentences, max_sentences=options.max_sentences)
  if options.out:
    with open(options.out, "w", encoding="utf-8") as out:
      write_documents(docs, out)
  else:
    write_documents(docs, sys.stdout)


def _main(argv: Sequence[str] | None) -> int:
  write_corpus(cli.parse_options(TreebankOptions, argv, doc=TreebankOptions.__doc__))
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  raise SystemExit(main())
