"""The record of one downstream example, shared by the task readers, prompts and scorers.

`TaskExample` keeps the fields of the source row that a prompt needs, already cleaned of the
dataset's own markup but not yet formatted (the prompt builder of `slm_jax.downstream.prompts`
formats them, SPEC §11):

  task      one of `TASKS`
  question  the text the options complete: ARC / OpenBookQA / CommonsenseQA / MMLU(-Redux) the
            question, SocialIQA the question (its context in `passage`), PIQA the goal,
            HellaSwag the context (`ctx`), WinoGrande the sentence with its blank `_`,
            BoolQ the question, XSum the article
  options   the option texts without a leading space (BoolQ: ("yes", "no"), answer = 0 for True;
            XSum: (summary,))
  answer    index of the right option; −1 when the split is unlabeled
  source    "file:row" of the row it came from
  group     MMLU / MMLU-Redux subject, HellaSwag activity label ("" otherwise)
  passage   BoolQ passage, SocialIQA context ("" otherwise)
  key       the row's id (`id`; HellaSwag `source_id`), by which the paper format picks its fixed
            demonstrations ("" when the row has none)
  raw       (field, text) pairs of raw row fields the paper format reads (HellaSwag
            `activity_label`, `ctx_a`, `ctx_b`, `endings[i]`; MMLU-Redux `error_type`,
            `correct_answer`)
  answers   the right options when they are not just `answer` (the paper format's MMLU-Redux
            label set: several, or an index outside the options, which no prediction matches;
            empty: just `answer`)

`slm_jax.downstream.tasks` reads every task's Hub files into these records (HellaSwag's
question is `ctx_a + " " + ctx_b.capitalize()` cleaned of its WikiHow markup, as lm-eval-harness
does; every other field is kept as the Hub has it).
"""

from __future__ import annotations

import dataclasses

MC_TASKS = ("winogrande", "hellaswag", "boolq", "mmlu", "mmlu_redux", "openbookqa",
            "commonsenseqa", "socialiqa", "arc_easy", "arc_challenge", "piqa")
GENERATION_TASKS = ("xsum",)
TASKS = MC_TASKS + GENERATION_TASKS


@dataclasses.dataclass(frozen=True)
class TaskExample:
  """One example of a downstream task (fields in the module docstring)."""
  task: str
  question: str
  options: tuple[str, ...]
  answer: int
  source: str
  group: str = ""
  passage: str = ""
  key: str = ""
  raw: tuple[tuple[str, str], ...] = ()
  answers: tuple[int, ...] = ()

  def field(self, name: str) -> str:
    """A raw row field kept in `raw` (a ValueError naming the example when absent)."""
    for key, value in self.raw:
      if key == name:
        return value
    raise ValueError(f"{self.source}: the row has no {name!r} field (the paper format needs "
                     "it: use the Hub layout of docs/DOWNSTREAM_DATA.md, or --mc_format=olmes)")

  def correct(self, prediction: int) -> bool:
    """Whether `prediction` is a right option (`answers` when given, else `answer`)."""
    return prediction >= 0 and prediction in (self.answers or (self.answer,))

  def __post_init__(self):
    if self.task not in TASKS:
      raise ValueError(f"{self.source}: unknown task {self.task!r}; expected one of "
                       f"{', '.join(TASKS)}")
    if not self.options:
      raise ValueError(f"{self.source}: an example needs at least one option")
    if not -1 <= self.answer < len(self.options):
      raise ValueError(f"{self.source}: answer {self.answer} outside the "
                       f"{len(self.options)} options")
