"""`python -m slm_jax.score` on a Hugging Face folder: log-probs equal transformers' float32 ones,
top-k agrees with them, `--bos`, `--ids_file` and the errors of bad input."""

from __future__ import annotations

import json
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
