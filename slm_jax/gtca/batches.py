"""GTCA's batches (SPEC §10): encoded MCQA rows and sentence rows → padded arrays + chunk layout.

- `EncodedExample`: one MCQA example, the prompt's ids then the answer letter's id (the training row),
  with its span tree over the prompt (toy rows: `toy_encoding`; real sets: `real_sets`).
- `make_batch`: B examples padded to one shape — {tokens, meta, targets, chunks, positions,
  letters, options, answers}; the target is the answer letter only (loss on the answer
  completion), `chunks` the per-layer chunk layout of their span trees (`spans.chunk_batch`).
- `train_batch`: the fields `GtcaLM.loss_sums` reads, α included as a float32 [B] row field.
- `padded_chunks`: the chunk layout of a batch's span trees (the scorers, `gtca.scoring`, batch
  their rows with `inference.scorer.batched_rows` and add it).
- `data_digest`: one sha256 over a set of rows (a stage's identity records what it trained on).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

import numpy as np

from slm_jax.buckets import bucket
from slm_jax.gtca.spans import SpanTree, chunk_batch
from slm_jax.hf.scoring import plain_rows

TRAIN_FIELDS = ("tokens", "meta", "targets", "chunks")  # + alpha: what GtcaLM.loss_sums reads


class EncodedExample:
  """One encoded MCQA example: `ids_T` = the prompt's ids then the answer letter's id (the
  training row), `tree` the span tree over the prompt's tokens, `letter_ids` the ids of the
  option letters A, B, … (one token each), `answer` the right option, `group` a breakdown key
  (the toy task's attractor). The letter is predicted at position `len(tree) − 1`, the prompt's
  last token (`Answer:`)."""

  __slots__ = ("ids_T", "tree", "letter_ids", "answer", "group", "example_id")

  def __init__(self, ids_T, tree: SpanTree, letter_ids, answer: int, group: str = "",
               example_id: str = ""):
    self.ids_T = np.asarray(ids_T, np.int32)
    self.tree, self.letter_ids = tree, tuple(int(i) for i in letter_ids)
    self.answer, self.group, self.example_id = int(answer), group, example_id
    if self.tree.n_tokens != len(self.ids_T) - 1:
      raise ValueError(f"example {example_id}: span tree over {self.tree.n_tokens} tokens, "
                       f"but the row has {len(self.ids_T)} = prompt + 1 letter")
    if not 0 <= self.answer < len(self.letter_ids):
      raise ValueError(f"example {example_id}: answer {answer} outside "
                       f"{len(self.letter_ids)} options")

  @property
  def position(self) -> int:
    return self.tree.n_tokens - 1


def row_width(examples: Sequence[EncodedExample], least: int = 16) -> int:
  """The padded row length of a set of examples (one bucket: one compiled shape)."""
  return bucket(max(len(e.ids_T) for e in examples), least)


def make_batch(examples: Sequence[EncodedExample], width: int, n_layers: int, k: int,
               rows: int | None = None, pad_id: int = 0) -> dict[str, Any]:
  """{tokens, meta, targets, chunks, positions, letters, options, answers} of B examples padded
  to `rows` rows of `width` tokens. targets mark the answer letter only (loss on the answer
  completion); padding rows have no target, letters −1 → masked options."""
  rows = len(examples) if rows is None else rows
  if len(examples) > rows:
    raise ValueError(f"{len(examples)} examples do not fit {rows} rows")
  tokens, meta = plain_rows([e.ids_T for e in examples], width, rows, pad_id)
  targets = np.zeros((rows, width), bool)
  positions = np.zeros(rows, np.int32)
  width_o = max(len(e.letter_ids) for e in examples)
  letters = np.zeros((rows, width_o), np.int32)
  options = np.zeros((rows, width_o), bool)
  answers = np.full(rows, -1, np.int32)
  for r, e in enumerate(examples):
    targets[r, e.position + 1] = True
    positions[r] = e.position
    letters[r, :len(e.letter_ids)] = e.letter_ids
    options[r, :len(e.letter_ids)] = True
    answers[r] = e.answer
  chunks = padded_chunks([e.tree for e in examples], rows, n_layers, width, k)
  return {"tokens": tokens, "meta": meta, "targets": targets, "chunks": chunks,
          "positions": positions, "letters": letters, "options": options, "answers": answers}


def train_batch(batch: Mapping[str, Any], alpha: float) -> dict[str, Any]:
  """The training fields of a `make_batch` batch and α as float32 [B] (the same value in every
  row: the step's micro-batch reshape splits it like any other row field)."""
  rows = len(batch["tokens"])
  return {**{name: batch[name] for name in TRAIN_FIELDS},
          "alpha": np.full(rows, alpha, np.float32)}


def padded_chunks(trees: Sequence[SpanTree], n_rows: int, n_layers: int, width: int, k: int):
  """The `spans.ChunkBatch` of `trees` padded with empty trees (no chunk) to `n_rows` rows."""
  return chunk_batch([*trees] + [SpanTree(None, 0)] * (n_rows - len(trees)), n_layers, width, k)


def data_digest(examples: Sequence[EncodedExample]) -> str:
  """sha256 over the rows in order (ids, span tree, option letters, answer): what a stage
  trained on, for its identity record."""
  digest = hashlib.sha256()
  for e in examples:
    digest.update(e.ids_T.tobytes())
    digest.update(e.tree.to_json().encode())
    digest.update(repr((e.letter_ids, e.answer)).encode())
  return digest.hexdigest()
