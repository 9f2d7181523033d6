"""BLiMP (SPEC §9, paper App. B.3): 67 paradigms × 1,000 minimal pairs, good vs bad sentence.

Data: `../shared/data/blimp/<UID>.jsonl`, one pair per line with `sentence_good`, `sentence_bad`,
`field`, `linguistics_term`, `UID`, `pairID`. Sentences are raw text; `word_tokenize` splits them
PTB-style (punctuation, `n't`, `'s`, …) before proposals and the tokenizer see them.

Each sentence is scored as a one-sentence document `<s> z </s>` (the `</s>` is scored, as in
doc-PPL). Terminal-format models score the words directly (K = 1), every position as trained:
terminal: terminals + EOS; pause: terminals, pauses and EOS (SPEC §9); Tree-Shuffle: its
terminals + EOS in lin0. Tree models score log p̃(x) = logsumexp over the distinct
linearizations (under the model's scheme) of the proposal trees of the words, each the sum over
the configuration's target tokens (`tree_scoring="terminal"`: the best candidate's terminal + EOS
log-probs, `docppl.counted_tokens`). A pair is right when p̃(good) > p̃(bad) and both are finite:
a tie or a non-finite score is wrong, and both are counted (`stats`: `ties`, `nonfinite_pairs`).
Accuracy (%) per paradigm, per field and per linguistics term (means over their paradigms) and
overall (mean over paradigms; equal to the pair mean when every paradigm has 1,000 pairs).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib
from typing import Any, Callable, Sequence

import numpy as np

from slm_jax import files
from slm_jax.configurations import Configuration
from slm_jax.eval.docppl import (counted_tokens, distinct_candidates,
                                 make_sequence, scoring_linearization, sentence_ids,
                                 sequence_scores)
from slm_jax.eval.proposals import ProposalSource
from slm_jax.splitting import ptb_words
from slm_jax.tokenizer import Tokenizer
from slm_jax.trees import Tree

NUM_PARADIGMS = 67
PAIRS_PER_PARADIGM = 1000

def word_tokenize(text: str) -> list[str]:
  """PTB-style words: `"Don't go," she said.` -> `` Do n't go , '' she said .`."""
  return ptb_words(text)


@dataclasses.dataclass
class Paradigm:
  uid: str
  field: str
  term: str
  good: list[str]  # raw sentences
  bad: list[str]

  def __len__(self) -> int:
    return len(self.good)


def load_blimp(directory: str | pathlib.Path, max_items: int | None = None) -> list[Paradigm]:
  """All `*.jsonl` paradigms of `directory`, sorted by UID (the first `max_items` pairs of each).

  Raises ValueError naming file:line for a malformed record.
  """
  directory = pathlib.Path(directory)
  found = sorted(directory.glob("*.jsonl"))
  if not found:
    raise FileNotFoundError(f"no BLiMP *.jsonl files in {directory}")
  paradigms = []
  for path in found:
    good, bad, meta = [], [], None
    for number, line in enumerate(files.read_lines(path), 1):
      if not line.strip():
        continue
      if max_items is not None and len(good) >= max_items:
        break
      try:
        record = json.loads(line)
        item = (record["sentence_good"], record["sentence_bad"], record["UID"], record["field"],
                record["linguistics_term"])
      except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{path}:{number}: not a BLiMP record ({e!r})") from e
      if meta is None:
        meta = item[2:]
      elif item[2:] != meta:
        raise ValueError(f"{path}:{number}: UID/field/term {item[2:]} differ from the file's "
                         f"first record {meta}")
      good.append(item[0])
      bad.append(item[1])
    if meta is None:
      raise ValueError(f"{path}: no pairs")
    paradigms.append(Paradigm(meta[0], meta[1], meta[2], good, bad))
  return sorted(paradigms, key=lambda p: p.uid)


