"""Prepared corpora as TensorFlow Datasets: the `slm_corpus` builder (`build_corpus`), the checked
way to open any prepared TFDS split offline (`open_split`), and the training reader
`TfdsDocuments` (`tfds.data_source` random access; no TensorFlow anywhere here).

Builder `SlmCorpus` (TFDS name `slm_corpus`), one builder config per corpus (`slm_corpus/gum`),
version `CORPUS_VERSION` (1.0.0: `slm_jax.document` records of version 1). One example per
document:
  id         Text    the document id (as `python -m slm_jax.prepare` gives it)
  record     bytes   its `slm_jax.document` record (`records.py`: the word-level lin1 base)
  tokens     int32   lin1 base symbols in the record
  sentences  int32   sentences in the record
written as ArrayRecord files under `DIR/slm_corpus/NAME/1.0.0/` in input order (files sorted by
path, documents in file order: the order of a one-shard prepare; TFDS's own shuffling is off,
so the pipeline's seeded shuffle gives the batches of `data.source=arrayrecord`). Inputs are
those of prepare (`inputs.TREE_INPUTS`: parse-stage output, PTB, JSONL, Parquet), one list per
split; a file in two splits is refused. The dataset info holds the split names and sizes
(`dataset_info.json`) and, in `metadata.json`, the record format and version, each split's input
files and its accounting (`{"prepare": StageCounts}`: the counts a prepare manifest of the same
inputs holds).

Beam: with `apache_beam` importable (`beam=None`) or `beam=True`, each split is read by a Beam
pipeline, one element per input file (`beam_options`, e.g. `--direct_num_workers=8
--direct_running_mode=multi_processing`, or a cluster runner's flags); each file's counts are
written beside the build (`_accounting/`) and merged into the dataset info. Otherwise the files
are read in this process.

Reading: `open_split(name, tfds_dir, split, features)` opens `DIR/dataset[/config]/version`
(`name` = `dataset[/config][:version]`, the newest version when none is named) without code or
network; a missing folder, dataset, config, version or split, an unfinished build, a TFRecord
build (no random access) or missing features are `TfdsError`s naming them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shlex
import shutil
import tempfile
import time
from typing import Any, Iterator, Mapping, Sequence as SequenceT

import numpy as np
import tensorflow_datasets as tfds

from slm_jax import inputs
from slm_jax.data.accounting import StageCounts
from slm_jax.data.documents import DocumentSource
from slm_jax.data.parse_reports import unfinished_parses
from slm_jax.data.records import (RECORD_FORMAT, RECORD_VERSION, DocumentRecord, RecordError,
                                  decode_record, encode_record)
from slm_jax.data.tree_documents import read_tree_inputs
from slm_jax.kinds import Kind
from slm_jax.linearize import base_sequence

DATASET = "slm_corpus"
CORPUS_VERSION = "1.0.0"
FEATURES = ("id", "record", "tokens", "sentences")
BUILD_COMMAND = "python -m slm_jax.tfds_build"
_ACCOUNTING = "_accounting"  # a Beam build's per-file counts, merged into the info and removed
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_VERSION = re.compile(r"\d+\.\d+\.\d+")


class TfdsError(ValueError):
  """A TFDS dataset that is not there or not what the reader needs (the message names it)."""


def _file_examples(index: int, path: str, fmt: str, lenient: bool, sentences_as_documents: bool,
                   counts: StageCounts) -> Iterator[tuple[int, dict[str, Any]]]:
  """The examples of input file `index`, keyed in input order, counted as prepare counts them."""
  words = 0
  documents = read_tree_inputs([(path, fmt)], counts, lenient=lenient,
                               sentences_as_documents=sentences_as_documents)
  for k, (doc_id, trees) in enumerate(documents):
    base = base_sequence(trees)
    counts.documents_out += 1
    counts.tokens_in += len(base)
    counts.tokens_out += len(base)
    words += int(np.count_nonzero(base.kinds == Kind.TERMINAL))
    yield (index << 32) | k, {"id": doc_id, "record": encode_record(base, doc_id),
                              "tokens": len(base), "sentences": int(base.sentence[-1]) + 1}
  counts.notes["words"] += words
  counts.notes["input files"] += 1


def _beam_file(item: tuple[int, tuple[str, str]], folder: str, lenient: bool,
               sentences_as_documents: bool) -> Iterator[tuple[int, dict[str, Any]]]:
  """One Beam element: an input file's examples; its counts go to `folder/<index>.json`."""
  index, (path, fmt) = item
  counts = StageCounts()
  yield from _file_examples(index, path, fmt, lenient, sentences_as_documents, counts)
  target = pathlib.Path(folder) / f"{index:06d}.json"
  target.parent.mkdir(parents=True, exist_ok=True)
  tmp = target.with_suffix(".tmp")
  tmp.write_text(json.dumps(counts.to_json()))
  tmp.rename(target)  # a retried bundle rewrites the same counts


