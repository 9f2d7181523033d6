"""What the parse-cache builder (`python -m slm_jax.gtca.cache`) reads besides JSON lines: a real
set's split in its Hugging Face layout, PTB files with their own trees, and the model-free
parsers of the weak-parser and random-tree ablations.

- `task_records`: the labeled examples of one split of a `slm_jax.gtca.mcqa_data` set as
  `(example id, record)` (the record `PromptFormat.prompt` reads; the id is the row's
  `file:row`, `file:row:blank` for a CLOTH passage), with the counts (rows, examples, unlabeled
  left out) for the builder's report (`task_summary`). CoLA: every sentence twice, alone (the
  threshold variant) and in its judgment prompt (id `…:judge`, the prompted 0/1 variant). BLiMP (read by
  `slm_jax.eval.blimp.load_blimp`, `limit` = pairs per paradigm): both sentences of every pair
  as sentence records, ids `UID:pair:good` / `UID:pair:bad`, counted as paradigms, pairs and
  sentences.
- `ptb_records`: every tree of PTB files/folders as a sentence record `{"sentence": words joined
  by spaces, "tree": the tree}` — the sentences the UUAS probe reads, read with the probe's
  normalization (POS preterminals kept), so its ids are the probe's ids.
- `WeakParser`: `right_branching` (`ablations.right_branching`) or `random`
  (`ablations.random_bracketing` with a generator seeded by the sha256 of the sentence's words,
  so a rebuilt cache holds the same trees); it has the parser interface the builder calls
  (`max_words`, `parse(list of word lists) -> trees`).
- `BeneparWords`: benepar (the `parse` extra; `slm_jax.parse.backends.BeneparBackend`, the
  parse stage's own backend) behind the same interface: the builder's PTB words are unescaped
  for benepar's encoder (`-LRB-` → `(`, `` `` `` → `"`), its output is read with SPEC §1
  normalization (`TOP`, POS preterminals dropped, like our parser's trees), and a tree whose
  leaves are not the input words is refused. Its identity (`benepar:<model>`) keys the cache.
"""

from __future__ import annotations

import collections
import hashlib
import pathlib
from typing import Sequence

import numpy as np

from slm_jax import ptb
from slm_jax import inputs
from slm_jax.parse import backends
from slm_jax.splitting import Sentence
from slm_jax.tokenizer_bases import ptb_unescape
from slm_jax.gtca import ablations
from slm_jax.gtca.mcqa_data import PAIRS, SENTENCE, load_set, set_of
from slm_jax.gtca.probe_trees import read_trees
from slm_jax.trees import Tree

WEAK_PARSERS = ("right_branching", "random")


def _shard(items: list, index: int, count: int) -> list:
  return [item for i, item in enumerate(items) if i % count == index]


def task_records(name: str, root: str | pathlib.Path, split: str | None, limit: int | None,
                 index: int = 0, count: int = 1) -> tuple[list[tuple[str, dict]],
                                                          collections.Counter]:
  """(id, record) of the labeled examples of this shard, and the split's counts."""
  loaded = load_set(name, root, split, limit=limit)
  examples = loaded.labeled()
  if set_of(name).kind == PAIRS:  # both sentences of every pair
    examples = [sentence for pair in examples for sentence in pair.sentences()]
  records = [(x.source, x.record()) for x in examples]
  if set_of(name).kind == SENTENCE:  # CoLA: the judgment prompts too (`--cola=prompt`)
    records += [(f"{x.source}:judge", x.judged_record()) for x in examples]
  counts = collections.Counter(loaded.counts)
  counts["split"] = loaded.split  # type: ignore[assignment]
  return _shard(records, index, count), counts


def task_summary(name: str, counts: collections.Counter) -> str:
  """The builder's line about what a `--task` split held (of all shards)."""
  if set_of(name).kind == PAIRS:
    return (f"{name} {counts['split']}: {counts['paradigms']} paradigms, {counts['pairs']} pairs,"
            f" {2 * counts['pairs']} sentences (good and bad of every pair)")
  return (f"{name} {counts['split']}: {counts['rows']} rows, {counts['examples']} examples, "
          f"{counts['unlabeled']} unlabeled left out")


def ptb_records(paths: Sequence[str], index: int = 0, count: int = 1
                ) -> list[tuple[str, dict]]:
  """(file:tree, sentence record with its tree) of every tree in these PTB files/folders."""
  files = [str(p) for p, _ in inputs.discover(list(paths), inputs.ptb_files(ptb.DEFAULT_PATTERNS))]
  if not files:
    raise FileNotFoundError(f"--ptb {', '.join(paths)}: no PTB files")
  records = []
  for path in files:
    trees = read_trees([path])  # as the probe reads them (POS layer kept)
    for number, tree in enumerate(trees):
      records.append((f"{path}:{number}", {"sentence": " ".join(tree.leaves()),
                                           "tree": tree.to_bracketed()}))
  return _shard(records, index, count)


def default_options(name: str | None, records: Sequence[tuple[str, dict]]) -> int:
  """Option letters a workdir's prompt tokenizer needs: the set's count, else the records'
  largest (at least 2, the toy task's)."""
  if name is not None and set_of(name).n_options:
    return set_of(name).n_options
  return max([2, *(len(r.get("options") or ()) for _, r in records)])


class WeakParser:
  """Trees without a model (module docstring)."""

  max_words = 1 << 20

  def __init__(self, kind: str):
    if kind not in WEAK_PARSERS:
      raise ValueError(f"weak parser {kind!r} is not one of {', '.join(WEAK_PARSERS)}")
    self.kind = kind

  def parse(self, sentences: Sequence[Sequence[str]]) -> list[Tree]:
    out = []
    for words in sentences:
      if self.kind == "right_branching":
        out.append(ablations.right_branching(list(words)))
      else:
        seed = int.from_bytes(hashlib.sha256("\0".join(words).encode()).digest()[:8], "little")
        out.append(ablations.random_bracketing(list(words), np.random.default_rng(seed)))
    return out


class BeneparWords:
  """benepar as the cache builder's parser (module docstring); `model` a name or a path."""

  max_words = 1 << 20  # benepar cuts nothing; its encoder's own limit raises per sentence

  def __init__(self, model: str | None = None):
    self.backend = backends.BeneparBackend(model or backends.BENEPAR_DEFAULT_MODEL)
    self.backend.load()  # a missing benepar or model fails here, before anything is built

  @property
  def identity(self) -> str:
    return self.backend.identity

  def parse(self, sentences: Sequence[Sequence[str]]) -> list[Tree]:
    """Trees over exactly these (PTB-escaped) words; a failure raises, so the builder retries
    the batch sentence by sentence and counts the one that fails."""
    batch = [Sentence(tuple(ptb_unescape(w) for w in words), (True,) * len(words), tuple(words))
             for words in sentences]
    out = []
    for words, result in zip(sentences, self.backend.parse(batch)):
      if isinstance(result, backends.ParseFailure):
        raise ValueError(f"benepar: {result.reason}")
      trees = ptb.parse_trees(result, source="benepar output")
      if len(trees) != 1 or trees[0].leaves() != list(words):
        raise ValueError(f"benepar returned {len(trees)} tree(s) whose leaves are not the input "
                         f"words {' '.join(words)[:80]!r}")
      out.append(trees[0])
    return out
