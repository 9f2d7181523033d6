"""XSum / BoolQ fine-tuning data: `TaskExample` → one row per example → fixed-shape batches.

Text components (SPEC §11: every component, template text included, is parsed and linearized;
`slm_jax.downstream.encoding.TextEncoder` turns them into one `Sequence` with the component of
every token; components carry their own leading separator, as in `downstream.prompts`):

  xsum   (article, "⏎" + XSUM_INSTRUCTION, "⏎" + summary) + EOS; loss on the summary + EOS
  boolq  the zero-shot evaluation prompt `prompts.item_context` ("{passage}⏎Question: {q}?⏎
         Answer:") + its gold continuation `prompts.continuation` (" yes" / " no"), no EOS;
         loss on the answer tokens — so fine-tuning sees exactly what scoring reads

The instruction is `XSUM_INSTRUCTION` = "Summarize the article in one sentence." (one parsed
sentence; `xsum_context(article)` is the prompt the generation code should feed).

The loss mask is the run's own SPEC §4 target mask (`structure.target_mask`: for tree models the
component's whole linearization, structure included, as in pre-training; no CNT2 under TG
attentions; no NTs for lin1_shuf) AND "the token belongs to the loss component" (or is the EOS).
It travels as `Batch.targets`, so `train.steps.make_train_step` needs no change.

Truncation (SPEC §11, "article truncated to fit 2,048 with the summary"): an XSum row longer
than `max_len` loses the END of its article, never the instruction or the summary: whole
trailing sentences of the article are dropped while at least one sentence still fits, so every
kept tree is complete; if not even the first sentence fits, its first tokens are kept (a token
cut, counted separately). An example whose instruction + summary alone do not fit, a BoolQ row
longer than `max_len` (its passage, question and cue are one component; cutting its end would
drop the question) and an example with an empty component (XSum has empty articles) are dropped.
`RowStats` counts all of them.

Batching: one example per row (no packing: each row is segment 1, padding segment 0), rows padded
to `buckets.bucket(longest, least=64, cap=max_len)` tokens and every batch to `batch_size` rows
(all-padding rows, no targets, at the end of an epoch), so the train step compiles once per
length bucket. The rows of step k are a pure function of (seed, k): epoch e = k // steps_per_epoch
reads `default_rng([seed, e]).permutation(n)`, so a resumed run sees the batches it would have.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Sequence as SequenceT

import numpy as np

from slm_jax.buckets import bucket
from slm_jax.configurations import Configuration
from slm_jax.data.loader import Batch
from slm_jax.downstream.example import TaskExample
from slm_jax.downstream.prompts import continuation, item_context
from slm_jax.kinds import Kind

FINETUNE_TASKS = ("xsum", "boolq")
# The files of a fine-tuned seed folder (`finetune.trainer` writes them, `downstream.run` and
# `evaluation.inputs` read them): its settings record, and the summary of a finished seed.
SETTINGS_FILE = "finetune.json"
SUMMARY_FILE = "summary.json"
XSUM_INSTRUCTION = "Summarize the article in one sentence."
LENGTH_BUCKET_LEAST = 64


def xsum_context(article: str) -> tuple[str, str]:
  """The XSum prompt before the summary: the article, then the instruction on its own line
  (components carry their leading separator, as in `downstream.prompts`)."""
  return (article, "\n" + XSUM_INSTRUCTION)


@dataclasses.dataclass(frozen=True)
class TaskRow:
  """How one example becomes a row: its components, the one with the loss, whether EOS ends it,
  and the component whose end may be cut to fit (None: a row too long is dropped)."""
  components: tuple[str, ...]
  loss_component: int
  eos: bool
  truncatable: int | None


def task_row(example: TaskExample) -> TaskRow:
  """XSum: article + instruction + summary + EOS, the article truncatable; BoolQ: the zero-shot
  evaluation prompt of `prompts.item_context` + its gold continuation (" yes" / " no")."""
  if example.task == "xsum":
    return TaskRow(xsum_context(example.question) + ("\n" + example.options[0],), 2, True, 0)
  if example.task == "boolq":
    if example.answer < 0:
      raise ValueError(f"{example.source}: an unlabeled BoolQ example cannot be trained on")
    context = item_context(example, example.answer)
    return TaskRow(context + (continuation(example, example.answer),), len(context), False, None)
  raise ValueError(f"{example.source}: fine-tuning covers {', '.join(FINETUNE_TASKS)}, "
                   f"not {example.task!r}")


@dataclasses.dataclass(frozen=True)
class FinetuneRow:
  """One example: tokens_T (int32), kinds_T (int8), loss_T (bool: summary/answer/EOS tokens)."""
  tokens: np.ndarray
  kinds: np.ndarray
  loss: np.ndarray
  source: str

  def __len__(self) -> int:
    return int(self.tokens.shape[0])


@dataclasses.dataclass
class RowStats:
  """What encoding did to the examples (SPEC §8: drops and cuts are counted, never silent)."""
  examples: int = 0
  rows: int = 0
  truncated: int = 0  # rows whose article lost trailing sentences or tokens
  token_cut: int = 0  # of those: not even the article's first sentence fit, cut inside it
  tokens_removed: int = 0
  dropped_too_long: int = 0  # longer than max_len without the article (or BoolQ: at all)
  dropped_empty: int = 0  # a component without a word (e.g. an empty XSum article)
  longest: int = 0  # tokens of the longest row kept

  def summary(self) -> str:
    return (f"{self.rows:,} rows of {self.examples:,} examples; {self.truncated:,} truncated "
            f"({self.token_cut:,} inside the article's first sentence, {self.tokens_removed:,} "
            f"tokens removed); dropped {self.dropped_too_long:,} too long, {self.dropped_empty:,} "
            f"with an empty component; longest row {self.longest} tokens")

  def to_dict(self) -> dict[str, int]:
    return dataclasses.asdict(self)


def truncation_keep(component_T: np.ndarray, sentence_T: np.ndarray, max_len: int,
                    truncatable: int | None) -> tuple[np.ndarray | None, bool]:
  """(positions to keep, whether the cut is inside a sentence) for a row of len(component_T)
  tokens: trailing sentences of component `truncatable` go first, then (only if none of them
  fits whole) its last tokens. (None, False) when the other tokens alone exceed `max_len`."""
  length = len(component_T)
  if length <= max_len:
    return np.arange(length), False
  if truncatable is None:
    return None, False
  cut = component_T == truncatable
  budget = max_len - int((~cut).sum())
  if budget <= 0:
    return None, False
  keep = np.ones(length, bool)
  sentences = sentence_T[cut]
  fitting = [s for s in np.unique(sentences) if int((sentences <= s).sum()) <= budget]
  if fitting:
    keep &= ~(cut & (sentence_T > fitting[-1]))
    return np.flatnonzero(keep), False
  keep[np.flatnonzero(cut)[budget:]] = False
  return np.flatnonzero(keep), True


def example_row(encoded, task: TaskRow, max_len: int, source: str,
                stats: RowStats) -> FinetuneRow | None:
  """The row of one `encoding.Encoded` (see the module docstring), None when it cannot fit."""
  sequence, component_T = encoded.sequence, np.asarray(encoded.component_T)
  keep, token_cut = truncation_keep(component_T, np.asarray(sequence.sentence), max_len,
                                    task.truncatable)
  if keep is None:
    stats.dropped_too_long += 1
    return None
  if len(keep) < len(component_T):
    stats.truncated += 1
    stats.token_cut += int(token_cut)
    stats.tokens_removed += len(component_T) - len(keep)
  kinds = np.asarray(sequence.kinds, np.int8)[keep]
  loss = (component_T[keep] == task.loss_component) | (kinds == Kind.EOS)
  stats.rows += 1
  stats.longest = max(stats.longest, len(keep))
  return FinetuneRow(np.asarray(sequence.tokens, np.int32)[keep], kinds, loss, source)


Encode = Callable[..., object]  # encoding.TextEncoder.encode: (components, *, eos) -> Encoded
PREFETCH_EXAMPLES = 256  # examples whose sentences a batched tree source parses together


def encode_rows(examples: Iterable[TaskExample], encode: Encode, max_len: int, *,
                prefetch: Callable[[Iterable[str]], None] | None = None,
                log: Callable[[str], None] | None = None,
                log_every: int = 10_000) -> tuple[list[FinetuneRow], RowStats]:
  """The fine-tuning rows of `examples` (in order) and what was cut or dropped. `prefetch`
  (`TextEncoder.prefetch`) is told each next `PREFETCH_EXAMPLES` examples' texts first, so a
  parser tree source parses them in batches; `log` gets a progress line every `log_every`."""
  rows, stats, examples = [], RowStats(), list(examples)
  for start in range(0, len(examples), PREFETCH_EXAMPLES):
    chunk = [(x, task_row(x)) for x in examples[start:start + PREFETCH_EXAMPLES]]
    if prefetch is not None:
      prefetch(text for _, task in chunk for text in task.components if text.strip())
    for example, task in chunk:
      stats.examples += 1
      if any(not text.strip() for text in task.components):
        stats.dropped_empty += 1
      else:
        row = example_row(encode(list(task.components), eos=task.eos), task, max_len,
                          example.source, stats)
        if row is not None:
          rows.append(row)
      if log is not None and stats.examples % log_every == 0:
        log(f"encoded {stats.examples:,}/{len(examples):,} examples")
  return rows, stats


class FinetuneBatches:
  """Fixed-shape batches of `rows` for step k = 0, 1, … (see the module docstring)."""

  def __init__(self, rows: SequenceT[FinetuneRow], batch_size: int, seed: int,
               configuration: Configuration, pad_id: int, max_len: int):
    if not rows:
      raise ValueError("no fine-tuning rows: every example was dropped or none was read")
    self.rows, self.batch_size, self.seed = list(rows), int(batch_size), int(seed)
    self.configuration, self.pad_id, self.max_len = configuration, int(pad_id), int(max_len)
    self.steps_per_epoch = -(-len(self.rows) // self.batch_size)

  def indices(self, step: int) -> np.ndarray:
    """The row indices of 0-based step `step` (the last batch of an epoch may be shorter)."""
    epoch, index = divmod(int(step), self.steps_per_epoch)
    order = np.random.default_rng([self.seed, epoch]).permutation(len(self.rows))
    return order[index * self.batch_size:(index + 1) * self.batch_size]

  def batch(self, step: int) -> Batch:
    """Step `step`'s batch: [batch_size, bucketed T]; targets = SPEC §4 mask ∧ loss tokens."""
    chosen = [self.rows[i] for i in self.indices(step)]
    length = bucket(max(len(r) for r in chosen), least=LENGTH_BUCKET_LEAST, cap=self.max_len)
    tokens = np.full((len(chosen), length), self.pad_id, np.int32)
    kinds = np.full((len(chosen), length), int(Kind.PAD), np.int8)
    segment = np.zeros((len(chosen), length), np.int32)
    loss = np.zeros((len(chosen), length), bool)
    for i, row in enumerate(chosen):
      n = len(row)
      tokens[i, :n], kinds[i, :n], segment[i, :n], loss[i, :n] = row.tokens, row.kinds, 1, row.loss
    batch = Batch.from_rows(tokens, kinds, segment, self.configuration)
    batch = dataclasses.replace(batch, targets=batch.targets & loss)
    return batch.pad_rows(self.batch_size)
