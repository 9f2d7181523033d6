"""OLMES-style cloze prompts for the 11 multiple-choice tasks (SPEC §11; Gu et al. 2024, OLMES).

`build_prompts(example, demonstrations)` gives one `Prompt` per option: the context as a tuple of
text components and the continuation that is scored. Each component carries its own leading
separator, so `Prompt.text` (= "".join(context) + continuation) is the exact OLMES string; the
encoder (`downstream.encoding`) splits each component into sentences and parses it, the
separators themselves being whitespace.

Formats (q = `question`, o = the option text, g = the gold option, "⏎" a newline):

  ARC-Easy / ARC-Challenge / OpenBookQA / CommonsenseQA / MMLU / MMLU-Redux
      "Question: {q}⏎Answer:"                       continuation " {o}"
  MMLU / MMLU-Redux, first component (subject = `group` with "_" → " ")
      "The following are multiple choice questions about {subject}."
  SocialIQA   "Question: {passage} {q}⏎Answer:"     continuation " {o}"
  PIQA        "Goal: {q}⏎Answer:"                   continuation " {o}"
  HellaSwag   "{group}: {q}" ("{q}" when `group` is empty)   continuation " {o}" (the ending)
  BoolQ       "{passage}⏎Question: {q}?⏎Answer:" ("?" only if q does not end with one)
                                                    continuation " no" / " yes"
  WinoGrande  partial scoring: with q = prefix "_" suffix, the context is "{prefix}{o}" (the option
              fills the blank; the prefix keeps its trailing space) and the continuation is
              " " + suffix.strip(), the same for every option

Shots: each demonstration is the same prompt with its gold answer, i.e. its context components
followed by its gold continuation as one more component; demonstrations come first, in order,
the first one after the MMLU header, each later one after a blank line ("⏎⏎" leads its first
component), and the target's first component is led by "⏎⏎" as well. So a 1-shot ARC prompt is
  "Question: {q1}⏎Answer:" + " {g1}" + "⏎⏎Question: {q}⏎Answer:"  →  " {o}".
Every component is a non-empty text; `roles` names each one ("header", "demo1", "demo1 answer",
…, "question") for rendering.

`NORMALIZED_TASKS`: the tasks whose score is divided by the option's character count (all but
WinoGrande and BoolQ, which use the raw sum; SPEC §11).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from slm_jax.downstream.example import MC_TASKS, TaskExample
from slm_jax.downstream.tasks import clean_hellaswag

RAW_SUM_TASKS = ("winogrande", "boolq")
NORMALIZED_TASKS = tuple(t for t in MC_TASKS if t not in RAW_SUM_TASKS)
MACRO_TASKS = ("mmlu", "mmlu_redux")  # accuracy macro-averaged over subjects (`group`)
QUESTION_ANSWER_TASKS = ("arc_easy", "arc_challenge", "openbookqa", "commonsenseqa", "mmlu",
                         "mmlu_redux")
SHOT_SEPARATOR = "\n\n"


@dataclasses.dataclass(frozen=True)
class Prompt:
  """One option of one example: the context components, the scored continuation."""

  context: tuple[str, ...]
  roles: tuple[str, ...]  # a name per context component
  continuation: str
  option: int
  head: str = ""  # the paper format's HellaSwag Ctx_b: before the continuation, not scored
  divisor: int = 0  # the normalizer when the format fixes it (0: `len(continuation.strip())`)
  joint: Any = None  # the paper format's joint parse unit of the last two components (mc_joint)

  @property
  def parse_texts(self) -> tuple[str, ...]:
    """The texts the encoder parses for this prompt (a joint unit's texts replace its two
    components)."""
    if self.joint is None:
      return self.components
    return self.components[:-2] + tuple(self.joint.texts)

  @property
  def text(self) -> str:
    """The whole prompt as one string (context, head, then continuation)."""
    return "".join(self.context) + self.head + self.continuation

  @property
  def components(self) -> tuple[str, ...]:
    """The context components, the head (when there is one), then the continuation (what the
    encoder reads; the scored continuation is always the last component)."""
    return self.context + ((self.head,) if self.head else ()) + (self.continuation,)

  @property
  def option_chars(self) -> int:
    """The normalizer: `divisor`, else characters of the continuation without its surrounding
    whitespace."""
    return self.divisor or len(self.continuation.strip())


def _blank(example: TaskExample) -> tuple[str, str]:
  """WinoGrande: the sentence before and after its one blank `_`."""
  sentence = example.question
  if sentence.count("_") != 1:
    raise ValueError(f"{example.source}: a WinoGrande sentence needs exactly one blank '_', got "
                     f"{sentence!r}")
  prefix, suffix = sentence.split("_")
  if not suffix.strip():
    raise ValueError(f"{example.source}: nothing follows the blank to score in {sentence!r}")
  return prefix, suffix.strip()


def item_context(example: TaskExample, option: int) -> tuple[str, ...]:
  """The components of the example's own prompt (no shots, no header) for `option`."""
  task, q = example.task, example.question
  if task in QUESTION_ANSWER_TASKS:
    return (f"Question: {q}\nAnswer:",)
  if task == "socialiqa":
    return (f"Question: {example.passage} {q}\nAnswer:",)
  if task == "piqa":
    return (f"Goal: {q}\nAnswer:",)
  if task == "hellaswag":
    return (hellaswag_query(example),)
  if task == "boolq":
    mark = "" if q.rstrip().endswith("?") else "?"
    return (f"{example.passage}\nQuestion: {q}{mark}\nAnswer:",)
  if task == "winogrande":
    prefix, _ = _blank(example)
    return (prefix + example.options[option],)
  raise ValueError(f"{example.source}: {task} is not a multiple-choice task "
                   f"({', '.join(MC_TASKS)})")


