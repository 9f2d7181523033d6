"""`--mc_format=paper`: the paper code's multiple-choice inputs (SPEC §11; qlwpc/TG-Interpolation
`olmo/eval/downstream.py` at cd50d9ef), as `prompts.Prompt`s the encoder parses like any other.

Templates (q the question, o an option, "⏎" a newline; each field is its own parse unit, except
the joint units below):

  ARC-E / ARC-C / CSQA   "Question: {q}" "⏎The answer is"               → " {o}"
  MMLU / MMLU-Redux      header "The following are multiple choice questions (with answers) about
                         {subject}." (the raw subject, underscores kept), then per item
                         "⏎Question: {q} ?" "⏎The answer is" (" ?" always appended)   → " {o}"
  SocialIQA              "Question: {context} {q}" "⏎The answer is"      → " {o}"
  PIQA                   "Goal: {q}" "⏎Answer:"                           → " {o}"
  BoolQ                  "{passage}" "⏎Question: {q} ?" "⏎The answer is" → " yes" / " no" (in
                         this order, the loader's: a tie goes to " yes"); a demonstration ends
                         " yes." / " no."
  HellaSwag              "{activity_label}: {swag(ctx_a)}" (raw label); the continuation is
                         swag(Ctx_b + " " + ending) (Ctx_b = ctx_b.capitalize(), the ending as the
                         row has it: `swag` is its only cleaning), its Ctx_b head conditioned on
                         but not scored (`Prompt.head`) and counted in the divisor
  OpenBookQA             "{stem}" → " {option}." (option capitalized after a stem ending in . ? !)
  WinoGrande             "{prefix}{option}" → " {rest of the sentence}" (prefix/rest at the blank;
                         a gold option of several words fills both contexts, as in the code)

Demonstrations: the paper's fixed shots (`PAPER_SHOTS`: train-split indices or row ids, the first
`SHOTS` of the code's lists; MMLU / MMLU-Redux the first 5 of each subject's MMLU validation
rows), each followed by a blank line; MMLU's header comes once, first, followed by one newline.
MMLU-Redux takes the code's corrected labels (`correct_redux`): several right options, replaced
option texts, and a corrected index outside the options leaves no option right (the code's label
set; the item is scored and wrong, `scoring` counts it). The length divisor is the character
count of the continuation's PTB words joined by spaces (`plain_text` minus its leading space:
"cube ." counts 6), HellaSwag's head included; S_full's divisor adds the structure tokens as the
code writes them (`paper_query.full_divisor`). Ties go to the first option, as the code's argmax
(`scoring`). The query has no BOS and the tree family's closings are those the code's double
conversion leaves (`paper_query`, through `TextEncoder(paper=True)`).

Joint parse units (`mc_joint`, each rule with its place in the code): WinoGrande parses the
gold-filled sentence once and cuts it after the option's last word (its closing and opening
brackets stay in the context), HellaSwag parses swag(Ctx_b + " " + ending) once and masks the
tokens of " " + Ctx_b out of the score (matched on token ids, as the code's `get_mask`),
OpenBookQA parses stem + " " + option + "." per option, rebuilds each option's line on the gold
line (`obqa_graft`, the code's graft, across sentences too) and cuts after the last bracket the
lines share (`Prompt.joint`; the encoder reads the prompt's last two components from that unit,
the divisor of OpenBookQA comes from the cut). The WinoGrande and OpenBookQA cuts read the
parse's brackets in every format, a terminal format's too (the code cuts its parsed lines before
converting them to any format), so every format scores the same words. A demonstration's joint
unit is one component.

Not reproduced (stated in the report's conventions): the code's template trees (its templates
carry fixed brackets; here template text is parsed like the fields), and the " \\n" newline
terminals (the encoder reads newlines as whitespace). OpenBookQA lines the code itself leaves as
parsed are counted `not_grafted`; a word the code grafts as a sentence of its own is wrapped in
its parent's label (`bare_word`, `obqa_graft`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from slm_jax.downstream import mc_joint, olmo_data, tasks
from slm_jax.downstream.example import TaskExample
from slm_jax.downstream.prompts import Prompt
from slm_jax.splitting import default_splitter

FORMATS = ("paper", "olmes")
# What the paper format's item files were scored under (recorded with them: files scored under
# other rules are refused on resume).
PAPER_RULES = ("cd50d9ef; no BOS; code closings; bracket cuts in every format; swag endings; "
               "Redux label set; S_full divisor with structure; BoolQ yes, no")
SHOT_SEPARATOR = "\n\n"
SHOTS = {"hellaswag": 5, "winogrande": 5, "mmlu": 5, "mmlu_redux": 5, "openbookqa": 5,
         "boolq": 3, "arc_easy": 3, "arc_challenge": 3, "piqa": 3, "socialiqa": 3,
         "commonsenseqa": 3}
PAPER_SHOTS: dict[str, tuple[str, tuple]] = {  # (train index | row id, in the code's order)
    "boolq": ("index", (0, 1, 7)),
    "piqa": ("index", (9, 3, 4)),
    "socialiqa": ("index", (0, 8, 1)),
    "winogrande": ("index", (19875, 26035, 2302, 13568, 7412)),
    "hellaswag": ("key", ("wikihow~19", "wikihow~66", "activitynet~v_-2dxp-mv2zo",
                          "activitynet~v_-Xl95IW5H_s", "wikihow~62")),
    "arc_easy": ("key", ("MCAS_2007_8_5189", "Mercury_SC_401169", "MCAS_2004_8_27")),
    "arc_challenge": ("key", ("Mercury_SC_415702", "MCAS_2009_5_6516", "Mercury_7233695")),
    "openbookqa": ("key", ("7-584", "7-870", "9-732", "9-782", "8-72")),
    "commonsenseqa": ("key", ("61fe6e879ff18686d7552425a36344c8",
                              "02e821a3e53cb320790950aab4489e85",
                              "23505889b94e880c3e89cff4ba119860")),
}


# --- plain text and the divisor -------------------------------------------------------------------

def plain_text(text: str) -> str:
  """The terminal stream the paper code's model reads for `text`: every PTB word with one leading
  space, a newline as the terminal " \\n" (e.g. "day.\\nQuestion:" → " day . \\n Question :")."""
  out = []
  for n, line in enumerate(text.split("\n")):
    if n:
      out.append(" \n")
    out += [" " + w for s in default_splitter().split(line) for w in s.words]
  return "".join(out)


def divisor(text: str) -> int:
  """The code's length normalizer: characters of the plain continuation without its leading
  space."""
  return max(len(plain_text(text)) - 1, 0)


# --- per-task pieces ------------------------------------------------------------------------------

def swag(text: str) -> str:
  """The cleaning the paper's HellaSwag lines went through before parsing, on the row's raw
  fields (each step once, in this order: `datatools/parse_input.py`'s `swag_preprocess`; a
  bracketed tag goes only with the space after it, so "[step]" at the end or before a letter
  stays, unlike lm-eval's `\\[.*?\\]` of `tasks.clean_hellaswag`; `HellaSwag.preprocess` in
  `downstream.py`, with two passes and no leading-dot step, is never called there)."""
  text = text.strip().replace(" [title]", ". ")
  text = re.sub(r"\[.*?\] ", "", text)
  text = re.sub(r"^\.+", "", text)
  return text.replace("..", ".").replace("  ", " ")


def _blank(example: TaskExample) -> tuple[str, str]:
  prefix, _, suffix = example.question.partition("_")
  if not suffix.strip():
    raise ValueError(f"{example.source}: nothing follows the blank in {example.question!r}")
  return prefix, suffix.strip()


def _hellaswag_parts(example: TaskExample, option: int) -> tuple[str, str]:
  """(head, rest) of a HellaSwag continuation: swag(Ctx_b + " " + ending) split after Ctx_b
  (as written, or as the cleaning left it: "the man  walks" → "The man walks"); no head when
  neither begins it. The head only names the unit's masked part: the code masks the tokens of
  " " + Ctx_b as written (`mc_joint.masked_tokens`)."""
  ctx_b = example.field("ctx_b").capitalize()
  ending = example.field(f"endings[{option}]")  # as the row has it: swag cleans it
  full = swag(f"{ctx_b} {ending}") if ctx_b else swag(ending)
  head = next((h for h in (ctx_b.strip(), swag(ctx_b)) if h and full.startswith(h)), "")
  return head, full[len(head):]


def item_context(example: TaskExample, option: int) -> tuple[str, ...]:
  """The components of the example's own prompt for `option` (no shots, no header)."""
  task, q = example.task, example.question
  if task in ("arc_easy", "arc_challenge", "commonsenseqa"):
    return (f"Question: {q}", "\nThe answer is")
  if task in ("mmlu", "mmlu_redux"):
    return (f"Question: {q} ?", "\nThe answer is")
  if task == "socialiqa":
    return (f"Question: {example.passage} {q}", "\nThe answer is")
  if task == "piqa":
    return (f"Goal: {q}", "\nAnswer:")
  if task == "boolq":
    return (example.passage, f"\nQuestion: {q} ?", "\nThe answer is")
  if task == "hellaswag":
    return (f"{example.field('activity_label')}: {swag(example.field('ctx_a'))}",)
  if task == "openbookqa":
    return (q,)
  if task == "winogrande":
    return (_blank(example)[0] + _winogrande_fill(example, option),)
  raise ValueError(f"{example.source}: {task} has no paper format")


