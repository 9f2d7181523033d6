"""The parse stage's output layout as its readers see it: shard folders and their reports.

`python -m slm_jax.parse` (`parse.stage`) writes `OUTPUT/shard-00003-of-00016/` per shard and,
when the shard is finished, its `report.json` (an `accounting.StageCounts`). The prepare stage
(`documents.prepare`, `tfds_corpus.build_corpus`) refuses an unfinished parse, and
`python -m slm_jax.parse --report` merges the counts: both read the layout here, below the parse
stage (which builds on the data layer), so the data layer never imports the parse stage.

- `shard_dir(output, index, count)`: a shard's folder; `SHARD_GLOB` matches every one.
- `merged_report(output)`: the counts of every finished shard, and which shards have no report.
- `unfinished_parses(paths)`: the shards without a report under the input folders of a prepare.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Sequence

from slm_jax.data.accounting import StageCounts

REPORT_NAME = "report.json"
SHARD_GLOB = "shard-*-of-*"


def shard_dir(output: str | pathlib.Path, index: int, count: int) -> pathlib.Path:
  return pathlib.Path(output) / f"shard-{index:05d}-of-{count:05d}"


def merged_report(output: str | pathlib.Path) -> tuple[StageCounts, list[str]]:
  """The counts of every finished shard under `output`, and which shards have no report yet."""
  total = StageCounts()
  missing = []
  shards = sorted(pathlib.Path(output).glob(SHARD_GLOB))
  for directory in shards:
    report = directory / REPORT_NAME
    if report.exists():
      total.merge(StageCounts.from_json(json.loads(report.read_text())["counts"]))
    else:
      missing.append(directory.name)
  if shards:
    count = int(shards[0].name.rsplit("-", 1)[1])
    present = {int(d.name.split("-")[1]) for d in shards}
    missing.extend(f"{shard_dir('', i, count)} (not started)" for i in range(count)
                   if i not in present)
  return total, missing


def unfinished_parses(paths: Sequence[str | os.PathLike]) -> list[str]:
  """The parse-stage shards under input folders that have no report yet (`parse --report`)."""
  missing = []
  for path in map(pathlib.Path, paths):
    if path.is_dir() and any(path.glob(SHARD_GLOB)):
      missing.extend(f"{path}/{name}" for name in merged_report(path)[1])
  return missing
