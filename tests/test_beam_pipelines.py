"""The parse and prepare stages on Apache Beam (local runner, 2 worker processes) write exactly
what the shard CLIs write for every `--shard=i/n` on GUM, count what they do as Beam metrics, and a
rerun after a failure redoes only what did not finish, duplicating no document."""

from __future__ import annotations

import filecmp
import json
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("apache_beam", reason="the beam extra: pip install -e '.[beam]'")

from slm_jax import beam_pipelines, prepare as prepare_cli, ptb  # noqa: E402
from slm_jax.data.documents import DocumentSource  # noqa: E402
from slm_jax.parse import __main__ as parse_cli  # noqa: E402
from tests.shared_data import require_shared  # noqa: E402

SHARDS = 3


@pytest.fixture(scope="module")
def gum():
  return require_shared("gum") / "const"


@pytest.fixture(scope="module")
def raw_gum(gum, tmp_path_factory):
  """GUM's first 24 documents as running text (a sentence per line) in 2 Parquet files of 3
  row groups each: the parse stage's input."""
  folder = tmp_path_factory.mktemp("raw")
  files = sorted(gum.glob("*.ptb"))[:24]
  for part in range(2):
    ids, texts = [], []
    for path in files[part::2]:
      trees = ptb.read_file(path)
      ids.append(path.stem)
      texts.append("\n".join(" ".join(t.leaves()) for t in trees))
    pq.write_table(pa.table({"id": ids, "text": texts}), folder / f"gum-{part}.parquet",
                   row_group_size=4)
  return folder


def _files(folder: pathlib.Path) -> list[str]:
  return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                if p.is_file() and "cache" not in p.parts)


def _same_tree(a: pathlib.Path, b: pathlib.Path, skip: tuple[str, ...] = ()) -> None:
  names = [n for n in _files(a) if not n.endswith(skip)]
  assert names == [n for n in _files(b) if not n.endswith(skip)]
  _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
  assert not mismatch and not errors, mismatch + errors


def _printed(capsys) -> dict[str, int]:
  """The Beam counters the CLI printed last."""
  line = capsys.readouterr().out.splitlines()[-1]
  pairs = (item.rsplit(" ", 1) for item in line.split("): ", 1)[1].split("; "))
  return {name: int(value.replace(",", "")) for name, value in pairs}


def _counts(folder: pathlib.Path) -> list[dict]:
  """Each shard report's counts, less the notes about this run (cache hits, sentences parsed)."""
  return [{k: v for k, v in json.loads(p.read_text())["counts"].items() if k != "notes"}
          for p in sorted(folder.glob("shard-*/report.json"))]


def test_beam_parse_writes_what_the_shard_cli_writes_and_resumes(raw_gum, tmp_path, capsys):
  cli_out, beam_out = tmp_path / "cli", tmp_path / "beam"
  common = ["--backend=flat", "--batch_size=64", str(raw_gum)]
  for index in range(SHARDS):
    assert parse_cli.main([f"--output={cli_out}", f"--shard={index}/{SHARDS}", *common]) == 0
  assert beam_pipelines.main(["parse", f"--output={beam_out}", f"--num_shards={SHARDS}",
                              "--workers=2", *common]) == 0
  printed = _printed(capsys)
  assert printed["documents_in"] == printed["documents_out"] == 24
  assert printed["units parsed"] == 6 and printed["sentences_in"] > 1000
  # both record what made each shard (identity.json): the same records, byte for byte
  _same_tree(cli_out, beam_out)
  assert len(list(beam_out.glob("shard-*/identity.json"))) == SHARDS
  assert len(list(beam_out.glob("shard-*/part-*.jsonl"))) == 6

  # a worker died in the middle of one unit: its part and report are missing (a temporary file
  # is left) and so is its shard's report; the rerun parses that unit only
  (part,) = [p for p in beam_out.glob("shard-*/part-00001-000001.jsonl")]
  part.unlink()
  part.with_name("part-00001-000001.report.json").unlink()
  (part.parent / "report.json").unlink()
  (part.parent / ".part-00001-000001.jsonl.tmp").write_text('{"id": "half a')
  assert beam_pipelines.main(["parse", f"--output={beam_out}", f"--num_shards={SHARDS}",
                              *common]) == 0
  printed = _printed(capsys)
  assert printed["units parsed"] == 1 and printed["units already done"] == 5
  _same_tree(cli_out, beam_out, skip=("report.json", ".tmp"))
  assert _counts(cli_out) == _counts(beam_out)
  ids = [json.loads(line)["id"] for p in beam_out.glob("shard-*/part-*.jsonl")
         for line in p.read_text().splitlines()]
  assert len(ids) == len(set(ids)) == 24


def test_beam_prepare_writes_what_the_shard_cli_writes_and_resumes(gum, tmp_path, capsys):
  cli_out, beam_out = tmp_path / "cli", tmp_path / "beam"
  for index in range(SHARDS):
    assert prepare_cli.main([f"--output={cli_out}", f"--shard={index}/{SHARDS}", str(gum)]) == 0
  assert beam_pipelines.main(["prepare", f"--output={beam_out}", f"--num_shards={SHARDS}",
                              "--workers=2", str(gum)]) == 0
  printed = _printed(capsys)
  total = len(list(gum.glob("*.ptb")))
  assert printed["documents_in"] == printed["documents_out"] == total
  _same_tree(cli_out, beam_out)

  # shard 1 failed after writing its documents but before its manifest: the rerun prepares it
  # again (replacing its files), skips the two finished shards and duplicates nothing
  (beam_out / "manifest-00001-of-00003.json").unlink()
  assert beam_pipelines.main(["prepare", f"--output={beam_out}", f"--num_shards={SHARDS}",
                              str(gum)]) == 0
  assert _printed(capsys)["shards already done"] == 2
  _same_tree(cli_out, beam_out)
  source = DocumentSource(beam_out)
  ids = [source[i].id for i in range(len(source))]
  assert len(ids) == len(set(ids)) == total


def test_beam_parse_refuses_another_backends_shards(raw_gum, tmp_path, capsys):
  """Another backend (or options) into a finished output is refused before the pipeline runs,
  in one line naming the shard and the differing keys; nothing of the output changes."""
  out = tmp_path / "beam"
  assert beam_pipelines.main(["parse", f"--output={out}", "--num_shards=2", "--backend=flat",
                              str(raw_gum)]) == 0
  before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "cache" not in p.parts}
  capsys.readouterr()
  assert beam_pipelines.main(["parse", f"--output={out}", "--num_shards=2",
                              "--backend=passthrough", str(raw_gum)]) == 2
  error = capsys.readouterr().err.strip().splitlines()
  assert len(error) == 1 and error[0].startswith(f"error: {out}/shard-00000-of-00002 holds "
                                                 "another parse (backend: 'flat' in the folder, "
                                                 "'passthrough' now"), error
  assert {p: p.read_bytes() for p in out.rglob("*")
          if p.is_file() and "cache" not in p.parts} == before


def test_beam_cli_errors_are_one_line(gum, tmp_path, capsys):
  assert beam_pipelines.main(["prepare", f"--output={tmp_path}", "--shard=1/2", str(gum)]) == 2
  assert "error: --shard: the Beam pipeline runs every shard" in capsys.readouterr().err
  assert beam_pipelines.main(["prepare", f"--output={tmp_path}", "--num_shards=0",
                              str(gum)]) == 2
  assert "error: --num_shards=0 must be ≥ 1" in capsys.readouterr().err
