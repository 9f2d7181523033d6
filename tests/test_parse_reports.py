"""The parse stage's output layout as its readers see it: merged counts of the finished shards,
the shards without a report (started or not), and the unfinished parses under prepare inputs."""

from __future__ import annotations

import json

from slm_jax.data.accounting import StageCounts
from slm_jax.data.parse_reports import (REPORT_NAME, merged_report, shard_dir,
                                        unfinished_parses)


def _finished(output, index, count, documents):
  folder = shard_dir(output, index, count)
  folder.mkdir(parents=True)
  counts = StageCounts(documents_in=documents, documents_out=documents)
  (folder / REPORT_NAME).write_text(json.dumps({"counts": counts.to_json()}))


def test_merged_report_and_missing_shards(tmp_path):
  _finished(tmp_path, 0, 4, 3)
  _finished(tmp_path, 2, 4, 5)
  shard_dir(tmp_path, 1, 4).mkdir()  # started, no report yet
  counts, missing = merged_report(tmp_path)
  assert counts.documents_in == 8 and counts.documents_out == 8
  assert missing == ["shard-00001-of-00004", "shard-00003-of-00004 (not started)"]


def test_unfinished_parses_under_prepare_inputs(tmp_path):
  parsed, plain = tmp_path / "parsed", tmp_path / "trees"
  _finished(parsed, 0, 2, 1)
  plain.mkdir()
  (plain / "a.ptb").write_text("(S (NP x))\n")
  assert unfinished_parses([parsed, plain, plain / "a.ptb"]) == [
      f"{parsed}/shard-00001-of-00002 (not started)"]
  _finished(parsed, 1, 2, 1)
  assert unfinished_parses([parsed]) == []
