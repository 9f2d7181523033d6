"""`--mc_format=paper`: one item per task built from a fixture row (the rows of the Hub layouts
that `downstream.tasks` reads) equals the paper code's input, written by hand from
qlwpc/TG-Interpolation `olmo/eval/downstream.py` @ cd50d9ef in its plain-text form (PTB words with
a leading space, " \\n" for a newline), with the code's length divisors and gold labels."""

from __future__ import annotations

import pytest

from slm_jax.data.rows import RowReader
from slm_jax.downstream import paper_format, prompts, tasks
from slm_jax.downstream.paper_format import build_prompts, plain_text


def example(task: str, row: dict, group: str = ""):
  base = tasks.READERS[task](RowReader("fixture.jsonl", 0, row), task, group)
  return paper_format.corrected(tasks.with_row_fields(base, row))


def plain(prompt) -> tuple[str, str]:
  """(context, continuation) of a prompt in the paper code's plain-text form."""
  return plain_text("".join(prompt.context)), plain_text(prompt.head + prompt.continuation)


def check(task, row, context, continuations, divisors, label, group=""):
  x = example(task, row, group)
  built = build_prompts(x)
  assert [plain(p)[0] for p in built] == ([context] * len(built) if isinstance(context, str)
                                          else context)
  assert [plain(p)[1] for p in built] == continuations
  if divisors is not None:
    assert [p.option_chars for p in built] == divisors
  assert x.answer == label
  return x, built


def test_winogrande():
  row = {"sentence": "Sarah was a much better surgeon than Maria so _ always got the harder "
                     "cases.", "option1": "Sarah", "option2": "Maria", "answer": "1"}
  check("winogrande", row, [" Sarah was a much better surgeon than Maria so Sarah",
                            " Sarah was a much better surgeon than Maria so Maria"],
        [" always got the harder cases ."] * 2, None, 0)


def test_hellaswag_moves_ctx_b_into_an_unscored_head():
  row = {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a "
         "roof.", "ctx_b": "he", "ctx": "A man is sitting on a roof. he",
         "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                     "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
         "source_id": "activitynet~v_-JhWjGDPHMY", "split": "val", "split_type": "indomain",
         "label": "3"}
  x, built = check("hellaswag", row, " Roof shingle removal : A man is sitting on a roof .",
                   [" He is using wrap to wrap a pair of skis .", " He is ripping level tiles off .",
                    " He is holding a rubik 's cube .", " He starts pulling up roofing on a roof ."],
                   [41, 31, 31, 40], 3)
  assert x.key == "activitynet~v_-JhWjGDPHMY"
  assert all(p.head == " He" and p.components[-2] == " He" for p in built)  # not scored
  assert paper_format.swag("A [header] x.. y  z [title]w") == "A x. y z. w"


@pytest.mark.parametrize("raw, cleaned", [
    ("  Put on gloves.  ", "Put on gloves."),  # strip
    ("Clean shoes [title] Buy soap", "Clean shoes. Buy soap"),  # " [title]" → ". ", then "  "
    ("Buy soap. [title] Rinse", "Buy soap. Rinse"),  # ". " + ". " → ".." → "."
    ("[header] Wash hands [step] rinse", "Wash hands rinse"),  # every "[…] ", non-greedy
    ("[a] b] c", "b] c"),
    ("...then he runs", "then he runs"),  # leading dots (parse_input's swag_preprocess only)
    ("Wait... go", "Wait.. go"),  # ".." → "." once: "..." keeps two
    ("a   b", "a  b"),  # "  " → " " once: three spaces keep two
])
def test_swag_is_the_cleaning_the_papers_hellaswag_lines_went_through(raw, cleaned):
  """The parsed lines the paper code reads were cleaned by `datatools/parse_input.py`'s
  `swag_preprocess` (each step once, leading dots removed); `HellaSwag.preprocess` in
  `downstream.py` (two passes, no leading-dot step: "Wait... go" → "Wait. go", "...then" →
  ".then") is never called there."""
  assert paper_format.swag(raw) == cleaned


