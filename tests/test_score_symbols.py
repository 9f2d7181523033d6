"""`score --text_file` on a training workdir (issue #36 item 3): a word that is one of the run's
reserved symbols (`<s>`, `(S`, `S)`, `)`, `</s>`) is encoded as training wrote it, never as
`<unk>`, and every record counts its unknown tokens (the total is reported on stderr)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from slm_jax import score  # noqa: E402
from slm_jax.train.loading import load_run  # noqa: E402
from tests.test_hf_export import exported  # noqa: E402,F401  (the fixture: a trained run)


def test_reserved_symbols_keep_their_ids_and_unknowns_are_counted(exported, tmp_path, capsys):
  workdir, _ = exported
  tok = load_run(workdir).tokenizer
  a, b = tok.base.words[1:3]
  text = tmp_path / "linearized.txt"
  text.write_text(f"<s> (S {a} (NP {b} NP) ) </s> zzz-not-a-word\n")
  out = tmp_path / "out.jsonl"
  assert score.main([f"--checkpoint={workdir}", f"--text_file={text}", f"--out={out}"]) == 0
  (record,) = [json.loads(line) for line in out.read_text().splitlines()]
  assert record["ids"] == [tok.bos_id, tok.ont_id("S"), *tok.encode_word(a), tok.ont_id("NP"),
                           *tok.encode_word(b), tok.cnt_id("NP"), tok.merged_close_id,
                           tok.eos_id, 0]
  assert record["unknown"] == 1
  assert "1 of 9 tokens are the tokenizer's unknown token" in capsys.readouterr().err
