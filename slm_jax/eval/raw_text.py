"""Raw-text scoring with a pretrained checkpoint (SPEC §13): text as the model was trained on it.

A sentence is scored as written: the checkpoint's own tokenizer encodes it in one piece (no PTB
word split, no space before punctuation, no `n't` split, no chat template, no reserved structural
tokens), after one prefix token — the checkpoint's BOS (the token its tokenizer adds, or the
`bos_token` it defines), else its EOS: lm-evaluation-harness's `prefix_token_id` — and lm-eval's
target delimiter, one space (`LEADING`: its BLiMP task scores the continuation " " + sentence
after an empty context), so a BLiMP subset gives lm-eval's log-probs and verdicts pair for pair.
The prefix token is context and never scored; every token of " " + sentence is.

Regions (SyntaxGym): the non-empty regions are joined by one space (after `LEADING`); region k
owns the characters from the end of region k−1 (its leading space included) to its own end, and a token belongs to
the region holding its last character (`token_regions`, by the tokenizer's character offsets).
A region's log-prob is the sum over its tokens; a token whose characters start in an earlier
region is counted in `stats["straddling_tokens"]` (it still belongs to one region only).

- `RawTextScorer(model, tokenizer, batch_size)`: `text_log_probs(texts)` → (log p [N] natural,
  scored tokens [N]); `region_log_probs(sentences)` → per sentence log p of each region;
  `prefix_fn` (the `eval.syntaxgym` prefix function over region texts: cumulative region
  log-probs); `encode(text)` → (ids, offsets). Batched by `inference.text_scorer.TextScorer`.
  For doc-PPL (`eval.raw_docppl`) and the multiple-choice tasks (prompts encoded by
  `downstream.raw_text_prompts.RawTextEncoder`, then scored by `downstream.scoring` as for every
  model) it also scores whole token sequences: `logprobs(sequences)` and `target_mask(kinds)`
  (every token but the prefix).
- `evaluate_blimp_raw(scorer, paradigms)`: BLiMP pair accuracy on raw sentences (verdicts and
  summaries: `eval.blimp`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from slm_jax.eval.blimp import BlimpResult, Paradigm, pair_verdicts, score_paradigms, summarize
from slm_jax.inference.text_scorer import TextScorer
from slm_jax.kinds import Kind

REGION_SEPARATOR = " "
LEADING = " "  # lm-evaluation-harness's target delimiter before a scored continuation


def prefix_id(tokenizer: Any) -> int:
  """The token every scored text follows: the checkpoint's BOS, else its EOS (lm-eval's rule)."""
  for token_id in (tokenizer.bos_id, tokenizer.eos_id):
    if token_id is not None:
      return int(token_id)
  raise ValueError(f"{tokenizer.folder}: the checkpoint defines neither a BOS nor an EOS token: "
                   "raw-text scoring needs one to condition the first token on")


def region_units(content: str) -> list[str]:
  """A SyntaxGym region as one scoring unit: its stripped text ([] when empty)."""
  content = content.strip()
  return [content] if content else []


def token_regions(offsets_T2: np.ndarray, region_ends_R: np.ndarray) -> np.ndarray:
  """The region index of each token: the region holding its last character (see module doc).
  `offsets_T2`: [start, end) characters per token; `region_ends_R`: each region's end."""
  last_T = np.maximum(np.asarray(offsets_T2)[:, 1] - 1, np.asarray(offsets_T2)[:, 0])
  return np.searchsorted(np.asarray(region_ends_R), last_T, side="right")