def test_hellaswag_endings_are_cleaned_by_swag_alone():
  """`swag_preprocess` runs on the row's raw `ctx_b.capitalize() + " " + ending` and removes a
  bracketed tag only with the space after it: "[step]" at the end and "[substeps]" before a word
  stay (they were parsed). Before, the endings were first cleaned by lm-eval's `\\[.*?\\]`
  (`tasks.clean_hellaswag`): " He rinses the cup", " He dries it ."."""
  row = {"ind": 5, "activity_label": "Making tea", "ctx_a": "A man boils water. [header] He waits.",
         "ctx_b": "he", "endings": ["rinses the cup [step]", "[substeps]dries it.",
                                    "pours tea [title]into a cup.", "waits [a] b] here."],
         "source_id": "wikihow~1", "split": "val", "split_type": "indomain", "label": "1"}
  x, built = check("hellaswag", row, " Making tea : A man boils water . He waits .",
                   [" He rinses the cup [ step ]", " He [ substeps ] dries it .",
                    " He pours tea . into a cup .", " He waits b ] here ."], [26, 26, 27, 19], 1)
  assert x.options[:2] == ("rinses the cup ", "dries it.")  # the olmes format's cleaning
  assert built[0].joint.texts == ("He rinses the cup [step]",)


def test_hellaswag_ctx_b_the_cleaning_changed_still_heads_its_unit():
  """ctx_b "the man  then" is "The man then" in the cleaned line: it still heads the unit, whose
  masked text stays the code's " " + Ctx_b as written (`get_mask` tokenizes that)."""
  row = {"ind": 1, "activity_label": "Running", "ctx_a": "A man stands.", "ctx_b": "the man  then",
         "endings": ["runs.", "sits.", "jumps.", "waves."], "source_id": "x", "split": "val",
         "split_type": "indomain", "label": "0"}
  built = build_prompts(example("hellaswag", row))
  assert [p.head for p in built] == [" The man then"] * 4
  assert built[0].joint.texts == ("The man then runs.",)
  assert built[0].joint.masked == " The man  then"


def test_boolq_and_its_demonstration():
  row = {"question": "is the sky blue", "answer": True, "passage": "The sky is blue on a clear day."}
  context = " The sky is blue on a clear day . \n Question : is the sky blue ? \n The answer is"
  x, _ = check("boolq", row, context, [" yes", " no"], None, 0)  # options ("yes", "no")
  (target,) = build_prompts(x, [x])[:1]
  assert plain_text("".join(target.context)) == context + " yes . \n \n" + context


def test_boolq_options_are_yes_then_no_so_a_tie_goes_to_yes():
  """`BoolQ.doc_to_continuations` is [" yes", " no"] and `doc_to_label` 0 for True: a tie is
  " yes" by the code's argmax (before, the options were ("no", "yes") and a tie was " no")."""
  from slm_jax.downstream.scoring import decide
  for answer, label in ((True, 0), (False, 1)):
    x = example("boolq", {"question": "is it", "answer": answer, "passage": "It is."})
    assert x.options == ("yes", "no") and x.answer == label
    assert [p.continuation for p in build_prompts(x)] == [" yes", " no"]
  prediction, tie, _ = decide([-1.0, -1.0], ties_to_first=True)
  assert tie and x.options[prediction] == "yes"
  unlabeled = example("boolq", {"question": "is it", "label": -1, "passage": "It is."})
  assert unlabeled.answer == -1


def test_mmlu_header_question_mark_and_shots():
  row = {"question": "Which of the following terms describes the body's ability to maintain its "
         "normal state?", "subject": "anatomy", "choices": ["Anabolism", "Catabolism",
                                                            "Tolerance", "Homeostasis"],
         "answer": 3}
  head = " The following are multiple choice questions ( with answers ) about anatomy . \n"
  block = (" Question : Which of the following terms describes the body 's ability to maintain "
           "its normal state ? ? \n The answer is")
  x, _ = check("mmlu", row, head + block, [" Anabolism", " Catabolism", " Tolerance",
                                          " Homeostasis"], [9, 10, 9, 11], 3)
  shot = block + " Homeostasis \n \n"
  assert plain_text("".join(build_prompts(x, [x, x])[0].context)) == head + shot * 2 + block


@pytest.mark.parametrize("error_type, correct_answer, choices, golds", [
    ("wrong_groundtruth", "B", ("3", "4", "5", "22"), (1,)),
    ("multiple_correct_answers", "(A and B)", ("3", "4", "5", "22"), (0, 1)),
    ("multiple_correct_answers", "A, B", ("3", "4", "5", "22"), (0,)),
    ("no_correct_answer", "four", ("four", "4", "5", "22"), (0,)),
    ("wrong_groundtruth", "1", ("3", "4", "5", "22"), (1,)),
    ("multiple_correct_answers", "B,E", ("3", "4", "5", "22"), (1, 4)),  # E: not an option
    ("ok", "", ("3", "4", "5", "22"), (0,)),
])
def test_mmlu_redux_corrected_labels(error_type, correct_answer, choices, golds):
  row = {"question": "What is 2 + 2?", "choices": ["3", "4", "5", "22"], "answer": 0,
         "error_type": error_type, "source": "x", "correct_answer": correct_answer,
         "potential_reason": ""}
  x, built = check("mmlu_redux", row, " The following are multiple choice questions ( with "
                   "answers ) about anatomy . \n Question : What is 2 + 2 ? ? \n The answer is",
                   [" " + c for c in choices], None, golds[0], group="anatomy")
  assert (x.answers or (x.answer,)) == golds
  assert all(x.correct(g) for g in golds) and not x.correct(3)


