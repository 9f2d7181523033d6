"""The explain command: JSON format, hybrids, --sentences, stdin, errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from slm_jax import explain

CATS = "(S Cats (VP chase mice))\n"
HUNGRY = "(S (NP the hungry cat) (VP meows))\n"


def run(argv, stdin_text=None, capsys=None, monkeypatch=None):
  if stdin_text is not None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin_text))
  code = explain.main(argv)
  out, err = capsys.readouterr()
  return code, [json.loads(line) for line in out.splitlines() if line.startswith("{")], err


def test_tg_on_a_file(tmp_path, capsys, monkeypatch):
  path = tmp_path / "t.mrg"
  path.write_text(HUNGRY)
  code, docs, _ = run(["--linearization=lin2", "--attention=tg", str(path)], capsys=capsys,
                      monkeypatch=monkeypatch)
  assert code == 0 and len(docs) == 1
  doc = docs[0]
  assert doc["tokens"] == ("<s> (S (NP the hungry cat NP) NP) (VP meows VP) VP) S) S) "
                           "</s>").split()
  assert doc["kinds"][6:8] == ["CNT1", "CNT2"]
  assert doc["attends"][6] == [2, 3, 4, 5, 6]
  assert doc["attends"][12] == [1, 6, 10, 12]
  assert doc["targets"][7] is False and doc["targets"][6] is True and doc["targets"][0] is False
  assert doc["pop"][0] == len(doc["tokens"])
  assert set(doc) >= {"tokens", "kinds", "targets", "depth", "pop", "attends"}


def test_configuration_hybrid_and_sentences_from_stdin(capsys, monkeypatch):
  code, docs, _ = run(["--configuration=tgnomask_mix_tg", "--sentences"], CATS + HUNGRY,
                      capsys=capsys, monkeypatch=monkeypatch)
  assert code == 0 and len(docs) == 2
  assert docs[0]["configuration"] == "tgnomask_mix_tg" and docs[0]["linearization"] == "lin2"
  by_head = docs[0]["attends_by_head"]
  assert len(by_head) == 2 and "attends" not in docs[0]
  cnt2 = docs[0]["kinds"].index("CNT2")
  assert cnt2 not in by_head[0][cnt2 + 2] and cnt2 not in by_head[1][cnt2 + 2]


def test_one_document_per_file_by_default(capsys, monkeypatch):
  code, docs, _ = run(["--configuration=tree"], CATS + HUNGRY, capsys=capsys,
                      monkeypatch=monkeypatch)
  assert code == 0 and len(docs) == 1
  assert docs[0]["tokens"].count("S)") == 2 and docs[0]["kinds"].count("BOS") == 1


@pytest.mark.parametrize("argv, message", [
    (["--linearization=lin1", "--attention=tg"], "needs linearization lin2"),
    (["--configuration=nope"], "unknown configuration"),
    (["--configuration=tg", "--attention=tg"], "not both"),
])
def test_bad_flags(argv, message, capsys, monkeypatch):
  code, _, err = run(argv, CATS, capsys=capsys, monkeypatch=monkeypatch)
  assert code == 2 and message in err


def test_malformed_input_names_file_and_line(tmp_path, capsys, monkeypatch):
  path = tmp_path / "bad.mrg"
  path.write_text(CATS + "(S (NP a b)\n")
  code, _, err = run(["--configuration=tg", str(path)], capsys=capsys, monkeypatch=monkeypatch)
  assert code == 2 and f"{path}:2" in err
  code, docs, err = run(["--configuration=tg", "--lenient", str(path)], capsys=capsys,
                        monkeypatch=monkeypatch)
  assert code == 0 and len(docs) == 1 and "skipped 1" in err


def test_missing_file(capsys, monkeypatch):
  code, _, err = run(["/no/such/file.mrg"], capsys=capsys, monkeypatch=monkeypatch)
  assert code == 2 and "/no/such/file.mrg" in err


def test_embedded_and_table_format_as_a_module():
  result = subprocess.run([sys.executable, "-m", "slm_jax.explain", "--configuration=tg",
                           "--embedded=1", "--format=table"], capture_output=True, text=True,
                          check=True)
  assert result.stdout.startswith("# tg: lin2 + tg")
  assert "CNT1" in result.stdout


def test_old_and_new_flag_spellings(capsys, monkeypatch):
  """`--embedded_seed` (canonical) and `--embedded-seed` (older) give the same documents."""
  outs = []
  for flag in ("--embedded_seed=3", "--embedded-seed=3"):
    code, docs, _ = run(["--configuration=tree", "--embedded=1", flag], capsys=capsys,
                        monkeypatch=monkeypatch)
    assert code == 0
    outs.append(docs)
  assert outs[0] == outs[1]
  code, other, _ = run(["--configuration=tree", "--embedded=1"], capsys=capsys,
                       monkeypatch=monkeypatch)
  assert other != outs[0]  # the seed was really read


def test_empty_input_folders_and_lenient_counts(tmp_path, capsys, monkeypatch):
  """Nothing to explain is an error (not silence); a folder is read file by file; lenient
  counts say how many files held no tree."""
  empty = tmp_path / "empty.mrg"
  empty.write_text("")
  code, docs, err = run(["--sentences", str(empty)], capsys=capsys, monkeypatch=monkeypatch)
  assert code == 2 and not docs and "no trees to explain" in err and "files without trees: 1" in err
  assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
  folder = tmp_path / "docs"
  folder.mkdir()
  (folder / "a.mrg").write_text(CATS)
  (folder / "b.mrg").write_text(HUNGRY + CATS)
  code, docs, _ = run([str(folder)], capsys=capsys, monkeypatch=monkeypatch)
  assert code == 0 and len(docs) == 2
  bad = tmp_path / "bad.mrg"
  bad.write_text("(S (NP a b)\n")
  code, docs, err = run(["--lenient", str(bad), str(folder / "a.mrg"), str(empty)],
                        capsys=capsys, monkeypatch=monkeypatch)
  assert code == 0 and len(docs) == 1
  assert "skipped 1 malformed" in err and "files without trees: 2" in err
