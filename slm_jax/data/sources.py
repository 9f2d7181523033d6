"""Where a run's documents and tokenizer come from (the `data` section of a config).

`source="embedded"`: the embedded treebank's train and validation splits (seeded, generated).
`source="ptb"`: PTB files/folders from `data.ptb_paths`, one document per file; the last
1/20 of the documents (at least one) in sorted path order are held out for evaluation.
`source="arrayrecord"|"parquet"`: streamed by the Grain pipeline from `data.paths`;
`source="tfds"`: the same, from the train split of TFDS dataset `data.tfds_name` under
`data.tfds_dir` (a corpus built by `python -m slm_jax.tfds_build`); held-out documents come from
`data.eval_paths` (prepared folders or PTB files; none = no evaluation).
The tokenizer is built once and saved in the workdir, and a resumed run loads that copy.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from typing import Any

from slm_jax import ptb
from slm_jax.corpus import treebank
from slm_jax.data.documents import DocumentSource
from slm_jax.tokenizer import SPEC_FILE_NAME, Tokenizer, make_tokenizer
from slm_jax.trees import Tree

_LOG = logging.getLogger(__name__)


# The names `data.source` can take (the one list: the config builder validates against it).
SOURCES = ("embedded", "ptb", "arrayrecord", "parquet", "tfds")
STREAMED = ("arrayrecord", "parquet", "tfds")  # read by slm_jax.data.grain_pipeline, not in memory


@dataclasses.dataclass
class Corpus:
  train: list[list[Tree]] | None  # None for streamed sources
  evaluation: list[list[Tree]]
  description: str


def open_documents(source: str, paths, tfds_name: str = "", tfds_dir: str = "") -> DocumentSource:
  """The prepared documents of `source="arrayrecord"` (folders/files `paths`) or `"tfds"` (split
  train of `tfds_name` under `tfds_dir`; imports tensorflow_datasets, never TensorFlow)."""
  if source == "tfds":
    from slm_jax.data.tfds_corpus import TfdsDocuments  # pylint: disable=g-import-not-at-top
    return TfdsDocuments(tfds_name, tfds_dir)
  return DocumentSource(list(paths))


def _eval_documents(paths) -> list[list[Tree]]:
  """Held-out documents for streamed sources: prepared folders/ArrayRecord files or PTB files."""
  documents: list[list[Tree]] = []
  for path in map(pathlib.Path, paths):
    if path.is_dir() and any(path.glob("*.array_record")) or path.suffix == ".array_record":
      documents.extend(DocumentSource(path).documents())
    else:
      documents.extend(ptb.read_documents([path]))
  return documents


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
  if data_cfg.source in STREAMED:
    evaluation = _eval_documents(data_cfg.eval_paths) if data_cfg.eval_paths else []
    where = data_cfg.tfds_name if data_cfg.source == "tfds" else list(data_cfg.paths)
    return Corpus(None, evaluation, f"{data_cfg.source} {where} (streamed); "
                  f"{len(evaluation)} held-out documents from data.eval_paths")
  raise ValueError(f"unknown data.source {data_cfg.source!r}; expected one of "
                   f"{', '.join(SOURCES)}")


def load_or_build_tokenizer(data_cfg: Any, corpus: Corpus, workdir: pathlib.Path, *,
                            save: bool = True) -> Tokenizer:
  """The run's tokenizer: the workdir copy if there is one, else built (the same on every host)
  and saved there if `save` (one host of a multi-host run)."""
  saved = workdir / SPEC_FILE_NAME
  if saved.exists():
    return Tokenizer.load(saved)
  if data_cfg.tokenizer == "word":
    if corpus.train is None:  # a prepared corpus: one pass over its words
      words = open_documents(data_cfg.source, data_cfg.paths, data_cfg.tfds_name,
                             data_cfg.tfds_dir).words()
    else:
      words = (w for document in corpus.train for tree in document for w in tree.leaves())
    tokenizer = make_tokenizer("word", words=words)
  elif data_cfg.tokenizer == "hf":
    tokenizer = make_tokenizer("hf", path=data_cfg.tokenizer_path)
  else:
    tokenizer = make_tokenizer(data_cfg.tokenizer)
  if save:
    workdir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(saved)
  return tokenizer