def sentence_log_probs(scorer: Any, sentences: Sequence[Sequence[str]], tokenizer: Tokenizer,
                       configuration: Configuration, proposals: ProposalSource | None = None,
                       chunk: int = 2048, progress: Callable[[str], None] | None = None,
                       tree_scoring: str = "joint") -> tuple[np.ndarray, dict]:
  """log p̃ of each one-sentence document (words); (scores [N], stats: proposals, candidates)."""
  tree_model = configuration.scheme.scored_with_structure
  if tree_model and proposals is None:
    raise ValueError(f"{configuration.name} is a tree model: BLiMP needs a proposal source")
  lin = scoring_linearization(configuration)
  out = np.empty(len(sentences))
  stats = collections.Counter()
  if tree_model:
    proposals.prefetch(sentences)
  for begin in range(0, len(sentences), chunk):
    sequences, masks, owner = [], [], []
    for n in range(begin, min(begin + chunk, len(sentences))):
      words = tuple(sentences[n])
      if tree_model:
        trees = proposals.proposals(words)
        candidates = distinct_candidates(trees, tokenizer, lin)
        stats["proposals"] += len(trees)
      else:
        candidates = [sentence_ids(Tree("S", words), tokenizer, lin)]
      if not candidates:
        raise ValueError(f"no candidate sequence for the sentence {' '.join(words)!r}")
      stats["candidates"] += len(candidates)
      for cand in candidates:
        seq = make_sequence([cand], tokenizer, eos=True)
        sequences.append(seq)
        masks.append(counted_tokens(seq.kinds, configuration, tree_scoring))
        owner.append(n - begin)
    scores = sequence_scores(scorer, sequences, masks)
    owner_arr = np.asarray(owner)
    starts = np.flatnonzero(np.r_[True, owner_arr[1:] != owner_arr[:-1]])
    reduce = np.maximum if tree_scoring == "terminal" and tree_model else np.logaddexp
    out[begin:begin + len(starts)] = reduce.reduceat(scores, starts)
    if progress:
      progress(f"blimp: {min(begin + chunk, len(sentences))}/{len(sentences)} sentences")
  return out, dict(stats)


@dataclasses.dataclass
class BlimpResult:
  overall: float
  paradigms: dict[str, dict]  # uid -> {accuracy, field, term, pairs}
  fields: dict[str, float]
  terms: dict[str, float]
  correct: np.ndarray  # [pairs] bool, paradigms in UID order, pairs in file order
  paradigm_of_pair: np.ndarray  # [pairs] index into sorted UIDs
  stats: dict

  def summary(self) -> dict:
    return {"overall": self.overall, "fields": self.fields, "terms": self.terms,
            "paradigms": self.paradigms, "pairs": int(len(self.correct)), "stats": self.stats}


def evaluate_blimp(scorer: Any, tokenizer: Tokenizer, configuration: Configuration,
                   blimp_dir: str | pathlib.Path, proposals: ProposalSource | None = None, *,
                   max_items: int | None = None, tree_scoring: str = "joint",
                   progress: Callable[[str], None] | None = None,
                   paradigms: Sequence[Paradigm] | None = None,
                   done: dict[str, dict] | None = None,
                   on_paradigm: Callable[[str, dict], None] | None = None) -> BlimpResult:
  """Pair accuracy of a model on BLiMP (see module docstring). `paradigms`: already-read pairs
  (e.g. `slm_jax.eval.tfds_sets.blimp_pairs_from_tfds`) instead of `blimp_dir`'s jsonl files.
  Scored paradigm by paradigm (`score_paradigms`: `done` / `on_paradigm` keep finished ones)."""
  if paradigms is None:
    paradigms = load_blimp(blimp_dir, max_items)
  paradigms = list(paradigms)

  def score(sentences: list[str]) -> tuple[np.ndarray, dict]:
    index: dict[tuple[str, ...], int] = {}
    rows = [index.setdefault(tuple(word_tokenize(s)), len(index)) for s in sentences]
    scores, stats = sentence_log_probs(scorer, list(index), tokenizer, configuration, proposals,
                                       progress=progress, tree_scoring=tree_scoring)
    return scores[np.asarray(rows, int)], stats

  good, bad, which, stats = score_paradigms(paradigms, score, done=done, on_paradigm=on_paradigm)
  correct, ties, nonfinite = pair_verdicts(good, bad)
  unique = {tuple(word_tokenize(x)) for p in paradigms for x in (*p.good, *p.bad)}
  stats.update(unique_sentences=len(unique), pairs=len(correct), ties=ties,
               nonfinite_pairs=nonfinite, tree_scoring=tree_scoring)
  return summarize(paradigms, correct, which, stats)


