"""Document perplexity with proposal marginalization (SPEC §9, paper Eq. 6-8 and App. B.4).

For a tree model, sentence i of a document gets up to K proposal trees; they are linearized in the
model's scheme and deduplicated as token sequences (so trees that NoONT or Compress project to the
same sequence count once). Its probability is

  p̃(x_i | h_i) = Σ_{z distinct} p(z | h_i)      (logsumexp; no parser weights, no division by K)

where p(z | h) sums the model's log-probabilities of the sentence's target tokens (SPEC §4: CNT2
under TG-family masks is not a target) and h_i = `<s>` ẑ_1 … ẑ_{i-1}, ẑ_j the highest-probability
distinct sequence of sentence j (ties: the first in proposal order). `</s>` belongs to the last
sentence. PPL = exp(−Σ log p̃ / M), M = terminal + EOS tokens.

`tree_scoring="terminal"` (tree models; the paper's `tree_eval_type=terminal`): a candidate
scores its terminal and EOS tokens only (structure as context) and a sentence takes its best
candidate's score instead of the sum; histories still follow the highest joint probability.

Terminal-format models (lin0, pause1/2, and lin1_shuf, which the paper scores in terminal format)
score each document's terminal-format sequence once, on its **terminal and EOS tokens** (SPEC §9,
paper §5.2: "terminal and pause-token models use their terminal-token likelihoods with the same
denominator": a pause model's pauses are context, not scored here, although SG and BLiMP score
them as trained; `docppl_mask`); M is the same terminal + EOS count as for tree models.

Scoring is batched across documents: all candidates of sentence position i of every document go
to the scorer in one call (the scorer splits them into batches).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np

from slm_jax.configurations import Configuration
from slm_jax.data.encode import encode_document
from slm_jax.eval.proposals import NoProposals, ProposalSource
from slm_jax.kinds import Kind
from slm_jax.linearize import Sequence as LinSequence
from slm_jax.structure import target_mask
from slm_jax.tokenizer import Tokenizer
from slm_jax.trees import Tree

def scoring_linearization(configuration: Configuration) -> str:
  """The scheme a model is scored in (the scheme table's `scored_as`: its own, except
  Tree-Shuffle, scored as terminals)."""
  return configuration.scheme.scored_as


TREE_SCORINGS = ("joint", "terminal")


def counted_tokens(kinds_T: np.ndarray, configuration: Configuration,
                   tree_scoring: str = "joint") -> np.ndarray:
  """[T] bool: the tokens whose log-probabilities form a sequence's score (BOS never counts).

  The configuration's targets (SPEC §4), for every model: a tree model's structural targets, a
  pause model's pauses, terminals and EOS, as trained (SPEC §9). `tree_scoring="terminal"`: a
  tree model's terminals and EOS only.
  """
  kinds = np.asarray(kinds_T)
  if tree_scoring not in TREE_SCORINGS:
    raise ValueError(f"tree_scoring must be one of {TREE_SCORINGS}, got {tree_scoring!r}")
  if tree_scoring == "terminal" and configuration.scheme.scored_with_structure:
    return (kinds == Kind.TERMINAL) | (kinds == Kind.EOS)
  segment = np.ones(len(kinds), dtype=np.int32)
  return np.asarray(target_mask(kinds, segment, configuration.linearization,
                                configuration.attention))


def docppl_mask(kinds_T: np.ndarray, configuration: Configuration) -> np.ndarray:
  """[T] bool: the tokens a terminal-format model's doc-PPL scores: its targets (SPEC §4) that
  are terminals or EOS (a pause model's pause positions are dropped; SPEC §9)."""
  kinds = np.asarray(kinds_T)
  return counted_tokens(kinds, configuration) & ((kinds == Kind.TERMINAL) | (kinds == Kind.EOS))


def sentence_ids(tree: Tree, tokenizer: Tokenizer, linearization: str) -> tuple[np.ndarray,
                                                                                np.ndarray]:
  """(ids, kinds) of one sentence in `linearization`, without `<s>`/`</s>`."""
  seq = encode_document([tree], tokenizer, linearization)
  return np.asarray(seq.tokens[1:-1], dtype=np.int32), np.asarray(seq.kinds[1:-1], dtype=np.int8)


def make_sequence(parts: Sequence[tuple[np.ndarray, np.ndarray]], tokenizer: Tokenizer,
                  eos: bool) -> LinSequence:
  """`<s>` + the concatenated (ids, kinds) parts (+ `</s>`) as a scorer input; sentence index of
  every token = its part's index (BOS with part 0, EOS with the last)."""
  ids = [np.array([tokenizer.bos_id], dtype=np.int32)] + [p[0] for p in parts]
  kinds = [np.array([Kind.BOS], dtype=np.int8)] + [p[1] for p in parts]
  sentence = [np.zeros(1, dtype=np.int32)] + [np.full(len(p[0]), n, dtype=np.int32)
                                               for n, p in enumerate(parts)]
  if eos:
    ids.append(np.array([tokenizer.eos_id], dtype=np.int32))
    kinds.append(np.array([Kind.EOS], dtype=np.int8))
    sentence.append(np.full(1, max(len(parts) - 1, 0), dtype=np.int32))
  tokens = np.concatenate(ids)
  return LinSequence(tokens, np.concatenate(kinds), np.concatenate(sentence),
                     np.arange(len(tokens), dtype=np.int32))


def distinct_candidates(trees: Sequence[Tree], tokenizer: Tokenizer,
                        linearization: str) -> list[tuple[np.ndarray, np.ndarray]]:
  """Linearized proposals with repeats removed (first occurrence kept), compared as sequences."""
  seen: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
  for tree in trees:
    ids, kinds = sentence_ids(tree, tokenizer, linearization)
    seen.setdefault(ids.tobytes() + b"|" + kinds.tobytes(), (ids, kinds))
  return list(seen.values())


def sequence_scores(scorer: Any, sequences: Sequence[LinSequence], masks: Sequence[np.ndarray],
                    *more_masks: Sequence[np.ndarray]) -> np.ndarray:
  """Σ log p over each sequence's `masks[n]` ([T] bool; position 0 is never scored), [N]; with
  `more_masks`, one row per mask list ([1 + len(more_masks), N]) from one scoring pass."""
  lists = (masks,) + more_masks
  out = np.empty((len(lists), len(sequences)))
  logprobs = scorer.logprobs(list(sequences)) if sequences else []
  for n, lp in enumerate(logprobs):
    lp = np.asarray(lp, dtype=np.float64)
    for row, mask_list in enumerate(lists):
      mask = mask_list[n]
      if lp.shape != (len(mask) - 1,):
        raise ValueError(f"scorer returned {lp.shape} log-probs for a sequence of {len(mask)} "
                         "tokens (expected one per token after the first)")
      out[row, n] = lp[mask[1:]].sum()
  return out if more_masks else out[0]


@dataclasses.dataclass
class DocPPLResult:
  ppl: float
  log_prob: float  # Σ log p̃ over all sentences (natural log)
  tokens: int  # M: terminal + EOS tokens
  documents: int
  sentences: int
  doc_log_prob: np.ndarray  # [D] per-document Σ log p̃ (for the bootstrap)
  doc_tokens: np.ndarray  # [D] per-document M
  proposals: int = 0  # proposal trees received (tree models)
  candidates: int = 0  # distinct linearized sequences scored
  truncated_histories: int = 0  # sentences whose history was cut to fit max_context

  def summary(self) -> dict:
    return {"ppl": self.ppl, "log_prob": self.log_prob, "tokens": self.tokens,
            "documents": self.documents, "sentences": self.sentences,
            "proposals": self.proposals, "distinct_candidates": self.candidates,
            "duplicates_after_linearization": self.proposals - self.candidates,
            "truncated_histories": self.truncated_histories}


def sentence_words(sentence: Tree | Sequence[str]) -> tuple[str, ...]:
  """A sentence's words: a tree's leaves, or the word list itself."""
  return tuple(sentence.leaves()) if isinstance(sentence, Tree) else tuple(sentence)


def doc_ppl(scorer: Any, documents: Sequence[Sequence[Tree | Sequence[str]]],
            tokenizer: Tokenizer, configuration: Configuration,
            proposals: ProposalSource | None = None, *, max_context: int | None = None,
            tree_scoring: str = "joint",
            progress: Callable[[str], None] | None = None) -> DocPPLResult:
  """SPEC §9 doc-PPL of `documents` (sentences as trees or word lists; only words are used).

  `proposals` is required for tree models. `max_context` (tokens) caps a scored sequence: the
  oldest history sentences are dropped (BOS kept) until it fits; such sentences are counted.
  `tree_scoring`: "joint" (default) or "terminal" (module docstring).
  """
  documents = [[sentence_words(s) for s in doc] for doc in documents]
  if any(not doc for doc in documents):
    raise ValueError("doc_ppl: a document has no sentences")
  if not configuration.scheme.scored_with_structure:
    return _terminal_doc_ppl(scorer, documents, tokenizer, configuration, max_context)
  if proposals is None:
    raise ValueError(f"doc_ppl: {configuration.name} is a tree model and needs proposals")
  proposals.prefetch(s for doc in documents for s in doc)
  lin = scoring_linearization(configuration)
  num = len(documents)
  history: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in documents]
  doc_lp = np.zeros(num)
  doc_tokens = np.zeros(num, dtype=np.int64)
  stats = dict(proposals=0, candidates=0, truncated=0, sentences=0)
  for position in range(max(len(d) for d in documents)):
    sequences, masks, reported, owner = [], [], [], []
    for d, doc in enumerate(documents):
      if position >= len(doc):
        continue
      words = doc[position]
      try:
        trees = proposals.proposals(words)
      except NoProposals as e:
        raise NoProposals(f"document {d}, sentence {position}: {e}") from e
      if not trees:
        raise NoProposals(f"document {d}, sentence {position}: no proposals")
      candidates = distinct_candidates(trees, tokenizer, lin)
      stats["proposals"] += len(trees)
      stats["candidates"] += len(candidates)
      stats["sentences"] += 1
      last = position == len(doc) - 1
      longest = max(len(c[0]) for c in candidates)
      hist = _fit(history[d], longest + 2, max_context)
      stats["truncated"] += len(hist) < len(history[d])
      start = 1 + sum(len(h[0]) for h in hist)
      for cand in candidates:
        seq = make_sequence(hist + [cand], tokenizer, eos=last)
        mask = counted_tokens(seq.kinds, configuration)
        mask[:start] = False
        shown = counted_tokens(seq.kinds, configuration, tree_scoring)
        shown[:start] = False
        sequences.append(seq)
        masks.append(mask)
        reported.append(shown)
        owner.append(d)
      doc_tokens[d] += int((candidates[0][1] == Kind.TERMINAL).sum()) + int(last)
    if progress:
      progress(f"doc-ppl: sentence position {position}: {len(sequences)} candidates")
    scores, shown_scores = sequence_scores(scorer, sequences, masks, reported)
    owner_arr = np.asarray(owner)
    cursor = 0
    for d in dict.fromkeys(owner):
      count = int((owner_arr == d).sum())
      lps = scores[cursor:cursor + count]
      doc_lp[d] += reduce_candidates(shown_scores[cursor:cursor + count], tree_scoring)
      best = int(np.argmax(lps))  # first maximum: ties go to proposal order
      seq = sequences[cursor + best]
      history[d].append(_last_part(seq, tokenizer))
      cursor += count
  return _result(doc_lp, doc_tokens, stats)