@pytest.mark.parametrize("correct_answer, label_set", [("E", (4,)), ("7", (7,))])
def test_mmlu_redux_index_outside_the_options_leaves_no_option_right(correct_answer, label_set):
  """`correct_redux` keeps `[ord("E") - ord("A")]` / `[int("7")]` as the label set and
  `ICLMetric.compute` asks `pred_id in label_dict[doc_id]`: no option is right, the item is
  scored and wrong. Before, the corrected index fell back to the original label (option A)."""
  from slm_jax.downstream.scoring import OptionScore, item_record, summarize
  row = {"question": "What is 2 + 2?", "choices": ["3", "4", "5", "22"], "answer": 0,
         "error_type": "wrong_groundtruth", "source": "x", "correct_answer": correct_answer,
         "potential_reason": ""}
  x = example("mmlu_redux", row, "anatomy")
  assert x.answers == label_set and not any(x.correct(k) for k in range(4))
  records = [item_record(0, x, 0, [OptionScore(-1.0, -1.0, 1, 1, 1)] + [
      OptionScore(-9.0, -9.0, 1, 1, 1)] * 3, ties_to_first=True)]
  assert records[0]["prediction"] == 0 and not records[0]["correct"]
  summary = summarize("mmlu_redux", records)
  assert summary["scored"] == 1 and summary["accuracy"] == 0.0
  assert summary["no_right_option"] == 1


def test_openbookqa_stem_then_option_with_a_period():
  row = {"id": "7-980", "question_stem": "The sun is responsible for",
         "choices": {"text": ["puppies learning new tricks", "children growing up and getting old",
                              "flowers wilting in a vase", "plants sprouting, blooming and wilting"],
                     "label": ["A", "B", "C", "D"]}, "answerKey": "D"}
  x, _ = check("openbookqa", row, " The sun is responsible for",
               [" puppies learning new tricks .", " children growing up and getting old .",
                " flowers wilting in a vase .", " plants sprouting , blooming and wilting ."],
               [29, 37, 27, 41], 3)
  assert x.key == "7-980"


def test_commonsenseqa():
  row = {"id": "075e483d21c29a511267ef62bedc0461", "question": "The sanctions against the school "
         "were a punishing blow, and they seemed to what the efforts the school had made to "
         "change?", "question_concept": "punishing",
         "choices": {"label": ["A", "B", "C", "D", "E"],
                     "text": ["ignore", "enforce", "authoritarian", "yell at", "avoid"]},
         "answerKey": "A"}
  check("commonsenseqa", row, " Question : The sanctions against the school were a punishing "
        "blow , and they seemed to what the efforts the school had made to change ? \n The "
        "answer is", [" ignore", " enforce", " authoritarian", " yell at", " avoid"],
        [6, 7, 13, 7, 5], 0)


def test_socialiqa():
  row = {"context": "Cameron decided to have a barbecue and gathered her friends together.",
         "question": "How would Others feel as a result?", "answerA": "like attending",
         "answerB": "like staying home", "answerC": "a good friend to have", "label": "1"}
  check("socialiqa", row, " Question : Cameron decided to have a barbecue and gathered her "
        "friends together . How would Others feel as a result ? \n The answer is",
        [" like attending", " like staying home", " a good friend to have"], [14, 17, 21], 0)