def score_paradigms(paradigms: Sequence[Paradigm],
                    score: Callable[[list[str]], tuple[np.ndarray, dict]], *,
                    done: dict[str, dict] | None = None,
                    on_paradigm: Callable[[str, dict], None] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
  """(good [N], bad [N], paradigm index [N], summed stats) of every pair, paradigm by paradigm:
  `score(sentences)` → (a score per sentence, stats) of one paradigm's distinct sentences. A
  paradigm in `done` (uid → {"good", "bad", "stats"}: a killed evaluation's,
  `eval.sg_partial.InFlight`) with its pair count is taken as it is; every paradigm scored here
  is handed to `on_paradigm(uid, record)` (kept, and the progress line)."""
  done = done or {}
  good, bad, which = [], [], []
  stats: collections.Counter = collections.Counter()
  for p_index, paradigm in enumerate(paradigms):
    record = done.get(paradigm.uid)
    if record is None or len(record.get("good", ())) != len(paradigm):
      sentences = list(dict.fromkeys([*paradigm.good, *paradigm.bad]))
      scores, counts = score(sentences)
      of = dict(zip(sentences, np.asarray(scores, np.float64).tolist()))
      record = {"good": [of[s] for s in paradigm.good], "bad": [of[s] for s in paradigm.bad],
                "stats": {k: v for k, v in counts.items() if isinstance(v, (int, float))}}
      if on_paradigm is not None:
        on_paradigm(paradigm.uid, record)
    good += record["good"]
    bad += record["bad"]
    which += [p_index] * len(record["good"])
    stats.update(record["stats"])
  return (np.asarray(good, np.float64), np.asarray(bad, np.float64), np.asarray(which, int),
          dict(stats))


def pair_verdicts(good_N: np.ndarray, bad_N: np.ndarray) -> tuple[np.ndarray, int, int]:
  """(correct [N] bool, ties, non-finite pairs): right iff good > bad with both finite; a tie
  (equal finite scores) and a pair with a non-finite score are wrong (SPEC §9)."""
  good, bad = np.asarray(good_N, np.float64), np.asarray(bad_N, np.float64)
  finite = np.isfinite(good) & np.isfinite(bad)
  return finite & (good > bad), int((finite & (good == bad)).sum()), int((~finite).sum())


def summarize(paradigms: Sequence[Paradigm], correct: np.ndarray, which: np.ndarray,
              stats: dict | None = None) -> BlimpResult:
  """Accuracies (%) per paradigm, field, term and overall from per-pair correctness."""
  per = {}
  for p_index, p in enumerate(paradigms):
    hits = correct[which == p_index]
    per[p.uid] = {"accuracy": 100.0 * float(hits.mean()) if len(hits) else float("nan"),
                  "field": p.field, "term": p.term, "pairs": int(len(hits))}
  fields: dict[str, list[float]] = collections.defaultdict(list)
  terms: dict[str, list[float]] = collections.defaultdict(list)
  for p in paradigms:
    fields[p.field].append(per[p.uid]["accuracy"])
    terms[p.term].append(per[p.uid]["accuracy"])
  overall = float(np.mean([v["accuracy"] for v in per.values()]))
  return BlimpResult(overall, per, {k: float(np.mean(v)) for k, v in sorted(fields.items())},
                     {k: float(np.mean(v)) for k, v in sorted(terms.items())}, correct, which,
                     dict(stats or {}))
