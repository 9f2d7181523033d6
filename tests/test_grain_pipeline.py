"""Grain pipeline on prepared GUM and on FineWeb-layout Parquet: whole sentences, metadata as for
documents alone, disjoint hosts covering everything, exact resume, accounting by reason."""

from __future__ import annotations

import json

import ml_collections
import numpy as np
import pytest

from slm_jax import ptb
from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.documents import DocumentSource, prepare
from slm_jax.data.encode import encode_base, encode_document
from slm_jax.data.grain_pipeline import PipelineOptions, build_iterator, make_train_iterator
from slm_jax.data.packing import sentence_chunks
from slm_jax.data.sources import SOURCES, STREAMED
from slm_jax.kinds import Kind
from slm_jax.linearize import SCHEMES
from slm_jax.structure import row_metadata
from slm_jax.tokenizer import make_tokenizer
from tests.shared_data import require_shared

SEQ_LEN = 256
def fields(batch) -> list[np.ndarray]:
  """Every array of a `Batch`: tokens, the RowMetadata fields, targets."""
  return [batch.tokens, *batch.meta, batch.targets]


@pytest.fixture(scope="module")
def gum(tmp_path_factory):
  """The first 24 GUM documents, prepared, with a word tokenizer over their words."""
  files = sorted((require_shared("gum") / "const").glob("*.ptb"))[:24]
  out = tmp_path_factory.mktemp("prepared")
  prepare(files, out)
  documents = {str(f): ptb.read_file(f) for f in files}
  words = (w for d in documents.values() for t in d for w in t.leaves())
  return out, documents, make_tokenizer("word", words=words)


def _iterator(gum, configuration="tg", **kw):
  out, _, tokenizer = gum
  options = PipelineOptions(**{"seq_len": SEQ_LEN, "batch_size": 4, "num_epochs": 1,
                               "prefetch": 0, **kw})
  iterator, describe = build_iterator("arrayrecord", [out], tokenizer,
                                      CONFIGURATIONS[configuration], options)
  return iterator, describe


class _SentenceIndex:
  """Finds which document a packed run comes from: a run must be consecutive whole sentences."""

  def __init__(self, sequences, seq_len):
    self.seq_len = seq_len
    self.chunks = [[tuple(s.tokens[a:b].tolist()) for a, b in sentence_chunks(s)]
                   for s in sequences]
    self.first = {}
    for d, chunks in enumerate(self.chunks):
      for k, chunk in enumerate(chunks):
        self.first.setdefault(chunk, []).append((d, k))
    self.lengths = sorted({len(c) for c in self.first})

  def kept_tokens(self, d) -> int:
    return sum(len(c) for c in self.chunks[d] if len(c) <= self.seq_len)

  def match(self, run: tuple) -> int:
    for length in self.lengths:
      if length > len(run):
        break
      for d, k in self.first.get(run[:length], ()):
        pos, chunks = length, self.chunks[d]
        for chunk in chunks[k + 1:]:
          if pos == len(run):
            break
          if len(chunk) > self.seq_len:
            continue
          if run[pos:pos + len(chunk)] != chunk:
            break
          pos += len(chunk)
        if pos == len(run):
          return d
    raise AssertionError(f"a packed run of {len(run)} tokens is not whole sentences of a document")


def _runs(batch):
  for row in range(batch.tokens.shape[0]):
    segment = batch.meta.segment[row]
    for s in np.unique(segment[segment > 0]):
      where = np.flatnonzero(segment == s)
      assert np.array_equal(where, np.arange(where[0], where[-1] + 1)), "segment not contiguous"
      yield row, where[0], where[-1] + 1


def _matched_documents(batches, index):
  seen, tokens = [], 0
  for batch in batches:
    for row, a, b in _runs(batch):
      seen.append(index.match(tuple(batch.tokens[row, a:b].tolist())))
      tokens += b - a
  return seen, tokens


def _index(gum, configuration="tg"):
  out, documents, tokenizer = gum
  lin = CONFIGURATIONS[configuration].linearization
  source = DocumentSource(out)
  ids = [source[i].id for i in range(len(source))]
  sequences = [encode_document(documents[i], tokenizer, lin) for i in ids]
  return _SentenceIndex(sequences, SEQ_LEN)


