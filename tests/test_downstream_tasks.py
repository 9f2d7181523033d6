"""The downstream task readers (`slm_jax.downstream.tasks`) on Hub-layout fixtures."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slm_jax.data.rows import RowDataError, read_rows
from slm_jax import cli
from slm_jax.downstream import tasks
from slm_jax.downstream.example import MC_TASKS, TASKS, TaskExample
from tests.downstream_fixtures import SUBJECTS, write_fixtures


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  root = tmp_path_factory.mktemp("downstream")
  write_fixtures(root, rows_per_split=4)
  return root


def _parquet(path, rows):
  path.parent.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows), path)
  return path


def test_registry_covers_every_task_with_the_spec_splits_and_shots():
  assert set(tasks.TASK_SOURCES) == set(TASKS) and set(tasks.SHOTS) == set(MC_TASKS)
  assert {t for t, n in tasks.SHOTS.items() if n == 5} == {
      "hellaswag", "winogrande", "mmlu", "mmlu_redux", "openbookqa"}
  sizes = {t: (s.eval_split, s.eval_size) for t, s in tasks.TASK_SOURCES.items()}
  assert sizes["winogrande"] == ("validation", 1267) and sizes["mmlu"] == ("test", 14042)
  assert sizes["openbookqa"] == ("test", 500) and sizes["arc_challenge"] == ("validation", 299)
  assert tasks.TASK_SOURCES["mmlu"].demo_split == "validation"


@pytest.mark.parametrize("task", TASKS)
def test_every_reader_reads_its_evaluation_split(root, task):
  got = tasks.load_split(task, root)
  rows = 4 * (len(SUBJECTS) if task in tasks.SUBJECT_TASKS else 1)
  assert got.split == tasks.TASK_SOURCES[task].eval_split
  assert len(got.examples) == got.counts["rows"] == rows and got.counts["unlabeled"] == 0
  for x in got.examples:
    assert isinstance(x, TaskExample) and x.task == task and x.question and all(x.options)
    assert 0 <= x.answer < len(x.options) and x.source.rsplit(":", 1)[0] in map(str, got.files)
  assert len({x.source for x in got.examples}) == rows
  assert tasks.read_task(task, root, limit=3) == got.examples[:3]
  assert tasks.read_task(task, root / task) == got.examples  # the task's own folder works too


def test_fields_map_as_the_example_docstring_says(root):
  (w, *_) = tasks.read_task("winogrande", root)
  assert "_" in w.question and w.options == ("Anna", "Brian") and w.answer == 0  # "1" → 0
  b = tasks.read_task("boolq", root)
  assert [x.answer for x in b] == [1, 0, 1, 0] and b[0].options == ("yes", "no")  # False → 1
  assert b[0].passage.startswith("In most homes")
  m = tasks.read_task("mmlu", root)
  assert [x.group for x in m] == ["astronomy"] * 4 + ["philosophy"] * 4
  s = tasks.read_task("socialiqa", root)[1]
  assert s.passage == "Brian baked bread for the neighbours." and s.answer == 1  # "2" → 1
  assert s.options == ("grateful", "annoyed", "confused")
  x = tasks.read_task("xsum", root)[0]
  assert x.question.startswith("Anna opened") and x.options[0].startswith("A new bakery")
  p = tasks.read_task("piqa", root)[1]
  assert p.question == "How do I clean a bicycle?" and p.answer == 1


def test_keyed_answers_read_letters_numbers_and_five_options(root):
  arc = tasks.read_task("arc_easy", root)
  assert [len(x.options) for x in arc] == [4, 4, 5, 4]
  assert [x.answer for x in arc] == [0, 1, 2, 3]  # row 1's labels are "1".."4"
  obqa = tasks.load_split("openbookqa", root)
  assert [p.parent.name for p in obqa.files] == ["main"]  # not the "additional" config
  assert [x.answer for x in tasks.read_task("commonsenseqa", root)] == [0, 1, 2, 3]


def test_hellaswag_is_cleaned_as_olmes_requests_show(root):
  activity, wikihow = tasks.read_task("hellaswag", root)[:2]
  assert activity.question == "Anna picks up the kettle. She"
  assert activity.group == "Cleaning windows"
  assert wikihow.question == "How to fold a bicycle. Lay it flat on a table."
  # an ending keeps the space a removed leading tag leaves: OLMES scores " " + " Fold …"
  assert wikihow.options[0] == " Fold it in half 0 times." and wikihow.group == "Home and Garden"
  cleaned = tasks.clean_hellaswag(" [header] Wash [title] Rinse it [step] well. ")
  assert cleaned == " Wash. Rinse it well."
  # a period right before " [title]" is absorbed (lm-eval's rule would give "diet.. Consume")
  assert tasks.clean_hellaswag("the diet. [title] Consume water.") == "the diet. Consume water."
  assert tasks.clean_hellaswag("poultry'.. [title] If") == "poultry'.. If"
  # "  " is replaced once, so a gap left by a tag between two spaces stays double
  assert tasks.clean_hellaswag("a  [step] b") == "a  b"


def test_mmlu_redux_subjects_come_from_folders_and_error_types_are_counted(root):
  got = tasks.load_split("mmlu_redux", root)
  assert [x.group for x in got.examples] == ["astronomy"] * 4 + ["philosophy"] * 4
  assert got.counts["error_type=ok"] == 4 and got.counts["error_type=wrong_groundtruth"] == 4
  converted = root / "redux_converted"  # the refs/convert/parquet layout: <subject>/test/
  _parquet(converted / "anatomy" / "test" / "0000.parquet",
           [{"question": "Which bone?", "choices": ["a", "b", "c", "d"], "answer": 2}])
  (x,) = tasks.read_task("mmlu_redux", converted)
  assert (x.group, x.answer) == ("anatomy", 2)


def test_unlabeled_rows_are_kept_and_counted(root):
  for task in ("winogrande", "hellaswag", "commonsenseqa", "piqa"):
    got = tasks.load_split(task, root, "test")
    assert got.counts["unlabeled"] == got.counts["rows"] == 4
    assert all(x.answer == -1 for x in got.examples)


def test_demonstrations_are_the_first_labeled_training_rows(root):
  for task in tasks.SHOTS:
    if task in tasks.SUBJECT_TASKS:
      continue
    demos = tasks.demonstrations(task, root)
    train = tasks.read_task(task, root, "train")
    assert demos == train[:tasks.SHOTS[task]] and demos == tasks.demonstrations(task, root)
    assert tasks.shots_for(demos, train[0]) is demos


def test_mmlu_demonstrations_per_subject_and_redux_borrows_them(root):
  demos = tasks.demonstrations("mmlu", root)
  assert list(demos) == list(SUBJECTS) and all(len(v) == 5 for v in demos.values())
  assert all("validation-" in x.source and x.group == s for s, v in demos.items() for x in v)
  assert demos["philosophy"][0].source.endswith(":6")  # validation rows 0-5 are astronomy
  redux = tasks.demonstrations("mmlu_redux", root / "mmlu_redux", mmlu_root=root / "mmlu")
  assert {s: [x.source for x in v] for s, v in redux.items()} == {
      s: [x.source for x in v] for s, v in demos.items()}
  assert all(x.task == "mmlu_redux" for v in redux.values() for x in v)
  target = tasks.read_task("mmlu_redux", root)[5]
  assert tasks.shots_for(redux, target) == redux["philosophy"]
  with pytest.raises(RowDataError, match="pass mmlu_root"):
    tasks.demonstrations("mmlu_redux", root)
  with pytest.raises(RowDataError, match="no demonstrations for subject 'law'"):
    tasks.shots_for(redux, TaskExample("mmlu", "q", ("a", "b"), 0, "f:0", "law"))
  with pytest.raises(RowDataError, match="xsum has no demonstrations"):
    tasks.demonstrations("xsum", root)


def test_too_few_labeled_rows_for_the_shots(tmp_path):
  _parquet(tmp_path / "data" / "train-00000-of-00001.parquet",
           [{"question": "q", "answer": True, "passage": "p"}] * 2)
  with pytest.raises(RowDataError, match="boolq: 2 labeled rows in train.*3 demonstrations"):
    tasks.demonstrations("boolq", tmp_path)


def test_find_split_layouts_and_errors(root, tmp_path):
  (path,) = tasks.find_split(root, "xsum", "test")
  assert path.relative_to(root / "xsum").as_posix() == "default/test/0000.parquet"
  old = _parquet(tmp_path / "xsum" / "default" / "xsum-test.parquet",
                 [{"document": "d", "summary": "s", "id": "1"}])
  assert tasks.find_split(tmp_path, "xsum", "test") == [old]  # the converter's older names
  (tmp_path / "hs").mkdir()
  (tmp_path / "hs" / "data").mkdir()
  (tmp_path / "hs" / "data" / "validation.jsonl").write_text(
      '{"ctx": "A man sits.", "endings": ["a", "b"], "label": 1, "activity_label": "Sit"}\n')
  (x,) = tasks.read_task("hellaswag", tmp_path / "hs")
  assert (x.question, x.answer, x.group) == ("A man sits.", 1, "Sit")
  with pytest.raises(RowDataError, match=r"no 'validation' files of piqa \(ybisk/piqa, "
                     r"revision refs/convert/parquet\); looked for plain_text/validation-\*"):
    tasks.find_split(tmp_path / "empty", "piqa", "validation")
  with pytest.raises(RowDataError, match="no 'dev' files of arc_easy.*ARC-Easy/dev-"):
    tasks.read_task("arc_easy", root, "dev")
  with pytest.raises(RowDataError, match="unknown task 'squad'; expected one of winogrande"):
    tasks.read_task("squad", root)


@pytest.mark.parametrize("task, row, field, what", [
    ("winogrande", {"sentence": "s _", "option1": "a", "answer": "1"}, "option2", "missing"),
    ("winogrande", {"sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"},
     "sentence", "no blank"),
    ("winogrande", {"sentence": "s _", "option1": "a", "option2": "b", "answer": "3"},
     "answer", "outside the 2 options"),
    ("boolq", {"question": "q", "passage": "p", "answer": "yes"}, "answer",
     "expected bool, got str"),
    ("mmlu", {"question": "q", "subject": "s", "choices": ["a", "b"], "answer": 7}, "answer",
     "outside the 2 options"),
    ("mmlu", {"question": "q", "subject": "s", "choices": "a b", "answer": 0}, "choices",
     "expected list or tuple or ndarray, got str"),
    ("openbookqa", {"question_stem": "q", "choices": {"text": ["a"], "label": ["A", "B"]},
                    "answerKey": "A"}, "choices", "expected a list of at least 2"),
    ("arc_easy", {"question": "q", "choices": {"text": ["a", "b"], "label": ["1", "2"]},
                  "answerKey": "C"}, "answerKey", "not one of the option labels"),
    ("socialiqa", {"context": "c", "question": "q", "answerA": "a", "answerB": "b",
                   "answerC": 3, "label": "1"}, "answerC", "expected str, got int"),
    ("piqa", {"goal": "g", "sol1": "a", "sol2": "b", "label": 2}, "label", "outside"),
    ("hellaswag", {"ctx": "c", "endings": ["a", "b"], "activity_label": "x"}, "label",
     "missing"),
    ("xsum", {"document": "d", "id": "1"}, "summary", "missing"),
])
def test_bad_rows_name_file_row_and_field(tmp_path, task, row, field, what):
  jsonl = tmp_path / "data" / f"{tasks.TASK_SOURCES[task].eval_split}.jsonl"
  jsonl.parent.mkdir()
  jsonl.write_text(json.dumps({"question": "fine", **row}) + "\n")
  with pytest.raises(RowDataError, match=rf"{jsonl}: row 1: field '{field}': .*{what}"):
    tasks.read_task(task, tmp_path)


def test_a_boolq_row_without_answer_and_invalid_utf8_are_named(tmp_path):
  jsonl = tmp_path / "data" / "validation.jsonl"
  jsonl.parent.mkdir()
  jsonl.write_text(json.dumps({"question": "q", "passage": "p", "answer": True}) + "\n"
                   + json.dumps({"question": "q", "passage": "p"}) + "\n")
  with pytest.raises(RowDataError, match=rf"{jsonl}: row 2: field 'answer': missing \(a BoolQ "
                     r"row needs answer: true/false, or super_glue's label: 0/1\)"):
    tasks.read_task("boolq", tmp_path)
  jsonl.write_text("\n")
  with pytest.raises(RowDataError, match=rf"boolq validation: no rows in {jsonl}"):
    tasks.read_task("boolq", tmp_path)
  jsonl.write_bytes(b'{"question": "q", "passage": "p", "answer": true}\n{"question": "\xff"}\n')
  with pytest.raises(cli.CliError, match=rf"{jsonl}:2: invalid UTF-8 at byte 64"):
    tasks.read_task("boolq", tmp_path)


def test_unknown_file_format_names_the_file(tmp_path):
  path = tmp_path / "ARC-Easy" / "validation-00000-of-00001.parquet"
  path.parent.mkdir()
  path.write_bytes(b"PK\x03\x04 a zip, not parquet")
  with pytest.raises(RowDataError, match=f"{path}: not a readable Parquet file"):
    tasks.read_task("arc_easy", tmp_path)
  csv = tmp_path / "data" / "validation.csv"
  csv.parent.mkdir()
  csv.write_text("question,answer\n")
  with pytest.raises(RowDataError, match=r"validation\.csv: unknown format '\.csv'"):
    read_rows(csv)


def test_check_size_compares_with_spec(root):
  with pytest.raises(RowDataError, match=r"piqa validation: 4 rows in 1 files, expected 1838"):
    tasks.load_split("piqa", root).check_size()
  tasks.load_split("piqa", root, "train").check_size()  # only the evaluation split is checked