class RawTextScorer:
  """Per-token log-probs of raw text under a checkpoint (see the module docstring)."""

  def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 32,
               configuration: Any = None):
    self.tokenizer = tokenizer
    self.configuration = configuration  # what the item files record (`downstream.scoring`)
    self.prefix_id = prefix_id(tokenizer)
    self.text_scorer = TextScorer(model, batch_size=batch_size)
    self.stats: dict[str, int] = {"straddling_tokens": 0}

  def encode(self, text: str, leading: str = LEADING) -> tuple[np.ndarray, np.ndarray]:
    """(ids [T], character offsets [T, 2] into `text`) of `leading` + `text`, no special
    tokens added (the delimiter's characters have negative offsets)."""
    encoding = self.tokenizer.tokenizer.encode(leading + text, add_special_tokens=False)
    offsets = np.asarray(encoding.offsets, np.int64).reshape(-1, 2) - len(leading)
    return np.asarray(encoding.ids, np.int64), offsets

  def logprobs(self, sequences: Sequence[Any]) -> list[np.ndarray]:
    """log p of tokens[1:] of each token sequence (`.tokens`, e.g. a `linearize.Sequence` whose
    first token is the prefix; `inference.scorer.Scorer.logprobs`' contract) [T-1]."""
    return [s.logprobs for s in self.text_scorer.score([np.asarray(q.tokens) for q in sequences])]

  def target_mask(self, kinds_T: np.ndarray) -> np.ndarray:
    """[T] bool: the tokens a score may count — all but the prefix token (kind BOS)."""
    return np.asarray(kinds_T) != Kind.BOS

  def token_log_probs(self, texts: Sequence[str]) -> list[np.ndarray]:
    """log p of every token of each text given the prefix token and the tokens before it."""
    return self._score(texts, [self.encode(t)[0] for t in texts])

  def _score(self, texts: Sequence[str], encoded: Sequence[np.ndarray]) -> list[np.ndarray]:
    empty = [i for i, ids in enumerate(encoded) if not len(ids)]
    if empty:
      raise ValueError(f"text {empty[0]} ({texts[empty[0]]!r}) has no tokens to score")
    scored = self.text_scorer.score([np.r_[self.prefix_id, ids] for ids in encoded])
    return [s.logprobs for s in scored]

  def text_log_probs(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(log p of each whole text [N], its scored token count [N])."""
    rows = self.token_log_probs(texts)
    return (np.array([r.sum() for r in rows], np.float64),
            np.array([len(r) for r in rows], np.int64))

  def region_log_probs(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """Per sentence (a list of non-empty region texts) the log p of each region [R]."""
    texts, ends = [], []
    for regions in sentences:
      lengths = np.array([len(r) for r in regions], np.int64)
      if not len(lengths) or (lengths == 0).any():
        raise ValueError(f"regions {list(regions)!r}: every region must be non-empty text")
      texts.append(REGION_SEPARATOR.join(regions))
      ends.append(np.cumsum(lengths + len(REGION_SEPARATOR)) - len(REGION_SEPARATOR))
    encoded = [self.encode(t) for t in texts]
    out = []
    for (_, offsets), ends_R, logp_T in zip(encoded, ends,
                                           self._score(texts, [ids for ids, _ in encoded])):
      owner_T = token_regions(offsets, ends_R)
      starts_R = np.r_[-len(LEADING), ends_R[:-1]]  # region 1 owns the delimiter
      self.stats["straddling_tokens"] += int((offsets[:, 0] < starts_R[owner_T]).sum())
      out.append(np.bincount(owner_T, weights=logp_T, minlength=len(ends_R)))
    return out

  def prefix_fn(self, sentences: list[list[str]]) -> list[np.ndarray]:
    """`eval.syntaxgym`'s prefix function over region units (`region_units`): ℓ(k) = log p of
    regions 1..k, k = 1..R."""
    return [np.cumsum(r) for r in self.region_log_probs(sentences)]


def evaluate_blimp_raw(scorer: RawTextScorer, paradigms: Sequence[Paradigm], *,
                       done: dict[str, dict] | None = None,
                       on_paradigm: Callable[[str, dict], None] | None = None) -> BlimpResult:
  """BLiMP pair accuracy with every sentence scored as raw text (SPEC §13; `eval.blimp` rules:
  right iff log p(good) > log p(bad), both finite; ties and non-finite pairs counted), paradigm by
  paradigm (`eval.blimp.score_paradigms`: `done` / `on_paradigm` keep finished ones)."""
  paradigms = list(paradigms)

  def score(sentences: list[str]) -> tuple[np.ndarray, dict]:
    scores, tokens = scorer.text_log_probs(sentences)
    return scores, {"scored_tokens": int(np.asarray(tokens).sum())}

  good, bad, which, counts = score_paradigms(paradigms, score, done=done, on_paradigm=on_paradigm)
  correct, ties, nonfinite = pair_verdicts(good, bad)
  unique = {x for p in paradigms for x in (*p.good, *p.bad)}
  stats = dict(unique_sentences=len(unique), pairs=len(correct), ties=ties,
               nonfinite_pairs=nonfinite, scored_tokens=int(counts.get("scored_tokens", 0)),
               scoring="raw text", prefix_token=scorer.prefix_id)
  result = summarize(paradigms, correct, which, stats)
  result.stats["pair_log_probs"] = {"good": good.tolist(), "bad": bad.tolist()}
  return result