def test_encode_base_equals_encode_document_on_every_scheme(gum):
  out, documents, tokenizer = gum
  source = DocumentSource(out)
  tokenizers = [tokenizer, make_tokenizer("gpt2")]
  for i in range(3):
    record = source[i]
    for tok in tokenizers:
      for scheme in SCHEMES:
        want = encode_document(documents[record.id], tok, scheme, seed=7)
        got = encode_base(record.base, tok, scheme, seed=7)
        for field in ("tokens", "kinds", "sentence", "unit"):
          assert np.array_equal(getattr(got, field), getattr(want, field)), (scheme, field)


def test_rows_hold_whole_sentences_of_every_document_once(gum):
  index = _index(gum)
  iterator, describe = _iterator(gum, batch_size=1)
  batches = list(iterator)
  assert "24 documents" in describe and "host 0/1" in describe
  seen, tokens = _matched_documents(batches, index)
  assert set(seen) == {d for d in range(len(index.chunks)) if index.kept_tokens(d)}
  # Every kept sentence is packed exactly once.
  assert tokens == sum(index.kept_tokens(d) for d in range(len(index.chunks)))
  accounting = iterator.accounting()
  pipeline = accounting.stage("pipeline")
  assert pipeline.notes["rows"] == len(batches) and pipeline.tokens_out == tokens
  assert pipeline.balanced() and pipeline.documents_in == 24
  too_long = sum(len(c) > SEQ_LEN for cs in index.chunks for c in cs)
  assert too_long > 0 and pipeline.dropped["sentences"]["longer than a row"] == too_long
  assert pipeline.dropped["tokens"]["sentence longer than a row"] == sum(
      len(c) for cs in index.chunks for c in cs if len(c) > SEQ_LEN)
  assert accounting.stage("prepare").documents_out == 24  # from the manifest


def test_packed_metadata_equals_documents_alone(gum):
  iterator, _ = _iterator(gum, "tgtree_mix_tg", shuffle_seed=3)
  for _, batch in zip(range(6), iterator):
    assert all(f.shape == (4, SEQ_LEN) for f in fields(batch))
    for row, a, b in _runs(batch):
      kinds = batch.meta.kind[row, a:b]
      alone = row_metadata(kinds[None], np.ones((1, b - a), np.int32))
      assert np.array_equal(batch.meta.position[row, a:b], alone.position[0])
      assert np.array_equal(batch.meta.depth[row, a:b], alone.depth[0])
      pop = alone.pop[0]  # "never popped" is the row length; a CNT2 pops at its index + 1
      never = (pop == b - a) & (kinds != Kind.CNT2)
      assert np.array_equal(batch.meta.pop[row, a:b], np.where(never, SEQ_LEN, pop + a))
      assert not batch.targets[row, a]  # the first token of a run is never a target
      assert not batch.targets[row, a:b][kinds == Kind.CNT2].any()  # tg: CNT2 not a target


def test_two_hosts_are_disjoint_and_cover_everything(gum):
  index = _index(gum)
  per_host = []
  for host in range(2):
    iterator, describe = _iterator(gum, process_index=host, process_count=2, shuffle_seed=11,
                                   batch_size=1)
    assert f"host {host}/2" in describe
    seen, _ = _matched_documents(list(iterator), index)
    per_host.append(set(seen))
  assert not per_host[0] & per_host[1]
  assert per_host[0] | per_host[1] == {d for d in range(len(index.chunks)) if index.kept_tokens(d)}
  assert all(len(s) == 12 for s in per_host)


