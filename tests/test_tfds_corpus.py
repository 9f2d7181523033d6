"""The TFDS build of a corpus: the counts of prepare's manifest, the batches of
data.source=arrayrecord, an exact resume, no TensorFlow on the training path, bad input named."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

tfds = pytest.importorskip("tensorflow_datasets", reason="the tfds extra is not installed")

from slm_jax.configurations import CONFIGURATIONS  # noqa: E402
from slm_jax.data.documents import DocumentSource, prepare  # noqa: E402
from slm_jax.data.grain_pipeline import PipelineOptions, build_iterator  # noqa: E402
from slm_jax.data.records import RecordError  # noqa: E402
from slm_jax.data.tfds_corpus import (TfdsDocuments, TfdsError, beam_available,  # noqa: E402
                                      build_corpus)
from slm_jax.tfds_build import main as build_main  # noqa: E402
from slm_jax.tokenizer import make_tokenizer  # noqa: E402
from tests.shared_data import require_shared  # noqa: E402
from tests.test_grain_pipeline import _assert_same  # noqa: E402
from tests.test_tfds_eval import build_like  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEQ_LEN = 256
tfds.disable_progress_bar()


def _dirty_inputs(folder: pathlib.Path) -> pathlib.Path:
  """Inputs whose drops both builds must count: an unclosed tree, an empty file, a bad JSON line."""
  folder.mkdir()
  (folder / "a.ptb").write_text("(S (NP Cats) (VP chase (NP mice)))\n(S (NP Dogs) (VP bark)\n"
                                "(S (NP Birds) (VP sing))\n")
  (folder / "c.ptb").write_text("")
  (folder / "docs.jsonl").write_text("{not json\n" + json.dumps(
      {"id": "j1", "trees": ["(S (NP It) (VP works))"]}) + "\n")
  return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """20 GUM documents + dirty inputs: prepared (one shard) and built as slm_corpus/gum20."""
  tmp = tmp_path_factory.mktemp("tfds")
  files = sorted((require_shared("gum") / "const").glob("*.ptb"))[:23]
  train = [*files[:20], _dirty_inputs(tmp / "dirty")]
  prepared = tmp / "prepared"
  manifest = prepare(train, prepared).manifest
  result = build_corpus({"train": train, "validation": files[20:]}, tmp / "tfds", name="gum20",
                        beam=False)
  source = DocumentSource(prepared)
  tokenizer = make_tokenizer("word", words=source.words())
  return {"tmp": tmp, "train": train, "files": files, "prepared": prepared, "result": result,
          "manifest": json.loads(manifest.read_text()), "tokenizer": tokenizer}


def test_the_build_holds_prepares_records_and_counts(corpus):
  result = corpus["result"]
  assert result.path == corpus["tmp"] / "tfds" / "slm_corpus" / "gum20" / "1.0.0"
  info = tfds.builder_from_directory(os.fspath(result.path)).info
  manifest = corpus["manifest"]
  prepared = manifest["accounting"]["prepare"]
  assert info.metadata["accounting"]["train"]["prepare"] == prepared  # every count, every reason
  assert prepared["dropped"]["documents"] == {"empty document": 1, "invalid JSON line": 1}
  assert prepared["dropped"]["sentences"] == {"malformed tree (unbalanced brackets)": 1}
  assert info.splits["train"].num_examples == prepared["documents_out"] == 22
  assert info.splits["validation"].num_examples == 3
  assert info.metadata["inputs"]["train"] == manifest["inputs"]
  assert (info.metadata["format"], info.metadata["version"]) == ("slm_jax.document", 1)
  documents, source = TfdsDocuments("slm_corpus/gum20", corpus["tmp"] / "tfds"), \
      DocumentSource(corpus["prepared"])
  assert [documents.raw(i) for i in range(len(documents))] == \
      [source.raw(i) for i in range(len(source))]  # the same records, in prepare's order
  assert documents.accounting().to_json() == source.accounting().to_json()


def _options(corpus, **kw):
  return PipelineOptions(**{"seq_len": SEQ_LEN, "batch_size": 4, "prefetch": 0,
                            "shuffle_seed": 5, "tfds_name": "slm_corpus/gum20",
                            "tfds_dir": str(corpus["tmp"] / "tfds"), **kw})


def _iterator(corpus, source, **kw):
  paths = [corpus["prepared"]] if source == "arrayrecord" else []
  return build_iterator(source, paths, corpus["tokenizer"], CONFIGURATIONS["tgtree"],
                        _options(corpus, **kw))


def test_arrayrecord_and_tfds_give_identical_batches(corpus):
  array, _ = _iterator(corpus, "arrayrecord")
  tfds_iter, describe = _iterator(corpus, "tfds")
  assert "TFDS slm_corpus/gum20" in describe and "22 documents" in describe
  _assert_same([next(tfds_iter) for _ in range(12)], [next(array) for _ in range(12)])
  assert tfds_iter.identity == {**array.identity, "source": "tfds"}
  assert tfds_iter.accounting().to_json() == array.accounting().to_json()


@pytest.mark.parametrize("workers,prefetch", [(0, 0), (2, 1)])
def test_the_tfds_iterator_state_round_trips(corpus, workers, prefetch):
  kw = dict(worker_count=workers, prefetch=prefetch)
  first, _ = _iterator(corpus, "tfds", **kw)
  try:
    for _ in range(7):
      next(first)
    state = json.loads(json.dumps(first.get_state()))
    want = [next(first) for _ in range(6)]
    counts = first.accounting().stage("pipeline").to_json()
  finally:
    first.close()
  second, _ = _iterator(corpus, "tfds", **kw)
  try:
    second.set_state(state)
    _assert_same([next(second) for _ in range(6)], want)
    assert second.accounting().stage("pipeline").to_json() == counts
  finally:
    second.close()
  array, _ = _iterator(corpus, "arrayrecord", **kw)
  with pytest.raises(ValueError, match="different pipeline.*'source': \\('tfds', 'arrayrecord'\\)"):
    array.set_state(state)
  array.close()


_NO_TF_CHILD = """
import json, pathlib, sys
from slm_jax.configurations import CONFIGURATIONS
from slm_jax.data.grain_pipeline import PipelineOptions, build_iterator
from slm_jax.data.tfds_corpus import build_corpus
from slm_jax.tokenizer import make_tokenizer
out, inputs = sys.argv[1], sys.argv[2:]
build_corpus({"train": inputs}, out, name="small", beam=False)
options = PipelineOptions(seq_len=256, batch_size=2, prefetch=0, tfds_name="slm_corpus/small",
                          tfds_dir=out)