def hellaswag_query(example: TaskExample) -> str:
  """OLMES's HellaSwag query: the raw "{activity_label}: {ctx}" cleaned as one string
  (`tasks.clean_hellaswag`; cleaning the two apart differs where ctx opens with a tag) when the
  row's raw fields are kept, else "{group}: {q}" ("{q}" when `group` is empty)."""
  raw = dict(example.raw)
  if "activity_label" in raw and ("ctx_a" in raw or "ctx" in raw):
    context = (f"{raw['ctx_a']} {raw.get('ctx_b', '').capitalize()}" if "ctx_a" in raw
               else raw["ctx"])
    return clean_hellaswag(f"{raw['activity_label']}: {context}")
  return f"{example.group}: {example.question}" if example.group else example.question


def continuation(example: TaskExample, option: int) -> str:
  """The scored text of `option`, with its leading space."""
  if example.task == "winogrande":
    return " " + _blank(example)[1]
  return " " + example.options[option]


def header(example: TaskExample) -> tuple[str, ...]:
  """MMLU / MMLU-Redux: the subject line; nothing for other tasks."""
  if example.task in MACRO_TASKS:
    subject = example.group.replace("_", " ").strip()
    if not subject:
      raise ValueError(f"{example.source}: an MMLU example needs its subject in `group`")
    return (f"The following are multiple choice questions about {subject}.",)
  return ()


def demonstration(example: TaskExample) -> tuple[str, ...]:
  """A shot: the example's prompt for its gold option, then the gold continuation."""
  if example.answer < 0:
    raise ValueError(f"{example.source}: a demonstration needs its answer")
  return item_context(example, example.answer) + (continuation(example, example.answer),)


def build_prompts(example: TaskExample,
                  demonstrations: Sequence[TaskExample] = ()) -> list[Prompt]:
  """One `Prompt` per option of `example`, the shots first (formats in the module docstring)."""
  for shot in demonstrations:
    if shot.task != example.task:
      raise ValueError(f"{shot.source}: a {shot.task} demonstration for a {example.task} example")
  lead = header(example)
  context, roles = list(lead), ["header"] * len(lead)
  for n, shot in enumerate(demonstrations, 1):
    parts = list(demonstration(shot))
    if context:
      parts[0] = SHOT_SEPARATOR + parts[0]
    context += parts
    roles += [f"demo{n}"] * (len(parts) - 1) + [f"demo{n} answer"]
  out = []
  for option in range(len(example.options)):
    own = list(item_context(example, option))
    if context:
      own[0] = SHOT_SEPARATOR + own[0]
    out.append(Prompt(tuple(context + own), tuple(roles + ["question"] * len(own)),
                      continuation(example, option), option))
  for prompt in out:
    for text in prompt.components:
      if not text.strip():
        raise ValueError(f"{example.source}: an empty prompt component in {prompt.text!r}")
  return out