def _assert_same(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    for i, (u, v) in enumerate(zip(fields(x), fields(y))):
      assert np.array_equal(u, v), i


@pytest.mark.parametrize("workers,prefetch", [(0, 0), (0, 2), (2, 1)])
def test_resume_yields_exactly_the_remaining_batches(gum, workers, prefetch):
  kw = dict(configuration="tgtree", num_epochs=None, worker_count=workers, prefetch=prefetch,
            shuffle_seed=5)
  first, _ = _iterator(gum, **kw)
  try:
    for _ in range(9):
      next(first)
    state = json.loads(json.dumps(first.get_state()))
    want = [next(first) for _ in range(8)]
    counts = first.accounting().stage("pipeline").to_json()
  finally:
    first.close()
  second, _ = _iterator(gum, **kw)
  try:
    second.set_state(state)
    got = [next(second) for _ in range(8)]
    assert second.accounting().stage("pipeline").to_json() == counts
  finally:
    second.close()
  _assert_same(got, want)


def test_only_the_streamed_sources_go_through_grain(gum):
  out, _, tokenizer = gum
  assert STREAMED == ("arrayrecord", "parquet", "tfds") and set(STREAMED) < set(SOURCES)
  options = PipelineOptions(seq_len=SEQ_LEN, batch_size=1)
  for source in sorted(set(SOURCES) - set(STREAMED)):
    with pytest.raises(ValueError, match=f"unknown data.source '{source}' for the grain pipeline; "
                       "expected one of arrayrecord, parquet, tfds"):
      build_iterator(source, [out], tokenizer, CONFIGURATIONS["tree"], options)


def test_state_from_another_pipeline_is_rejected(gum):
  a, _ = _iterator(gum, shuffle_seed=1)
  state = a.get_state()
  b, _ = _iterator(gum, shuffle_seed=2)
  with pytest.raises(ValueError, match="different pipeline.*shuffle_seed"):
    b.set_state(state)


def test_a_document_whose_sentences_are_all_too_long_is_counted(gum):
  out, _, tokenizer = gum
  options = PipelineOptions(seq_len=16, batch_size=1, num_epochs=1, prefetch=0, shuffle=False)
  iterator, _ = build_iterator("arrayrecord", [out], tokenizer, CONFIGURATIONS["tree"], options)
  list(iterator)
  pipeline = iterator.accounting().stage("pipeline")
  assert pipeline.dropped["documents"]["every sentence longer than a row"] > 0
  assert pipeline.balanced()


# --- Parquet streaming ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parquet_corpus(gum, tmp_path_factory):
  """FineWeb-Edu column layout (text, id, url, score…) with PTB trees in `text`."""
  pa = pytest.importorskip("pyarrow")
  pq = pytest.importorskip("pyarrow.parquet")
  _, documents, _ = gum
  ids = sorted(documents)[:12]
  texts = [ptb.format_document(documents[i]) for i in ids]
  texts[3] = texts[3] + "(S (NP broken (VP tree)\n"  # a malformed last tree
  texts[7] = ""  # an empty document
  table = pa.table({"text": texts, "id": ids, "dump": ["CC-MAIN-2024-10"] * 12,
                    "url": [f"https://example.org/{k}" for k in range(12)],
                    "file_path": ["s3://x"] * 12, "language": ["en"] * 12,
                    "language_score": [0.97] * 12, "token_count": [1000] * 12,
                    "score": [3.2] * 12, "int_score": [3] * 12})
  path = tmp_path_factory.mktemp("parquet") / "000_00000.parquet"
  pq.write_table(table, path, row_group_size=3)
  return path, [documents[i] for k, i in enumerate(ids) if k != 7]


def test_parquet_stream_packs_whole_sentences_and_counts_drops(gum, parquet_corpus):
  _, _, tokenizer = gum
  path, documents = parquet_corpus
  sequences = [encode_document(d, tokenizer, "lin2") for d in documents]
  index = _SentenceIndex(sequences, SEQ_LEN)
  options = PipelineOptions(seq_len=SEQ_LEN, batch_size=2, num_epochs=1, prefetch=0,
                            window_shuffle=4)
  iterator, describe = build_iterator("parquet", [path], tokenizer, CONFIGURATIONS["tg"], options)
  assert "4 row groups" in describe
  seen, _ = _matched_documents(list(iterator), index)
  assert len(set(seen)) >= 10
  pipeline = iterator.accounting().stage("pipeline")
  assert pipeline.documents_in == 12 and pipeline.balanced()
  assert pipeline.dropped["documents"]["empty document"] == 1
  assert pipeline.dropped["sentences"]["malformed tree (unbalanced brackets)"] == 1


def test_parquet_stream_resumes_exactly(gum, parquet_corpus):
  _, _, tokenizer = gum
  path, _ = parquet_corpus
  options = PipelineOptions(seq_len=SEQ_LEN, batch_size=2, prefetch=0, window_shuffle=5,
                            shuffle_seed=9)
  first, _ = build_iterator("parquet", [path], tokenizer, CONFIGURATIONS["tree"], options)
  for _ in range(13):
    next(first)
  state = json.loads(json.dumps(first.get_state()))
  want = [next(first) for _ in range(10)]
  second, _ = build_iterator("parquet", [path], tokenizer, CONFIGURATIONS["tree"], options)
  second.set_state(state)
  _assert_same([next(second) for _ in range(10)], want)


def test_make_train_iterator_reads_cfg_and_splits_the_global_batch(gum):
  out, _, tokenizer = gum
  cfg = ml_collections.ConfigDict({
      "data": {"source": "arrayrecord", "paths": (str(out),), "seq_len": 128,
               "linearization_seed": 0, "shuffle_seed": 4, "worker_count": 0, "prefetch": 1,
               "window_shuffle": 0, "parquet_column": "text"},
      "train": {"global_batch": 6}})
  iterator, describe = make_train_iterator(cfg, tokenizer, CONFIGURATIONS["tree"],
                                           process_index=1, process_count=2)
  batch = next(iterator)
  assert batch.tokens.shape == (3, 128) and batch.tokens.dtype == np.int32
  assert "host 1/2" in describe and "3 rows per host batch" in describe
  json.dumps(iterator.get_state())
  cfg.train.global_batch = 5
  with pytest.raises(ValueError, match="not divisible by the 2 hosts"):
    make_train_iterator(cfg, tokenizer, CONFIGURATIONS["tree"], process_index=0, process_count=2)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_endless_stream_that_packs_nothing_stops_instead_of_hanging(tmp_path, workers):
  """Every sentence longer than a row: the in-memory loader stops with "no rows"; the streamed
  one used to loop forever over its epochs. It stops with the same message and the counts."""
  from slm_jax.data.pack_iter import NoRowsError
  words = [f"w{i}" for i in range(30)]
  trees = tmp_path / "long"
  trees.mkdir()
  for d in range(3):
    (trees / f"d{d}.ptb").write_text("(S " + " ".join(words) + ")\n")
  prepare([trees], tmp_path / "prepared")
  tokenizer = make_tokenizer("word", words=words)
  options = PipelineOptions(seq_len=16, batch_size=2, num_epochs=None, prefetch=1,
                            worker_count=workers)
  iterator, _ = build_iterator("arrayrecord", [tmp_path / "prepared"], tokenizer,
                               CONFIGURATIONS["tree"], options)
  with pytest.raises(Exception, match=r"no rows: .*every sentence is longer than seq_len=16.*"
                                      r"longer than a row"):
    next(iterator)
  iterator.close()
  if workers == 0:
    with pytest.raises(NoRowsError):
      next(build_iterator("arrayrecord", [tmp_path / "prepared"], tokenizer,
                          CONFIGURATIONS["tree"], options)[0])


_ORPHAN_CHILD = """
import os, sys, time
sys.path.insert(0, {root!r})
from slm_jax import ptb
from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.grain_pipeline import PipelineOptions, build_iterator
from slm_jax.tokenizer import make_tokenizer

if __name__ == "__main__":
  files = {files!r}
  words = (w for f in files for t in ptb.read_file(f) for w in t.leaves())
  options = PipelineOptions(seq_len=256, batch_size=4, num_epochs=None, prefetch=1, worker_count=2)
  iterator, _ = build_iterator("arrayrecord", [{out!r}], make_tokenizer("word", words=words),
                               CONFIGURATIONS["tg"], options)
  next(iterator)
  print("READY", flush=True)
  time.sleep(600)
"""


def _children(pid: int) -> set[int]:
  import pathlib
  out = set()
  for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
    out |= {int(c) for c in (task / "children").read_text().split()}
  return out


@pytest.mark.skipif(not __import__("pathlib").Path("/proc/self/task").is_dir(),
                    reason="reads /proc")
def test_worker_processes_exit_when_the_trainer_is_killed(gum, tmp_path):
  """Issue 32: after `kill -9` of a trainer, its Grain workers stayed alive for good."""
  import os
  import pathlib
  import signal
  import subprocess
  import sys
  import time
  out, documents, _ = gum
  script = tmp_path / "child.py"
  script.write_text(_ORPHAN_CHILD.format(root=str(pathlib.Path(__file__).resolve().parents[1]),
                                         files=sorted(documents), out=str(out)))
  child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
  try:
    assert child.stdout.readline().strip() == "READY"
    workers = _children(child.pid)
    assert len(workers) >= 2
  finally:
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
  deadline = time.time() + 30
  alive = workers
  while alive and time.time() < deadline:
    time.sleep(0.2)
    alive = {w for w in alive if pathlib.Path(f"/proc/{w}").exists()
             and "zombie" not in pathlib.Path(f"/proc/{w}/status").read_text().lower()}
  for w in alive:  # leave nothing behind if the check fails
    os.kill(w, signal.SIGKILL)
  assert not alive, f"worker processes {sorted(alive)} outlived their parent"
