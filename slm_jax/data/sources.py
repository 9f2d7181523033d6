"""Where a run's documents and tokenizer come from (the `data` section of a config).

`source="embedded"`: the embedded treebank's train and validation splits (seeded, generated).
`source="ptb"`: PTB files/folders from `data.ptb_paths`, one document per file; the last
1/20 of the documents (at least one) in sorted path order are held out for evaluation.
The tokenizer is built once and saved in the workdir, and a resumed run loads that copy.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from typing import Any

from slm_jax import ptb
from slm_jax.corpus import treebank
from slm_jax.tokenizer import SPEC_FILE_NAME, Tokenizer, make_tokenizer
from slm_jax.trees import Tree

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class Corpus:
  train: list[list[Tree]]
  evaluation: list[list[Tree]]
  description: str


def load_corpus(data_cfg: Any) -> Corpus:
  if data_cfg.source == "embedded":
    train = treebank.embedded_corpus("train", data_cfg.embedded_train_documents,
                                     seed=data_cfg.embedded_seed)
    evaluation = treebank.embedded_corpus("validation", data_cfg.embedded_eval_documents,
                                          seed=data_cfg.embedded_seed)
    return Corpus(train, evaluation, f"embedded treebank (seed {data_cfg.embedded_seed}): "
                  f"{len(train)} train / {len(evaluation)} validation documents")
  if data_cfg.source == "ptb":
    if not data_cfg.ptb_paths:
      raise ValueError("data.source='ptb' needs data.ptb_paths (files or folders of trees)")
    report = ptb.ReadReport()
    documents = ptb.read_documents(list(data_cfg.ptb_paths), report=report)
    if len(documents) < 2:
      raise ValueError(f"data.ptb_paths gave {len(documents)} document(s); need at least 2 "
                       "(one is held out for evaluation)")
    held_out = max(1, len(documents) // 20)
    return Corpus(documents[:-held_out], documents[-held_out:],
                  f"PTB {list(data_cfg.ptb_paths)}: {len(documents) - held_out} train / "
                  f"{held_out} held-out documents; {report.summary()}")
  raise ValueError(f"unknown data.source {data_cfg.source!r}; expected 'embedded' or 'ptb'")


def load_or_build_tokenizer(data_cfg: Any, corpus: Corpus, workdir: pathlib.Path) -> Tokenizer:
  """The run's tokenizer: the workdir copy if there is one, else built and saved there."""
  saved = workdir / SPEC_FILE_NAME
  if saved.exists():
    return Tokenizer.load(saved)
  if data_cfg.tokenizer == "word":
    words = (w for document in corpus.train for tree in document for w in tree.leaves())
    tokenizer = make_tokenizer("word", words=words)
  elif data_cfg.tokenizer == "hf":
    tokenizer = make_tokenizer("hf", path=data_cfg.tokenizer_path)
  else:
    tokenizer = make_tokenizer(data_cfg.tokenizer)
  workdir.mkdir(parents=True, exist_ok=True)
  tokenizer.save(saved)
  return tokenizer