@dataclasses.dataclass(eq=False)
class CorpusConfig(tfds.core.BuilderConfig):
  """One corpus: its input files per split, (path, format) as `inputs.discover` found them."""

  splits: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
  lenient: bool = True
  sentences_as_documents: bool = False
  unfinished: int = 0  # parse shards without a report (allow_partial): noted in every split
  beam: bool = False


class SlmCorpus(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Documents of trees as `slm_jax.document` records (see the module docstring). Unregistered:
  `tfds.data_source("slm_corpus/NAME", data_dir=…)` reads a build from its files alone."""

  VERSION = tfds.core.Version(CORPUS_VERSION)
  RELEASE_NOTES = {CORPUS_VERSION: f"{RECORD_FORMAT} records, version {RECORD_VERSION}"}

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=(f"slm_jax corpus {self.builder_config.name}: one {RECORD_FORMAT} v"
                     f"{RECORD_VERSION} record per document (slm_jax/data/records.py)"),
        features=tfds.features.FeaturesDict({
            "id": tfds.features.Text(),
            "record": tfds.features.Tensor(shape=(), dtype=np.object_),
            "tokens": np.int32, "sentences": np.int32}),
        disable_shuffling=True,
        metadata=tfds.core.MetadataDict(format=RECORD_FORMAT, version=RECORD_VERSION))

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing is downloaded
    config = self.builder_config
    if config.beam:
      beam = tfds.core.lazy_imports.apache_beam
      folder = pathlib.Path(self.data_dir) / _ACCOUNTING
      return {split: beam.Create(list(enumerate(files))) | beam.FlatMap(
          _beam_file, os.fspath(folder / split), config.lenient, config.sentences_as_documents)
              for split, files in config.splits}
    return {split: self._generate_examples(split, files) for split, files in config.splits}

  def _generate_examples(self, split: str, files: tuple[tuple[str, str], ...]):
    counts = self._counts.setdefault(split, StageCounts())
    for index, (path, fmt) in enumerate(files):
      yield from _file_examples(index, path, fmt, self.builder_config.lenient,
                                self.builder_config.sentences_as_documents, counts)
    if not counts.documents_out:  # TFDS would stop with a bare "No examples were yielded"
      raise RecordError(f"split {split}: no document left to write ("
                        f"{'; '.join(line.strip() for line in counts.summary().splitlines())})")

  def _download_and_prepare(self, dl_manager, download_config):
    self._counts: dict[str, StageCounts] = {}
    super()._download_and_prepare(dl_manager, download_config)
    folder = pathlib.Path(self.data_dir) / _ACCOUNTING
    for split, files in self.builder_config.splits:
      counts = self._counts.setdefault(split, StageCounts())
      for part in sorted((folder / split).glob("*.json")) if folder.is_dir() else ():
        counts.merge(StageCounts.from_json(json.loads(part.read_text())))
      if self.builder_config.unfinished:
        counts.notes["unfinished parse shards (--allow_partial)"] += self.builder_config.unfinished
      if counts.notes["input files"] != len(files):
        raise RecordError(f"{self.name}/{self.builder_config.name} split {split}: counts of "
                          f"{counts.notes['input files']} of its {len(files)} input files")
    shutil.rmtree(folder, ignore_errors=True)
    self.info.metadata.update(
        inputs={split: [path for path, _ in files] for split, files in self.builder_config.splits},
        accounting={split: {"prepare": counts.to_json()} for split, counts in self._counts.items()},
        beam=self.builder_config.beam)


def beam_available() -> bool:
  try:
    import apache_beam  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


@dataclasses.dataclass
class BuildResult:
  path: pathlib.Path  # the version folder
  counts: dict[str, StageCounts]  # per split
  beam: bool
  seconds: float


def build_corpus(splits: Mapping[str, SequenceT[str | os.PathLike]], output: str | os.PathLike,
                 *, name: str, fmt: str = inputs.AUTO, lenient: bool = True,
                 sentences_as_documents: bool = False, allow_partial: bool = False,
                 beam: bool | None = None, beam_options: str = "",
                 overwrite: bool = False) -> BuildResult:
  """Builds `slm_corpus/name` under the TFDS data_dir `output` with TFDS's `download_and_prepare`
  (see the module docstring); `splits` maps split names to prepare inputs. An existing build is
  refused unless `overwrite`; an unfinished parse unless `allow_partial` (then counted)."""
  started = time.time()
  if not _NAME.fullmatch(name):
    raise TfdsError(f"corpus name {name!r}: use letters, digits, '_', '.', '-'")
  bad = [split for split in splits if not re.fullmatch(r"[A-Za-z0-9_]+", split)]
  if not splits or bad:
    raise TfdsError(f"split names must be letters, digits and '_' (got {list(splits) or 'none'})")
  everything = [path for paths in splits.values() for path in paths]
  unfinished = unfinished_parses(everything)
  if unfinished and not allow_partial:
    raise RecordError(f"the parse is not finished: {len(unfinished)} shard(s) without a report "
                      f"(e.g. {unfinished[0]}); finish them, or pass --allow_partial")
  resolved, owner = {}, {}
  for split, paths in splits.items():
    resolved[split] = tuple(inputs.discover(paths, inputs.TREE_INPUTS, fmt))
    for path, _ in resolved[split]:
      if owner.setdefault(path, split) != split:
        raise TfdsError(f"{path} is an input of both split {owner[path]} and split {split}")
  use_beam = beam_available() if beam is None else beam
  if use_beam and not beam_available():
    raise TfdsError("--beam=on needs apache-beam (pip install apache-beam)")
  target = pathlib.Path(output) / DATASET / name / CORPUS_VERSION
  if (target / "dataset_info.json").exists() and not overwrite:
    raise TfdsError(f"{target} is already built; pass --overwrite to build it again")
  config = CorpusConfig(name=name, splits=tuple(resolved.items()), lenient=lenient,
                        sentences_as_documents=sentences_as_documents,
                        unfinished=len(unfinished), beam=use_beam)
  builder = SlmCorpus(config=config, data_dir=os.fspath(output), file_format="array_record")
  mode = tfds.download.GenerateMode
  options = None
  if use_beam and beam_options:
    options = tfds.core.lazy_imports.apache_beam.options.pipeline_options.PipelineOptions(
        shlex.split(beam_options))
  download_config = tfds.download.DownloadConfig(
      download_mode=mode.FORCE_REDOWNLOAD if overwrite else mode.REUSE_DATASET_IF_EXISTS,
      beam_options=options)
  with tempfile.TemporaryDirectory(prefix="slm_tfds_downloads.") as downloads:
    builder.download_and_prepare(download_dir=downloads, download_config=download_config)
  counts = {split: StageCounts.from_json(entry["prepare"])
            for split, entry in builder.info.metadata["accounting"].items()}
  return BuildResult(target, counts, use_beam, time.time() - started)


# --- reading -------------------------------------------------------------------------------------


def default_data_dir() -> pathlib.Path:
  """TFDS's default data_dir (`$TFDS_DATA_DIR`, else ~/tensorflow_datasets)."""
  return pathlib.Path(tfds.core.constants.DATA_DIR).expanduser()


def _versions(folder: pathlib.Path) -> tuple[list[str], list[str]]:
  """(finished versions, unfinished version folders) of a dataset folder."""
  done, unfinished = [], []
  for child in sorted(folder.iterdir()) if folder.is_dir() else ():
    if _VERSION.fullmatch(child.name):
      (done if (child / "dataset_info.json").is_file() else unfinished).append(child.name)
    elif child.name.startswith("incomplete."):
      unfinished.append(child.name)
  done.sort(key=lambda v: tuple(map(int, v.split("."))))
  return done, unfinished


def _child(folder: pathlib.Path, part: str, dataset: str, how: str) -> pathlib.Path:
  if not (folder / part).is_dir():
    there = sorted(p.name for p in folder.iterdir()
                   if p.is_dir() and p.name != "downloads" and not p.name.startswith("."))
    raise TfdsError(f"{folder} has no TFDS dataset {part!r} (of {dataset}; it holds "
                    f"{', '.join(there) or 'nothing'}); {how}")
  return folder / part


def _root(tfds_dir: str | os.PathLike | None, how: str) -> pathlib.Path:
  root = pathlib.Path(tfds_dir).expanduser() if tfds_dir else default_data_dir()
  if not root.is_dir():
    raise TfdsError(f"TFDS data_dir {root} does not exist; {how}")
  return root


def built_configs(dataset: str, tfds_dir: str | os.PathLike | None, how: str) -> list[str]:
  """The builder configs of `dataset` under `tfds_dir` that hold a finished build, sorted."""
  folder = _child(_root(tfds_dir, how), dataset, dataset, how)
  return sorted(p.name for p in folder.iterdir() if p.is_dir() and _versions(p)[0])


def dataset_folder(name: str, tfds_dir: str | os.PathLike | None, how: str) -> pathlib.Path:
  """The version folder of `name` (`dataset[/config][:version]`) under `tfds_dir` (TFDS's default
  when empty); `how` says how such a dataset is built (for the errors)."""
  dataset, _, version = name.partition(":")
  if not dataset or not all(_NAME.fullmatch(part) for part in dataset.split("/")):
    raise TfdsError(f"TFDS name {name!r}: expected dataset[/config][:version]")
  folder = _root(tfds_dir, how)
  for part in dataset.split("/"):
    folder = _child(folder, part, dataset, how)
  done, unfinished = _versions(folder)
  if version and version not in done:
    raise TfdsError(f"{dataset} version {version} is not in {folder} (built versions: "
                    f"{', '.join(done) or 'none'}); name one of those or build {version}: {how}")
  if not done:
    configs = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(
        ".") and p.name not in unfinished)
    there = (f"configs {', '.join(configs)}: name one as {dataset}/CONFIG" if configs else
             f"unfinished builds: {', '.join(unfinished) or 'none'}")
    raise TfdsError(f"{folder} holds no finished build of {dataset} ({there}); {how}")
  return folder / (version or done[-1])


