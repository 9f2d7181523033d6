"""The `data` section of a run's config: where documents and the tokenizer come from, row length,
streaming settings (its rules live here only; `slm_jax.sections`)."""

from __future__ import annotations

import dataclasses

from slm_jax.data.sources import SOURCES, STREAMED
from slm_jax.sections import Rules, option
from slm_jax.tokenizer import TOKENIZERS

MIN_SEQ_LEN = 16  # shortest row a run may use (a short sentence with its brackets must fit)
DROP_WARNING = 0.5  # a run that drops more of its training tokens than this warns loudly


@dataclasses.dataclass(frozen=True)
class DataSection:
  source: str  # embedded | ptb | arrayrecord | parquet | tfds (the last three stream via Grain)
  embedded_train_documents: int
  embedded_eval_documents: int
  embedded_seed: int
  ptb_paths: tuple[str, ...]  # source=ptb: files/folders, one document per file
  seq_len: int
  tokenizer: str  # word | gpt2 | qwen | hf
  tokenizer_path: str  # tokenizer=hf: a tokenizer.json
  linearization_seed: int  # lin1_shuf
  paths: tuple[str, ...]  # streamed sources: prepared folders or Parquet files
  eval_paths: tuple[str, ...]  # streamed sources: held-out documents (prepared or PTB)
  shuffle_seed: int
  worker_count: int  # grain worker processes (0: in the training process)
  prefetch: int
  window_shuffle: int  # Parquet: documents per shuffle window
  parquet_column: str
  # The run stops when more than this fraction of its training tokens is dropped (sentences
  # longer than a row); above DROP_WARNING it warns. 1.0 = never stop.
  max_drop_fraction: float = option(1.0, required=False)
  # source=tfds: a TFDS build of a corpus (python -m slm_jax.tfds_build), read offline.
  tfds_name: str = option("", required=False)  # dataset[/config][:version], e.g. slm_corpus/gum
  tfds_dir: str = option("", required=False)  # its TFDS data_dir ("" = TFDS's default)

  def __post_init__(self):
    rules = Rules("data", self)
    if rules.typed:
      need = rules.need
      need(self.source in SOURCES, f"source={self.source!r} is not one of {', '.join(SOURCES)}")
      need(self.source not in STREAMED or self.source == "tfds" or len(self.paths) > 0,
           f"source={self.source} needs data.paths (prepared folders or Parquet files), e.g. "
           "--config.data.paths=\"('/data/prepared',)\"")
      need(self.source != "tfds" or bool(self.tfds_name),
           "source=tfds needs data.tfds_name (and data.tfds_dir, its TFDS data_dir), e.g. "
           "--config.data.tfds_name=slm_corpus/gum --config.data.tfds_dir=/data/tfds")
      need(self.source != "parquet" or self.tokenizer != "word",
           "source=parquet streams text without a vocabulary pass: use a BPE tokenizer "
           "(data.tokenizer=gpt2|qwen|hf) or prepare the corpus (data.source=arrayrecord)")
      need(self.worker_count >= 0 and self.prefetch >= 0 and self.window_shuffle >= 1,
           "worker_count and data.prefetch must be ≥ 0, data.window_shuffle ≥ 1")
      need(self.source != "ptb" or len(self.ptb_paths) > 0,
           "source=ptb needs data.ptb_paths (files or folders), e.g. "
           "--config.data.ptb_paths=\"('treebank/',)\"")
      need(self.embedded_train_documents > 0 and self.embedded_eval_documents > 0,
           "embedded_*_documents must be positive")
      need(self.seq_len >= MIN_SEQ_LEN,
           f"seq_len must be at least {MIN_SEQ_LEN}, got {self.seq_len}")
      need(self.tokenizer in TOKENIZERS,
           f"tokenizer={self.tokenizer!r} is not one of {', '.join(TOKENIZERS)}")
      need(self.tokenizer != "hf" or bool(self.tokenizer_path),
           "tokenizer=hf needs data.tokenizer_path (a tokenizer.json)")
      need(0.0 <= self.max_drop_fraction <= 1.0,
           f"max_drop_fraction={self.max_drop_fraction} must be in [0, 1]")
    rules.done()