def reduce_candidates(scores: np.ndarray, tree_scoring: str = "joint") -> float:
  """A sentence's log p̃ from its distinct candidates' scores: their logsumexp (joint), or the
  best one (terminal-only scoring)."""
  return float(np.max(scores) if tree_scoring == "terminal" else np.logaddexp.reduce(scores))


def _fit(hist: list, needed: int, max_context: int | None) -> list:
  """The longest suffix of `hist` (whole sentences) that leaves room for `needed` tokens."""
  if max_context is None:
    return hist
  budget = max_context - needed
  kept = len(hist)
  total = sum(len(h[0]) for h in hist)
  while kept and total > budget:
    total -= len(hist[len(hist) - kept][0])
    kept -= 1
  return hist[len(hist) - kept:]


def _last_part(seq: LinSequence, tokenizer: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
  """The last sentence's (ids, kinds) of a scored sequence (without BOS/EOS)."""
  sentence = seq.sentence
  keep = (sentence == sentence[-1]) & (seq.kinds != Kind.BOS) & (seq.kinds != Kind.EOS)
  return np.asarray(seq.tokens[keep], dtype=np.int32), np.asarray(seq.kinds[keep], dtype=np.int8)


def _terminal_doc_ppl(scorer, documents, tokenizer, configuration, max_context) -> DocPPLResult:
  lin = scoring_linearization(configuration)
  sequences, masks = [], []
  doc_tokens = np.zeros(len(documents), dtype=np.int64)
  truncated = 0
  owner = []
  for d, doc in enumerate(documents):
    parts = [sentence_ids(Tree("S", words), tokenizer, lin) for words in doc]
    doc_tokens[d] = sum(int((p[1] == Kind.TERMINAL).sum()) for p in parts) + 1
    # Without a context cap: one sequence per document. With one: windows of whole sentences,
    # each scoring only its last sentence beyond the first window.
    if max_context is None or sum(len(p[0]) for p in parts) + 2 <= max_context:
      seq = make_sequence(parts, tokenizer, eos=True)
      sequences.append(seq)
      masks.append(docppl_mask(seq.kinds, configuration))
      owner.append(d)
      continue
    for i in range(len(parts)):
      hist = _fit(parts[:i], len(parts[i][0]) + 2, max_context)
      truncated += len(hist) < i
      seq = make_sequence(hist + [parts[i]], tokenizer, eos=i == len(parts) - 1)
      mask = docppl_mask(seq.kinds, configuration)
      mask[:1 + sum(len(h[0]) for h in hist)] = False
      sequences.append(seq)
      masks.append(mask)
      owner.append(d)
  scores = sequence_scores(scorer, sequences, masks)
  doc_lp = np.bincount(np.asarray(owner), weights=scores, minlength=len(documents))
  stats = dict(proposals=0, candidates=0, truncated=truncated,
               sentences=sum(len(d) for d in documents))
  return _result(doc_lp, doc_tokens, stats)


def _result(doc_lp: np.ndarray, doc_tokens: np.ndarray, stats: dict) -> DocPPLResult:
  total, tokens = float(doc_lp.sum()), int(doc_tokens.sum())
  return DocPPLResult(ppl=math.exp(-total / tokens), log_prob=total, tokens=tokens,
                      documents=len(doc_lp), sentences=stats["sentences"], doc_log_prob=doc_lp,
                      doc_tokens=doc_tokens, proposals=stats["proposals"],
                      candidates=stats["candidates"], truncated_histories=stats["truncated"])