def _winogrande_fill(example: TaskExample, option: int) -> str:
  """The word(s) filling the blank for `option`. The code swaps the option into the gold-filled
  parse by replacing the gold option's text inside the parse token of its last word, which finds
  nothing when the gold option is several words: then every option reads the gold context, the
  scores tie and the first option is predicted (counted among the ties)."""
  if example.answer >= 0:
    gold = example.options[example.answer]
    if sum(len(s.words) for s in default_splitter().split(gold)) > 1:
      return gold
  return example.options[option]


def continuation(example: TaskExample, option: int, *, demonstration: bool = False) -> str:
  """The scored text of `option` (HellaSwag: without its head), with its leading space."""
  task = example.task
  if task == "boolq":
    return " " + example.options[option] + ("." if demonstration else "")
  if task == "hellaswag":
    return " " + _hellaswag_parts(example, option)[1].strip()
  if task == "openbookqa":
    text = example.options[option]
    if example.question.rstrip()[-1:] in ".?!":
      text = text[:1].upper() + text[1:]
    return f" {text}."
  if task == "winogrande":
    return " " + _blank(example)[1]
  return " " + example.options[option]


def head(example: TaskExample, option: int) -> str:
  return _hellaswag_parts(example, option)[0] if example.task == "hellaswag" else ""


