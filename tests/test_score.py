"""`python -m slm_jax.score` on a Hugging Face folder: log-probs equal transformers' float32 ones,
top-k agrees with them, `--bos`, `--ids_file` and the errors of bad input."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from slm_jax import cli, score  # noqa: E402
from tests.test_hf_import import ROOT_TEXT, make_hf_model, tiny_tokenizer  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  path = tmp_path_factory.mktemp("qwen2")
  model = make_hf_model("qwen2", tie_word_embeddings=True)
  model.save_pretrained(path)
  tiny_tokenizer().save_pretrained(path)
  return path, model


def reference(model, ids: list[int]) -> np.ndarray:
  with torch.no_grad():
    logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1).numpy()
  return logp


def run_score(*args) -> list[dict]:
  done = subprocess.run([sys.executable, "-m", "slm_jax.score", *map(str, args)],
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  return [json.loads(line) for line in done.stdout.splitlines()]


def test_text_file_matches_transformers(folder, tmp_path):
  path, model = folder
  text = tmp_path / "in.txt"
  text.write_text("\n".join(ROOT_TEXT[:3]) + "\n\n")
  rows = run_score(f"--checkpoint={path}", f"--text_file={text}", "--topk=3", "--bos")
  assert len(rows) == 4 and rows[3] == {"ids": [], "tokens": [], "logprobs": [], "topk": [],
                                       "unknown": 0}
  hf_tok = transformers.PreTrainedTokenizerFast.from_pretrained(path)  # its tokenizer.json as is
  for line, row in zip(ROOT_TEXT[:3], rows):
    ids = row["ids"]
    assert ids == [hf_tok.bos_token_id] + hf_tok(line, add_special_tokens=False).input_ids
    assert row["tokens"] == hf_tok.convert_ids_to_tokens(ids)
    logp = reference(model, ids)
    assert row["logprobs"][0] is None and len(row["logprobs"]) == len(ids)
    want = [logp[t - 1, ids[t]] for t in range(1, len(ids))]
    np.testing.assert_allclose(row["logprobs"][1:], want, atol=TOL)
    assert len(row["topk"]) == len(ids)
    for t, best in enumerate(row["topk"]):
      order = np.argsort(-logp[t])[:3]
      assert [b["id"] for b in best] == order.tolist()
      np.testing.assert_allclose([b["logprob"] for b in best], logp[t, order], atol=TOL)


def test_ids_file_and_no_bos(folder, tmp_path):
  path, model = folder
  ids = tmp_path / "ids.txt"
  ids.write_text("5 6 7 8\n3\n")
  out = tmp_path / "out.jsonl"
  assert score.main([f"--checkpoint={path}", f"--ids_file={ids}", f"--out={out}",
                     "--dtype=bfloat16"]) == 0
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["ids"] for r in rows] == [[5, 6, 7, 8], [3]] and rows[1]["logprobs"] == [None]
  logp = reference(model, [5, 6, 7, 8])
  np.testing.assert_allclose(rows[0]["logprobs"][1:], [logp[0, 6], logp[1, 7], logp[2, 8]],
                             atol=0.05)  # bfloat16


def test_bad_input_is_one_error_line(folder, tmp_path, capsys):
  path, _ = folder
  ids = tmp_path / "ids.txt"
  ids.write_text("5 6\n7 x\n")
  assert cli.run(score.main, [f"--checkpoint={path}", f"--ids_file={ids}"]) == cli.EXIT_USAGE
  assert f"{ids}:2: not space-separated integer ids" in capsys.readouterr().err
  ids.write_text("5 100000\n")
  assert cli.run(score.main, [f"--checkpoint={path}", f"--ids_file={ids}"]) == cli.EXIT_USAGE
  assert "id 100000 is outside the model's vocabulary" in capsys.readouterr().err
  missing = tmp_path / "nowhere"
  assert cli.run(score.main, [f"--checkpoint={missing}", f"--ids_file={ids}"]) == cli.EXIT_USAGE
  assert "no such folder" in capsys.readouterr().err


def _copy(folder, tmp_path, name):
  import shutil  # pylint: disable=g-import-not-at-top
  return pathlib.Path(shutil.copytree(folder, tmp_path / name))


def test_a_tokenizer_of_another_model_is_refused_naming_both_values(folder, tmp_path, capsys):
  """BAD 10: tokenizer.json vs config.json (vocabulary size, BOS id)."""
  path, _ = folder
  text = tmp_path / "t.txt"
  text.write_text("the cat\n")
  config = json.loads((path / "config.json").read_text())
  bigger = _copy(path, tmp_path, "bigger_vocab")  # a tokenizer.json of a larger vocabulary
  tok = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
  tok.add_tokens([f"extra{i}" for i in range(config["vocab_size"] - tok.get_vocab_size(True) + 3)])
  tok.save(str(bigger / "tokenizer.json"))
  assert cli.run(score.main, [f"--checkpoint={bigger}", f"--text_file={text}"]) == cli.EXIT_USAGE
  err = capsys.readouterr().err
  assert (f"tokenizer.json has {config['vocab_size'] + 3} token ids but the checkpoint's "
          f"embedding has {config['vocab_size']} rows") in err
  other_bos = _copy(path, tmp_path, "other_bos")
  tok_config = json.loads((path / "tokenizer_config.json").read_text())
  bos_token = tok_config.get("bos_token")
  if not bos_token:
    pytest.skip("the test tokenizer names no BOS token")
  bos = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json")).token_to_id(
      bos_token if isinstance(bos_token, str) else bos_token["content"])
  (other_bos / "config.json").write_text(json.dumps({**config, "bos_token_id": bos + 1}))
  assert cli.run(score.main, [f"--checkpoint={other_bos}", f"--text_file={text}"]) == 2
  assert (f"says bos_token {bos_token!r}, id {bos}, but {other_bos / 'config.json'} says "
          f"bos_token_id {bos + 1}") in capsys.readouterr().err


def test_text_input_problems_and_long_sequences(folder, tmp_path, capsys):
  path, _ = folder
  assert cli.run(score.main, [f"--checkpoint={path}", f"--text_file={tmp_path}"]) == 2
  assert f"--text_file={tmp_path}: is a folder" in capsys.readouterr().err
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"the cat\nsat \xff here\n")
  assert cli.run(score.main, [f"--checkpoint={path}", f"--text_file={bad}"]) == 2
  assert f"{bad}:2: invalid UTF-8 at byte 12" in capsys.readouterr().err
  trained = json.loads((path / "config.json").read_text())["max_position_embeddings"]
  ids = tmp_path / "ids.txt"
  ids.write_text(" ".join(["5"] * (trained + 3)) + "\n5 6\n")
  assert cli.run(score.main, [f"--checkpoint={path}", f"--ids_file={ids}", "--fsdp=64"]) == 2
  assert "--fsdp=64: only" in capsys.readouterr().err
  out = tmp_path / "o.jsonl"
  assert cli.run(score.main, [f"--checkpoint={path}", f"--ids_file={ids}", f"--out={out}"]) == 2
  assert capsys.readouterr().err == (
      f"error: {ids}:1: {trained + 3:,} tokens, longer than the model's context of {trained:,} "
      "(max_position_embeddings); split the line (one sequence per line)\n")


def test_a_line_longer_than_the_context_is_refused_before_scoring(folder, tmp_path, capsys,
                                                                  monkeypatch):
  """Issue #47 item 8: one 100,000-character line failed inside the scorer ("row_metadata
  supports rows of at most 32,767 tokens"; 60,000 characters grew past 12 GB first); now one
  line naming the input line and the limit, and nothing is scored."""
  path, _ = folder
  text = tmp_path / "long.txt"
  text.write_text("the cat sat\n" + "the cats chase the mice " * 4200 + "\nthe door\n")
  monkeypatch.setattr(score.TextScorer, "score", lambda *a, **k: pytest.fail("scored"))
  assert cli.run(score.main, [f"--checkpoint={path}", f"--text_file={text}"]) == 2
  err = capsys.readouterr().err
  assert err.startswith(f"error: {text}:2: ") and err.count("\n") == 1
  assert "longer than the model's context of 256 (max_position_embeddings)" in err


def test_one_line_is_one_record_whatever_separators_it_holds(folder, tmp_path):
  """Issue #47 item 4: str.splitlines split a line at \\x85, \\u2028, \\x0c, … into several
  records; lines end at \\n only (\\r\\n tolerated)."""
  path, _ = folder
  text = tmp_path / "in.txt"
  text.write_bytes("the cat\u2028sat\x85here\x0c.\r\nthe door\n".encode())
  rows = run_score(f"--checkpoint={path}", f"--text_file={text}")
  assert len(rows) == 2


def test_non_finite_log_probs_are_null_and_exit_1(folder, monkeypatch, capsys):
  import io  # pylint: disable=g-import-not-at-top
  path, _ = folder
  source = score.open_checkpoint(path)
  real = score.TextScorer.score

  def with_nan(self, sequences, topk=0):
    results = real(self, sequences, topk)
    results[0].logprobs[0] = float("nan")
    return results

  monkeypatch.setattr(score.TextScorer, "score", with_nan)
  out = io.StringIO()
  assert score.score_lines(source, [[5, 6, 7]], out) == (1, 1)
  record = json.loads(out.getvalue())
  assert record["logprobs"][:2] == [None, None] and "NaN" not in out.getvalue()