def feature_paths(features: Any, prefix: str = "") -> dict[str, Any]:
  """`path → feature` of a FeaturesDict, nested dicts and sequences as `outer/inner`."""
  out = {}
  inner = getattr(features, "feature", None)  # Sequence(...) of a dict
  items = features.items() if hasattr(features, "items") else (
      inner.items() if hasattr(inner, "items") else ())
  for key, feature in items:
    out[prefix + key] = feature
    out.update(feature_paths(feature, f"{prefix}{key}/"))
  return out


def open_split(name: str, tfds_dir: str | os.PathLike | None, split: str,
               features: SequenceT[str], how: str, what: str) -> tuple[Any, Any]:
  """(read-only builder, random-access data source) of `split` of `name` under `tfds_dir`,
  checked offline (see the module docstring); `features` are the feature paths `what` reads."""
  folder = dataset_folder(name, tfds_dir, how)
  builder = tfds.builder_from_directory(os.fspath(folder))
  have = feature_paths(builder.info.features)
  missing = [f for f in features if f not in have]
  if missing:
    raise TfdsError(f"{folder}: its features ({', '.join(sorted(have))}) lack "
                    f"{', '.join(missing)}, which {what} reads: not a {what} dataset")
  if split not in builder.info.splits:
    raise TfdsError(f"{folder} has splits {', '.join(builder.info.splits) or 'none'}, not "
                    f"{split!r}")
  formats = {f.value for f in builder.info.available_file_formats()}
  if "array_record" not in formats:
    raise TfdsError(f"{folder} is stored as {', '.join(sorted(formats)) or 'no known format'}, "
                    "without random access: rebuild it with --file_format=array_record")
  return builder, builder.as_data_source(split=split, file_format="array_record")