def header(example: TaskExample) -> tuple[str, ...]:
  if example.task in ("mmlu", "mmlu_redux"):
    return (f"The following are multiple choice questions (with answers) about "
            f"{example.group}.",)
  return ()


def _filled(example: TaskExample, option: int) -> str:
  """WinoGrande's sentence with `option` in the blank (the code's parse unit for the gold)."""
  _blank(example)
  return example.question.replace("_", example.options[option], 1)


def _obqa_option(example: TaskExample, option: int) -> str:
  return continuation(example, option)[1:-1]


def joint_unit(example: TaskExample, option: int) -> mc_joint.Joint | None:
  """`option`'s joint parse unit (`mc_joint`: WinoGrande, HellaSwag, OpenBookQA), None for the
  other tasks, an unlabeled WinoGrande / OpenBookQA item (the unit is built from the gold) and a
  HellaSwag item without a Ctx_b head."""
  task, gold = example.task, example.answer
  if task == "winogrande" and gold >= 0:
    return mc_joint.Joint("winogrande", (_filled(example, gold),), option, gold,
                          left=_blank(example)[0] + example.options[gold],
                          gold_text=example.options[gold], fill=example.options[option])
  if task == "hellaswag" and head(example, option):
    lead, rest = _hellaswag_parts(example, option)
    return mc_joint.Joint("hellaswag", (lead + rest,), option, gold,
                          masked=" " + example.field("ctx_b").capitalize())
  if task == "openbookqa" and gold >= 0:
    options = tuple(_obqa_option(example, k) for k in range(len(example.options)))
    return mc_joint.Joint("openbookqa", tuple(f"{example.question} {o}." for o in options),
                          option, gold, options=options)
  return None


def demonstration(example: TaskExample) -> tuple[str, ...]:
  """A shot: the example's prompt for its gold option, then the gold continuation; where the
  code parses them jointly (WinoGrande, HellaSwag's Ctx_b + ending, OpenBookQA) that unit is one
  component."""
  gold = example.answer
  if gold < 0:
    raise ValueError(f"{example.source}: a demonstration needs its answer")
  if example.task == "winogrande":
    return (_filled(example, gold),)
  if example.task == "openbookqa":
    return (f"{example.question}{continuation(example, gold)}",)
  lead = head(example, gold)
  if lead:
    return item_context(example, gold) + (" " + lead + continuation(example, gold),)
  return item_context(example, gold) + (continuation(example, gold, demonstration=True),)


def build_prompts(example: TaskExample, demonstrations: Sequence[TaskExample] = ()
                  ) -> list[Prompt]:
  """One `Prompt` per option in the paper format (module docstring); WinoGrande, HellaSwag and
  OpenBookQA prompts carry their joint parse unit (`Prompt.joint`)."""
  example = corrected(example)
  context, roles = list(header(example)), ["header"] * len(header(example))
  for n, shot in enumerate(demonstrations, 1):
    parts = list(demonstration(shot))
    parts[0] = ("\n" if n == 1 and context else "") + parts[0]
    context += parts
    roles += [f"demo{n}"] * (len(parts) - 1) + [f"demo{n} answer"]
    context[-1] += SHOT_SEPARATOR
  out = []
  for option in range(len(example.options)):
    own = list(item_context(example, option))
    if context and not demonstrations:
      own[0] = "\n" + own[0]
    lead = head(example, option)
    cont = continuation(example, option)
    full = (" " + lead if lead else "") + cont
    out.append(Prompt(tuple(context + own), tuple(roles + ["question"] * len(own)), cont,
                      option, head=(" " + lead) if lead else "", divisor=divisor(full),
                      joint=joint_unit(example, option)))
  return out


