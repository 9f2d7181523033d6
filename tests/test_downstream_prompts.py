"""OLMES cloze prompts (SPEC §11): the exact text of every task's format, shots first, one prompt
per option, WinoGrande partial scoring, the normalizer."""

from __future__ import annotations

import pytest

from slm_jax.downstream.example import MC_TASKS, TaskExample
from slm_jax.downstream.prompts import NORMALIZED_TASKS, build_prompts


def example(task, question="What do cats chase?", options=("mice", "dogs"), answer=0, **kw):
  return TaskExample(task, question, options, answer, f"{task}:1", **kw)


def test_question_answer_tasks_with_shots_first():
  demo = example("arc_easy", "Where do fish live?", ("trees", "water"), 1)
  target = example("arc_easy")
  prompts = build_prompts(target, [demo, demo])
  assert len(prompts) == 2 and [p.option for p in prompts] == [0, 1]
  assert prompts[0].context == ("Question: Where do fish live?\nAnswer:", " water",
                                "\n\nQuestion: Where do fish live?\nAnswer:", " water",
                                "\n\nQuestion: What do cats chase?\nAnswer:")
  assert prompts[0].roles == ("demo1", "demo1 answer", "demo2", "demo2 answer", "question")
  assert prompts[1].continuation == " dogs" and prompts[1].context == prompts[0].context
  assert prompts[0].text == ("Question: Where do fish live?\nAnswer: water\n\n"
                             "Question: Where do fish live?\nAnswer: water\n\n"
                             "Question: What do cats chase?\nAnswer: mice")
  for task in ("arc_challenge", "openbookqa", "commonsenseqa"):
    assert build_prompts(example(task))[0].text == "Question: What do cats chase?\nAnswer: mice"


def test_mmlu_header_then_shots():
  demo = example("mmlu", "2 + 2 =", ("4", "5"), 0, group="elementary_mathematics")
  target = example("mmlu", "3 + 1 =", ("4", "2"), 0, group="elementary_mathematics")
  prompt = build_prompts(target, [demo])[1]
  assert prompt.text == ("The following are multiple choice questions about elementary "
                         "mathematics.\n\nQuestion: 2 + 2 =\nAnswer: 4\n\nQuestion: 3 + 1 =\n"
                         "Answer: 2")
  assert prompt.roles == ("header", "demo1", "demo1 answer", "question")
  assert build_prompts(example("mmlu_redux", group="virology"))[0].text.startswith(
      "The following are multiple choice questions about virology.\n\nQuestion: ")


def test_socialiqa_piqa_hellaswag_boolq_formats():
  siqa = example("socialiqa", "What will Alex want next?", ("sleep", "eat"),
                 passage="Alex ran all day.")
  assert build_prompts(siqa)[1].text == ("Question: Alex ran all day. What will Alex want next?"
                                         "\nAnswer: eat")
  piqa = example("piqa", "Open a jar.", ("Twist the lid.", "Hit it."))
  assert build_prompts(piqa)[0].text == "Goal: Open a jar.\nAnswer: Twist the lid."
  hella = example("hellaswag", "A man sits down. He", ("plays piano.", "eats."),
                  group="Playing piano")
  assert build_prompts(hella)[0].context == ("Playing piano: A man sits down. He",)
  assert build_prompts(hella)[0].continuation == " plays piano."
  boolq = example("boolq", "is the sky blue", ("no", "yes"), 1, passage="The sky is blue.")
  prompts = build_prompts(boolq, [boolq])
  assert [p.continuation for p in prompts] == [" no", " yes"]
  assert prompts[0].text == ("The sky is blue.\nQuestion: is the sky blue?\nAnswer: yes\n\n"
                             "The sky is blue.\nQuestion: is the sky blue?\nAnswer: no")
  asked = example("boolq", "is it?", ("no", "yes"), 1, passage="It is.")
  assert "Question: is it?\nAnswer:" in build_prompts(asked)[0].text


def test_winogrande_partial_scoring():
  wino = example("winogrande", "The cat chased the mouse because _ was hungry.",
                 ("the cat", "the mouse"), 0)
  prompts = build_prompts(wino, [wino])
  assert prompts[0].context[-1] == "\n\nThe cat chased the mouse because the cat"
  assert prompts[1].context[-1] == "\n\nThe cat chased the mouse because the mouse"
  assert prompts[0].continuation == prompts[1].continuation == " was hungry."
  assert prompts[0].context[:2] == ("The cat chased the mouse because the cat", " was hungry.")
  assert prompts[1].text.endswith("because the mouse was hungry.")
  with pytest.raises(ValueError, match="exactly one blank"):
    build_prompts(example("winogrande", "No blank here.", ("a", "b")))


def test_normalizer_and_task_rules():
  assert set(NORMALIZED_TASKS) == set(MC_TASKS) - {"winogrande", "boolq"}
  assert build_prompts(example("arc_easy", options=("a big dog", "x")))[0].option_chars == 9
  with pytest.raises(ValueError, match="needs its answer"):
    build_prompts(example("arc_easy"), [example("arc_easy", answer=-1)])
  with pytest.raises(ValueError, match="demonstration"):
    build_prompts(example("arc_easy"), [example("piqa")])
  with pytest.raises(ValueError, match="empty prompt component"):
    build_prompts(example("arc_easy", options=(" ", "x")))
  with pytest.raises(ValueError, match="subject"):
    build_prompts(example("mmlu"))