class TfdsDocuments(DocumentSource):
  """A `DocumentSource` over one split of a built `slm_corpus` (or any TFDS dataset with its
  features and metadata): the same records, decoding, words, documents and accounting, read with
  `tfds.data_source` instead of the prepared folder's manifests."""

  def __init__(self, name: str, tfds_dir: str | os.PathLike | None = None,
               split: str = "train"):  # pylint: disable=super-init-not-called
    how = f"build it with {BUILD_COMMAND} --output=DIR --name=NAME INPUT…"
    builder, source = open_split(name, tfds_dir, split, FEATURES, how, "slm_jax corpus")
    record = builder.info.features["record"]
    if getattr(record, "shape", None) != () or np.dtype(record.np_dtype).kind not in "OSa":
      raise TfdsError(f"{builder.data_dir}: feature 'record' is {record!r}; a slm_jax corpus "
                      f"holds {RECORD_FORMAT} record bytes there ({how})")
    metadata = dict(builder.info.metadata or {})
    if (metadata.get("format"), metadata.get("version")) != (RECORD_FORMAT, RECORD_VERSION):
      raise RecordError(f"{builder.data_dir}: records of format {metadata.get('format')!r} "
                        f"version {metadata.get('version')!r}; this slm_jax reads "
                        f"{RECORD_FORMAT} version {RECORD_VERSION} (rebuild with {BUILD_COMMAND})")
    self.folder = pathlib.Path(builder.data_dir)
    self.split = split
    self.files = sorted(str(p) for p in self.folder.glob(f"*-{split}.array_record*"))
    self.manifests = [{"accounting": metadata.get("accounting", {}).get(split, {})}]
    self._source = source  # TFDS examples (dicts); `raw` takes their records
    if not len(self._source):
      raise ValueError(f"{self.folder}: split {split} holds no documents")

  def raw(self, index: int) -> bytes:
    return self._source[index]["record"]

  def __getitem__(self, index: int) -> DocumentRecord:
    return decode_record(self.raw(index))

  def __repr__(self) -> str:
    return f"TfdsDocuments({self.folder}, {self.split}: {len(self)} documents)"