def test_arc_easy_and_challenge():
  row = {"id": "Mercury_7220990", "question": "Which factor will most likely cause a person to "
         "develop a fever?", "choices": {"text": ["a leg muscle relaxing after exercise",
                                                  "a bacterial population in the bloodstream",
                                                  "several viral particles on the skin",
                                                  "carbohydrates being digested in the stomach"],
                                         "label": ["A", "B", "C", "D"]}, "answerKey": "B"}
  check("arc_easy", row, " Question : Which factor will most likely cause a person to develop a "
        "fever ? \n The answer is", [" a leg muscle relaxing after exercise",
                                     " a bacterial population in the bloodstream",
                                     " several viral particles on the skin",
                                     " carbohydrates being digested in the stomach"],
        [36, 41, 35, 43], 1)
  row = {"id": "X_1", "question": "Which form of energy is produced when a rubber band vibrates?",
         "choices": {"text": ["chemical", "light", "electrical", "sound"],
                     "label": ["1", "2", "3", "4"]}, "answerKey": "4"}
  check("arc_challenge", row, " Question : Which form of energy is produced when a rubber band "
        "vibrates ? \n The answer is", [" chemical", " light", " electrical", " sound"],
        [8, 5, 10, 5], 3)


def test_piqa():
  row = {"goal": "When boiling butter, when it's ready, you can", "sol1": "Pour it onto a plate",
         "sol2": "Pour it into a jar", "label": 1}
  check("piqa", row, " Goal : When boiling butter , when it 's ready , you can \n Answer :",
        [" Pour it onto a plate", " Pour it into a jar"], [20, 18], 1)


def test_the_olmes_format_differs_and_ties_go_to_the_first_option_in_paper():
  from slm_jax.downstream.scoring import decide, prompt_builder
  row = {"goal": "When boiling butter, when it's ready, you can", "sol1": "Pour it onto a plate",
         "sol2": "Pour it into a jar", "label": 1}
  x = example("piqa", row)
  assert prompt_builder("olmes") is prompts.build_prompts
  assert prompts.build_prompts(x)[0].text == "Goal: When boiling butter, when it's ready, you " \
      "can\nAnswer: Pour it onto a plate"
  assert decide([1.0, 1.0]) == (-1, True, False)
  assert decide([1.0, 1.0], ties_to_first=True) == (0, True, False)
  with pytest.raises(ValueError, match="mc_format must be one of paper, olmes"):
    prompt_builder("lm-eval")


def test_paper_demonstrations_are_the_codes_fixed_rows(tmp_path):
  import pyarrow as pa
  import pyarrow.parquet as pq
  from slm_jax.data.rows import RowDataError
  folder = tmp_path / "piqa" / "plain_text" / "train"
  folder.mkdir(parents=True)
  rows = [{"goal": f"goal {i}", "sol1": "a", "sol2": "b", "label": i % 2} for i in range(10)]
  pq.write_table(pa.Table.from_pylist(rows), folder / "0000.parquet")
  picked = paper_format.paper_demonstrations("piqa", tmp_path / "piqa")
  assert [x.question for x in picked] == ["goal 9", "goal 3", "goal 4"]  # train indices 9, 3, 4
  folder = tmp_path / "arc_easy" / "ARC-Easy"
  folder.mkdir(parents=True)
  arc = [{"id": i, "question": f"q {i}?", "choices": {"text": ["a", "b"], "label": ["A", "B"]},
          "answerKey": "A"} for i in ("MCAS_2004_8_27", "Mercury_SC_401169", "MCAS_2007_8_5189",
                                      "MCAS_2004_8_27")]
  arc[3]["question"] = "the later duplicate"
  pq.write_table(pa.Table.from_pylist(arc), folder / "train-00000-of-00001.parquet")
  picked = paper_format.paper_demonstrations("arc_easy", tmp_path / "arc_easy")
  assert [x.question for x in picked] == ["q MCAS_2007_8_5189?", "q Mercury_SC_401169?",
                                          "the later duplicate"]
  pq.write_table(pa.Table.from_pylist(arc[:2]), folder / "train-00000-of-00001.parquet")
  with pytest.raises(RowDataError, match=r"\['MCAS_2007_8_5189'\] are not there"):
    paper_format.paper_demonstrations("arc_easy", tmp_path / "arc_easy")


def test_a_row_without_the_fields_the_paper_format_reads_is_a_named_error():
  row = {"activity_label": "Roof", "ctx": "A man is on a roof. he", "endings": ["a", "b"],
         "label": "0"}
  with pytest.raises(ValueError, match=r"fixture.jsonl:0: the row has no 'ctx_a' field"):
    build_prompts(example("hellaswag", row))


def test_winogrande_multi_word_gold_fills_both_contexts_as_the_code_does():
  row = {"sentence": "The trophy fit in the suitcase because _ was small.",
         "option1": "the trophy", "option2": "the suitcase", "answer": "2"}
  x, built = check("winogrande", row, [" The trophy fit in the suitcase because the suitcase"] * 2,
                   [" was small ."] * 2, None, 1)
  assert built[0].context == built[1].context  # the scores tie: the code predicts option 1