iterator, _ = build_iterator("tfds", [], make_tokenizer("gpt2"), CONFIGURATIONS["tg"], options)
batch = next(iterator)
print(json.dumps({"tensorflow": sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"),
                  "shape": list(batch.tokens.shape)}))
"""


def test_building_and_training_from_tfds_import_no_tensorflow(corpus, tmp_path):
  """A `tensorflow` that logs any import sits on the path (as if TensorFlow were installed):
  building a corpus and taking a batch through `tfds.data_source` never import it."""
  fake = tmp_path / "site" / "tensorflow"
  fake.mkdir(parents=True)
  log = tmp_path / "tensorflow-imports.log"
  (fake / "__init__.py").write_text(
      "import os, traceback\n"
      "open(os.environ['TF_IMPORT_LOG'], 'a').write(''.join(traceback.format_stack()))\n"
      "raise ImportError('TensorFlow must not be imported here')\n")
  env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{ROOT}",
         "TF_IMPORT_LOG": str(log)}
  run = subprocess.run([sys.executable, "-c", _NO_TF_CHILD, str(tmp_path / "out"),
                        *map(str, corpus["files"][:2])], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  assert not log.exists(), log.read_text()[-3000:]
  result = json.loads(run.stdout.strip().splitlines()[-1])
  assert result == {"tensorflow": [], "shape": [2, 256]}


@pytest.mark.skipif(not beam_available(), reason="apache-beam is not installed (optional)")
def test_a_beam_build_equals_the_plain_build(corpus):
  result = build_corpus({"train": corpus["train"]}, corpus["tmp"] / "beam", name="gum20",
                        beam=True)
  assert result.beam and not (result.path / "_accounting").exists()
  info = tfds.builder_from_directory(os.fspath(result.path)).info
  assert info.metadata["accounting"]["train"]["prepare"] == \
      corpus["manifest"]["accounting"]["prepare"]
  beam, plain = (TfdsDocuments("slm_corpus/gum20", root) for root in
                 (corpus["tmp"] / "beam", corpus["tmp"] / "tfds"))
  assert [beam.raw(i) for i in range(len(beam))] == [plain.raw(i) for i in range(len(plain))]


def test_the_cli_builds_and_reports_every_split(corpus, tmp_path, capsys):
  files = [str(f) for f in corpus["files"][:3]]
  code = build_main([f"--output={tmp_path}", "--name=cli", files[0], files[1], "--beam=off",
                     f"--split=validation={files[2]}"])
  out = capsys.readouterr().out
  assert code == 0 and "slm_corpus/cli/1.0.0 (in process" in out
  assert "train: 2 documents → 2" in out and "validation: 1 documents → 1" in out
  assert build_main([f"--output={tmp_path}", "--name=cli", files[0]]) == 2
  assert "already built; pass --overwrite" in capsys.readouterr().err
  assert build_main([f"--output={tmp_path}", "--name=cli", files[0], "--overwrite",
                     "--beam=off"]) == 0
  assert TfdsDocuments("slm_corpus/cli", tmp_path).accounting().stage("prepare").documents_out == 1


# --- bad input -----------------------------------------------------------------------------------


def _other_features(root: pathlib.Path) -> None:
  """A TFDS dataset slm_corpus/other whose examples are not slm_jax documents."""
  build_like("slm_corpus/other", root, {"train": [(0, {"id": "d0", "text": "(S (NP Cats))"})]},
             tfds.features.FeaturesDict({"id": tfds.features.Text(), "text": tfds.features.Text()}))


def test_bad_tfds_input_is_named(corpus, tmp_path):
  root = corpus["tmp"] / "tfds"
  with pytest.raises(TfdsError, match=f"TFDS data_dir {tmp_path}/missing does not exist; build it "
                                      "with python -m slm_jax.tfds_build"):
    TfdsDocuments("slm_corpus/gum20", tmp_path / "missing")
  with pytest.raises(TfdsError, match="slm_corpus/gum20 version 2.0.0 is not in .*slm_corpus/"
                                      "gum20 \\(built versions: 1.0.0\\)"):
    TfdsDocuments("slm_corpus/gum20:2.0.0", root)
  with pytest.raises(TfdsError, match="has no TFDS dataset 'fineweb' \\(of slm_corpus/fineweb; "
                                      "it holds gum20\\)"):
    TfdsDocuments("slm_corpus/fineweb", root)
  with pytest.raises(TfdsError, match="has splits train, validation, not 'test'"):
    TfdsDocuments("slm_corpus/gum20", root, split="test")
  _other_features(tmp_path)
  with pytest.raises(TfdsError, match="other/1.0.0: its features \\(id, text\\) lack record, "
                                      "tokens, sentences, which slm_jax corpus reads"):
    TfdsDocuments("slm_corpus/other", tmp_path)
  copy = tmp_path / "newer"
  shutil.copytree(root, copy)
  metadata = copy / "slm_corpus" / "gum20" / "1.0.0" / "metadata.json"
  metadata.write_text(json.dumps({**json.loads(metadata.read_text()), "version": 2}))
  with pytest.raises(RecordError, match="records of format 'slm_jax.document' version 2; this "
                                        "slm_jax reads slm_jax.document version 1"):
    TfdsDocuments("slm_corpus/gum20", copy)
  info = copy / "slm_corpus" / "gum20" / "1.0.0" / "dataset_info.json"
  info.unlink()  # as an interrupted build leaves it
  with pytest.raises(TfdsError, match="holds no finished build of slm_corpus/gum20"):
    TfdsDocuments("slm_corpus/gum20", copy)


def test_bad_build_input_is_named(corpus, tmp_path):
  files = corpus["files"]
  with pytest.raises(TfdsError, match=f"{files[0]} is an input of both split train and split "
                                      "validation"):
    build_corpus({"train": files[:2], "validation": files[:1]}, tmp_path, name="x", beam=False)
  with pytest.raises(TfdsError, match="corpus name 'a b'"):
    build_corpus({"train": files[:1]}, tmp_path, name="a b", beam=False)
  with pytest.raises(FileNotFoundError, match="input does not exist"):
    build_corpus({"train": [tmp_path / "nope"]}, tmp_path, name="x", beam=False)
  assert not (tmp_path / "slm_corpus").exists()  # nothing was written
  (tmp_path / "empty").mkdir()
  (tmp_path / "empty" / "c.ptb").write_text("")
  with pytest.raises(RecordError, match="split train: no document left to write \\(1 documents "
                                        "→ 0; .*dropped documents: empty document ×1"):
    build_corpus({"train": [tmp_path / "empty"]}, tmp_path, name="x", beam=False)
