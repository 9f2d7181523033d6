"""metrics.jsonl on resume: lines after the checkpoint and a partly written last line are moved
to metrics.jsonl.dropped (with warnings); an unreadable earlier line is an error naming it."""

from __future__ import annotations

import json

import pytest

from slm_jax.train.metrics_io import MetricsWriter


def _write(folder, lines):
  (folder / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))


def test_a_partial_last_line_and_later_steps_are_moved_aside(tmp_path, capsys):
  records = [json.dumps({"step": s, "loss": 1.0}) for s in (1, 2, 3)]
  _write(tmp_path, records + ['{"step": 4, "lo'])
  writer = MetricsWriter(tmp_path, resume_step=2, tensorboard=False)
  writer.write({"step": 3, "loss": 0.5})
  writer.close()
  kept = (tmp_path / "metrics.jsonl").read_text().splitlines()
  assert kept == records[:2] + ['{"step": 3, "loss": 0.5}']
  dropped = (tmp_path / "metrics.jsonl.dropped").read_text().splitlines()
  assert dropped == [records[2], '{"step": 4, "lo']
  out = capsys.readouterr().out
  assert "1 lines after step 2" in out and "metrics.jsonl:4: a partly written last line" in out


def test_an_unreadable_line_before_the_last_is_an_error_naming_it(tmp_path):
  _write(tmp_path, ['{"step": 1}', "garbage", '{"step": 2}'])
  with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a metrics record"):
    MetricsWriter(tmp_path, resume_step=2, tensorboard=False)
  _write(tmp_path, ['{"step": 1}', "[1, 2]"])  # JSON, but not a record: also the last line
  MetricsWriter(tmp_path, resume_step=2, tensorboard=False).close()
  assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n'