# --- MMLU-Redux corrections and the fixed demonstrations -------------------------------------------

def correct_redux(choices: Sequence[str], answer: int, error_type: str,
                  correct_answer: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
  """(choices, the label set) after the paper code's `correct_redux` (`MMLU.load_local_datasets`
  in `downstream.py` @ cd50d9ef; its mmluredux folder was corrected offline by it). The set is
  kept as the code computes it: an index outside the options stays (no option is then right:
  `ICLMetric.compute` asks `pred_id in label_dict[doc_id]`). A non-number, multi-letter
  `wrong_groundtruth` answer, which the code's `ord` cannot read, keeps the row's label."""
  choices, target = list(choices), [int(answer)]
  if error_type == "no_correct_answer" and correct_answer:
    choices[target[0]] = correct_answer
  elif error_type == "wrong_groundtruth" and correct_answer:
    try:
      target = [int(correct_answer)]
    except ValueError:
      if len(correct_answer) == 1:
        target = [ord(correct_answer) - ord("A")]
  elif error_type == "multiple_correct_answers" and correct_answer:
    ca = correct_answer.strip("()").replace(" and ", ",").replace(" or ", ",")
    try:
      target = list(map(int, ca.split(",")))
    except ValueError:
      parts = ca.split(",")
      if all(len(c) == 1 for c in parts):
        target = [ord(c) - ord("A") for c in parts]
      else:
        target = [choices.index(c) for c in parts if c in choices] or [int(answer)]
  return tuple(choices), tuple(target)


def corrected(example: TaskExample) -> TaskExample:
  """An MMLU-Redux example with the code's corrected options and label set (`answers`, out-of-range
  indices kept: `TaskExample.correct` never matches them); `answer` is its first right option,
  or, when none is, the row's own label (then not right: the item counts as scored and wrong).
  Other examples as given."""
  if example.task != "mmlu_redux" or example.answer < 0 or not example.raw:
    return example
  fields = dict(example.raw)
  choices, target = correct_redux(example.options, example.answer,
                                  fields.get("error_type", ""), fields.get("correct_answer", ""))
  right = [t for t in target if 0 <= t < len(choices)]
  return dataclasses.replace(example, options=choices, answer=right[0] if right else example.answer,
                             answers=target)


def paper_demonstrations(task: str, root, *, mmlu_root=None) -> tasks.Demonstrations:
  """The paper code's fixed shots of `task` (`PAPER_SHOTS`; MMLU: `tasks.demonstrations`).
  From an olmo_data root: the first `SHOTS[task]` of OLMES's fixed demonstrations
  (`olmo_data.OLMES_SHOTS`), the same rows (`PAPER_SHOTS`' indices and ids are the first ones of
  OLMES's lists; HellaSwag's source ids name the same two WikiHow, two ActivityNet, one WikiHow
  docs, in order), read from OLMES's processed train docs: BoolQ's passages carry their
  "Title -- " and HellaSwag's text is OLMES-cleaned (docs/DOWNSTREAM_DATA.md)."""
  if task in ("mmlu", "mmlu_redux"):
    return tasks.demonstrations(task, root, mmlu_root=mmlu_root)
  if olmo_data.OlmoData.find(root) is not None:  # the paper's shots: OLMES's first ones
    return tasks.olmes_demonstrations(task, root, SHOTS[task])
  how, wanted = PAPER_SHOTS[task]
  train = tasks.load_split(task, root, "train").examples
  if how == "index":
    missing = [i for i in wanted if i >= len(train)]
    picked = [train[i] for i in wanted if i < len(train)]
  else:
    by_key = {x.key: x for x in train}  # a later duplicate id replaces an earlier one
    missing = [k for k in wanted if k not in by_key]
    picked = [by_key[k] for k in wanted if k in by_key]
  if missing:
    raise tasks.RowDataError(f"{task} train under {root}: the paper's demonstrations "
                             f"{missing} are not there ({len(train)} rows)")
  return picked


__all__ = ["FORMATS", "PAPER_RULES", "PAPER_SHOTS", "build_prompts", "correct_redux", "corrected",
           "divisor", "paper_demonstrations", "plain_text", "swag"]
