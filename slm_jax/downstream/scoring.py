"""Multiple-choice scoring of one model on one task: option scores, predictions, accuracy (SPEC §11).

Each option's `Prompt` (`downstream.prompts`) is encoded as one document (`downstream.encoding`:
context components, then the continuation as the last component, no EOS; a pretrained
checkpoint's prompt as raw text, `downstream.raw_text_prompts`, SPEC §13) and scored
teacher-forced by `inference.scorer.Scorer.logprobs` (many options per call, batched and
length-bucketed). With C = the tokens of the continuation component:
  full   S_full = Σ log p(t) over t ∈ C that are targets of the configuration (SPEC §4: every token,
         except CNT2 under TG-family attention, whose log p is not trained)
  term   S_term = Σ log p(t) over t ∈ C of kind TERMINAL or PAUSE: the words' pieces (and, for pause
         models, the pause tokens after them, scored as those models are trained, SPEC §9); the
         continuation's structure tokens are conditioned on but not counted
  chars  len(continuation.strip()): the option's characters without its leading space (the raw
         text, so every model of a comparison shares the normalizer); the paper format's
         `Prompt.divisor`, or its joint unit's (`Encoded.divisor`: OpenBookQA's cut)
  chars_full  S_full's normalizer: `chars`, except in the paper format, where it is the code's
         `cont_str_len` of the continuation with its structure written out
         (`paper_query.full_divisor`: each opening / closing token as the code spells it)
  norm   term / chars
The primary score of an option is `norm` for `prompts.NORMALIZED_TASKS` and `term` for WinoGrande
and BoolQ (raw sums); the prediction is its argmax. An item is wrong when the highest primary
score is shared by two options (a tie) or any option's primary score is not finite; both are
counted (the paper format gives a tie to the first option, as the code's argmax).
`prediction_full` is the same rule over S_full / chars_full: a secondary column. An item is right
when its prediction is one of its right options; an item whose right options all lie outside its
options (the paper format's MMLU-Redux corrections) is scored and always wrong, counted as
`no_right_option`. Accuracy is the mean over items, except MMLU / MMLU-Redux: the mean over
subjects (`group`) of each subject's accuracy.

`evaluate_task` is resumable: one JSON line per item in `OUT/{task}.jsonl` (index, source, group,
gold, prediction, correct, tie, nonfinite, shots, per-option scores), flushed after every chunk of
items; a restart skips the items already written, and a last line cut short by a kill is detected,
removed and redone. `OUT/{task}.meta.json` holds what the scores depend on (configuration, tree
source, item count, the checkpoint: `made_by`, its step and parameters digest); resuming with
different ones is refused naming the differing keys (`check_item_meta`, `slm_jax.identity`). Progress (items, items/s, ETA) goes
to stderr.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from slm_jax import cli, files
from slm_jax.downstream.encoding import TextEncoder, TreeSource
from slm_jax.downstream.example import MC_TASKS, TaskExample
from slm_jax.downstream import paper_format, paper_query
from slm_jax.downstream.prompts import MACRO_TASKS, NORMALIZED_TASKS, Prompt, build_prompts
from slm_jax.downstream.raw_text_prompts import RawTextEncoder
from slm_jax.eval.raw_text import RawTextScorer
from slm_jax.inference.scorer import Scorer
from slm_jax.kinds import PAUSE_CODE, TERMINAL_CODE
from slm_jax import identity

Demonstrations = (Sequence[TaskExample] | Mapping[str, Sequence[TaskExample]]
                  | Callable[[TaskExample], Sequence[TaskExample]])


@dataclasses.dataclass(frozen=True)
class OptionScore:
  full: float
  term: float
  chars: int
  tokens: int  # continuation tokens
  terminals: int  # continuation tokens counted in `term`
  chars_full: int = -1  # S_full's normalizer (module docstring); −1: `chars`

  def __post_init__(self):
    if self.chars_full < 0:
      object.__setattr__(self, "chars_full", self.chars)

  @property
  def norm(self) -> float:
    return self.term / self.chars if self.chars else math.nan

  def as_json(self) -> dict:
    return dict(full=self.full, term=self.term, norm=self.norm, chars=self.chars,
                chars_full=self.chars_full, tokens=self.tokens, terminals=self.terminals)


def continuation_scores(scorer: Scorer, encoder: TextEncoder,
                        prompts: Sequence[Prompt]) -> list[OptionScore]:
  """S_full, S_term and the normalizers of each prompt's continuation, in one batched call."""
  encoded = [encoder.encode(p.components, joint=p.joint) for p in prompts]
  out = []
  for prompt, enc, lp in zip(prompts, encoded, scorer.logprobs([e.sequence for e in encoded])):
    kinds_T = enc.sequence.kinds
    last = len(prompt.components) - 1
    continuation_T = enc.component_T == last
    full_T = continuation_T & scorer.target_mask(kinds_T)
    term_T = continuation_T & ((kinds_T == TERMINAL_CODE) | (kinds_T == PAUSE_CODE))
    chars = enc.divisor or prompt.option_chars
    chars_full = chars
    if encoder.paper:  # the code's continuation string: the head's tokens too
      code_T = enc.component_T >= last - bool(prompt.head)
      chars_full = paper_query.full_divisor(chars, enc.sequence.tokens[code_T], encoder.tokenizer)
    out.append(OptionScore(float(lp[full_T[1:]].sum()), float(lp[term_T[1:]].sum()), chars,
                           int(continuation_T.sum()), int(term_T.sum()), chars_full))
  return out


def decide(scores: Sequence[float], ties_to_first: bool = False) -> tuple[int, bool, bool]:
  """(argmax or −1, tie, nonfinite) of one item's primary scores; a tie is wrong (−1), or with
  `ties_to_first` (the paper format, as the paper code's argmax) the first tied option."""
  values = np.asarray(scores, np.float64)
  if not np.isfinite(values).all():
    return -1, False, True
  best = values.max()
  if int((values == best).sum()) > 1:
    return (int(values.argmax()) if ties_to_first else -1), True, False
  return int(values.argmax()), False, False


def primary(task: str, score: OptionScore, which: str = "term",
            per_char: bool | None = None) -> float:
  """The score an option is ranked by: S_term (or S_full) per character (`chars`, or
  `chars_full`) on normalized tasks (`per_char`: that choice made by the caller, e.g. an OLMES
  regime's primary metric, acc_per_char or acc_raw)."""
  value, chars = (score.term, score.chars) if which == "term" else (score.full, score.chars_full)
  if task in NORMALIZED_TASKS if per_char is None else per_char:
    return value / chars if chars else math.nan
  return value


def item_record(index: int, example: TaskExample, shots: int,
                scores: Sequence[OptionScore], ties_to_first: bool = False,
                per_char: bool | None = None) -> dict:
  """One item's JSON record; right = the prediction is one of the example's right options."""
  prediction, tie, nonfinite = decide([primary(example.task, s, per_char=per_char)
                                       for s in scores], ties_to_first)
  prediction_full, _, _ = decide([primary(example.task, s, "full", per_char) for s in scores],
                                 ties_to_first)
  record = dict(index=index, source=example.source, group=example.group, gold=example.answer,
                prediction=prediction, correct=example.correct(prediction),
                tie=tie, nonfinite=nonfinite, prediction_full=prediction_full,
                correct_full=example.correct(prediction_full),
                shots=shots, options=[s.as_json() for s in scores])
  if example.answers:
    record["golds"] = list(example.answers)
  return record


def _right(record: Mapping[str, Any], prediction: int) -> bool:
  golds = record.get("golds") or [record["gold"]]
  return prediction >= 0 and prediction in golds


def summarize(task: str, records: Sequence[dict]) -> dict:
  """Accuracy (and the S_full column) of a task's item records; MMLU macro over subjects. Also
  `accuracy_raw` (argmax of S_term) and `accuracy_per_char` (of S_term / chars), OLMES's
  `acc_raw` and `acc_per_char`, whichever the task's primary score is (ties wrong)."""
  labeled = [dict(r) for r in records if r["gold"] >= 0]
  out: dict[str, Any] = dict(task=task, items=len(records), scored=len(labeled),
                             ties=sum(bool(r["tie"]) for r in records),
                             nonfinite=sum(bool(r["nonfinite"]) for r in records),
                             no_right_option=sum("golds" in r and not any(
                                 0 <= g < len(r["options"]) for g in r["golds"])
                                                 for r in labeled),
                             fewer_shots=sum(r.get("shots_dropped", 0) > 0 for r in records))
  scored = all("options" in r for r in labeled)  # records with their option scores
  for r in labeled if scored else ():  # OLMES's two metrics, whatever the task's own rule
    options = r["options"]
    for metric, values in (("raw", [o["term"] for o in options]),
                           ("per_char", [o["term"] / o["chars"] if o["chars"] else math.nan
                                         for o in options])):
      r[f"correct_{metric}"] = _right(r, decide(values)[0])
  for key, name in (("correct", "accuracy"), ("correct_full", "accuracy_full"),
                    *((("correct_raw", "accuracy_raw"), ("correct_per_char", "accuracy_per_char"))
                      if scored else ())):
    if task in MACRO_TASKS:
      groups: dict[str, list[bool]] = {}
      for r in labeled:
        groups.setdefault(r["group"], []).append(bool(r[key]))
      per_group = {g: float(np.mean(v)) for g, v in sorted(groups.items())}
      out[name] = float(np.mean(list(per_group.values()))) if per_group else math.nan
      out[f"{name}_by_group"] = per_group
    else:
      out[name] = float(np.mean([bool(r[key]) for r in labeled])) if labeled else math.nan
  return out


# --- the resumable per-task loop ------------------------------------------------------------------

def read_records(path: pathlib.Path) -> list[dict]:
  """The complete item records of a results file; a cut-off last line is removed from the file."""
  if not path.exists():
    return []
  data = path.read_bytes()
  lines = data.split(b"\n")
  records, good = [], 0
  for number, line in enumerate(lines[:-1], 1):  # the part after the last newline is incomplete
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError as error:
      if number == len(lines) - 1:  # a complete-looking last line that does not parse: redo it
        break
      raise ValueError(f"{path}:{number}: not a JSON record ({error}); remove the file to "
                       "start over") from None
    good += len(line) + 1
  if good != len(data):
    with open(path, "r+b") as f:
      f.truncate(good)
  return records


def _demos_for(demonstrations: Demonstrations | None, example: TaskExample) -> list[TaskExample]:
  if demonstrations is None:
    return []
  if callable(demonstrations):
    return list(demonstrations(example))
  if isinstance(demonstrations, Mapping):
    return list(demonstrations.get(example.group, ()))
  return list(demonstrations)


def check_item_meta(meta_path: pathlib.Path, path: pathlib.Path, meta: Mapping[str, Any]) -> None:
  """Before item file `path` is reused: its record `meta_path` must match `meta` (what scores
  it: configuration, scheme, tree source, the checkpoint's step and parameters digest, …), by the
  one identity rule (`slm_jax.identity`), else refused naming the differing keys; then `meta` is
  written (atomically)."""
  if path.exists():
    identity.check_record(
        meta_path, meta, what=f"{path} holds results of another model or settings",
        where="in the file", hint=f"use another --out, or delete {path} to score again")
    if not meta_path.exists() and path.stat().st_size:
      raise identity.IdentityError(f"{path} has no {meta_path.name}: cannot tell what scored its "
                                   f"items; use another --out, or delete {path} to score again")
  identity.write_record(meta_path, meta)


def as_scorer(model: Any, batch_size: int = 32) -> Scorer:
  """A `Scorer` from a Scorer, a loaded run (`.model`, `.tokenizer`, `.configuration`) or a
  training workdir path; a pretrained checkpoint's `RawTextScorer` as it is."""
  if isinstance(model, (Scorer, RawTextScorer)):
    return model
  if isinstance(model, (str, pathlib.Path)):
    from slm_jax.train.loading import load_run  # pylint: disable=g-import-not-at-top
    model = load_run(model)
  return Scorer(model.model, model.tokenizer, model.configuration, batch_size=batch_size)


def prompt_builder(mc_format: str = "olmes") -> Callable[..., list[Prompt]]:
  """`build_prompts` of `--mc_format`: `olmes` (`prompts`) or `paper` (`paper_format`)."""
  if mc_format not in paper_format.FORMATS:
    raise ValueError(f"mc_format must be one of {', '.join(paper_format.FORMATS)}, got "
                     f"{mc_format!r}")
  return paper_format.build_prompts if mc_format == "paper" else build_prompts


def fitting_prompts(encoder: TextEncoder, example: TaskExample, demos: list[TaskExample],
                    max_len: int | None, mc_format: str = "olmes") -> tuple[list[Prompt], int]:
  """The item's prompts with as many shots as fit in `max_len` tokens (the earliest dropped
  first), and the number dropped (−1: no prompt fits even without shots)."""
  build = prompt_builder(mc_format)
  for dropped in range(len(demos) + 1):
    prompts = build(example, demos[dropped:])
    if max_len is None or all(len(encoder.encode(p.components, joint=p.joint)) <= max_len
                              for p in prompts):
      return prompts, dropped
  return prompts, -1


def evaluate_task(model: Any, task: str, examples: Sequence[TaskExample],
                  demonstrations: Demonstrations | None, out_dir: str | pathlib.Path,
                  tree_source: TreeSource | None, *, chunk_items: int = 64,
                  batch_size: int = 32, max_len: int | None = None, progress: bool = True,
                  tree_source_name: str | None = None, mc_format: str = "olmes",
                  made_by: Mapping[str, Any] | None = None, item_set: str | None = None,
                  per_char: bool | None = None) -> dict:
  """Scores every example of `task` (resumable, see the module docstring) and returns the
  summary (`summarize` plus `scored_now`, `resumed`, the tree source's fallback counts; in the
  paper format `joint_units`, the joint parse units' counted events, `mc_joint`).

  `model`: a Scorer, a loaded run or a workdir; `demonstrations`: the shots, one list for all
  items, a mapping group → list (MMLU subjects) or a function of the example; `max_len`: drop the
  earliest shots of a prompt longer than this (counted as `fewer_shots`; an item that does not
  fit without shots is scored NaN, i.e. wrong and counted as non-finite); `mc_format`: `olmes`
  or `paper` (`paper_format`: its prompts, MMLU-Redux's corrected answers, ties to the first
  option); `item_set`: where the examples come from when that is not the task's evaluation
  split (an OLMES regime: recorded with the item files, checked on resume); `per_char`: rank
  by S_term per character (True) or the raw sum (False) instead of the task's SPEC rule.
  """
  if task not in MC_TASKS:
    raise ValueError(f"{task} is not a multiple-choice task ({', '.join(MC_TASKS)})")
  for example in examples:
    if example.task != task:
      raise ValueError(f"{example.source}: a {example.task} example in the {task} task")
  scorer = as_scorer(model, batch_size)
  build = prompt_builder(mc_format)
  paper = mc_format == "paper"
  encoder = (RawTextEncoder(scorer.tokenizer, scorer.prefix_id)  # a pretrained checkpoint
             if isinstance(scorer, RawTextScorer)
             else TextEncoder(scorer.tokenizer, scorer.configuration, tree_source, paper=paper))
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  if paper:
    examples = [paper_format.corrected(x) for x in examples]
  parses = encoder.with_trees or (paper and not isinstance(encoder, RawTextEncoder))
  meta = dict(task=task, items=len(examples), configuration=scorer.configuration.name,
              scheme=encoder.scheme,
              tree_source=tree_source_name or (tree_source.name if parses and tree_source
                                               else None),
              **({"mc_format": mc_format, "paper_rules": paper_format.PAPER_RULES}
                 if paper else {}),
              **({"item_set": item_set} if item_set else {}),
              **({"per_char": per_char} if per_char is not None else {}),
              checkpoint=dict(made_by or {}))
  path = out / f"{task}.jsonl"
  check_item_meta(out / f"{task}.meta.json", path, meta)
  records = read_records(path)
  done = {}
  for r in records:
    index = r["index"]
    if not 0 <= index < len(examples) or examples[index].source != r["source"]:
      raise ValueError(f"{path}: record {index} ({r['source']}) does not match the examples")
    done[index] = r
  todo = [i for i in range(len(examples)) if i not in done]
  report = cli.Progress(task, len(examples), done=len(done)) if progress else None
  with files.appending(path) as sink:  # a failed write (a full disk) names the file
    for start in range(0, len(todo), chunk_items):
      chunk = todo[start:start + chunk_items]
      demos = {i: _demos_for(demonstrations, examples[i]) for i in chunk}
      if parses:
        encoder.prefetch_prompts(p for i in chunk for p in build(examples[i], demos[i]))
      items, prompts = [], []
      for i in chunk:
        own, dropped = fitting_prompts(encoder, examples[i], demos[i], max_len, mc_format)
        items.append((i, own, dropped))
        if dropped >= 0:
          prompts += own
      scores = iter(continuation_scores(scorer, encoder, prompts) if prompts else [])
      lines = []
      for i, own, dropped in items:
        if dropped >= 0:
          option_scores = [next(scores) for _ in own]
        else:
          option_scores = [OptionScore(math.nan, math.nan, p.option_chars, 0, 0) for p in own]
        record = item_record(i, examples[i], len(demos[i]) - max(dropped, 0), option_scores,
                             ties_to_first=paper, per_char=per_char)
        record["shots_dropped"] = dropped if dropped >= 0 else len(demos[i])
        record["too_long"] = dropped < 0
        done[i] = record
        lines.append(json.dumps(record) + "\n")
      sink.write("".join(lines))
      sink.flush()
      if report:
        report(len(done))
  summary = summarize(task, [done[i] for i in sorted(done)])
  summary.update(scored_now=len(todo), resumed=len(records),
                 tree_stats=dict(tree_source.stats) if parses and tree_source else {},
                 **encoder.summary_counters(joint_format=paper))
  files.write_text(out / f"{task}.summary.json", json.dumps(summary, indent=1) + "\n")
  return summary


def render_item(encoder: TextEncoder, example: TaskExample,
                demonstrations: Sequence[TaskExample] = (), option: int | None = None,
                mc_format: str = "olmes") -> str:
  """One item's full prompt for `option` (default: the gold, else 0) as the model reads it,
  linearized (brackets for tree models), one line per component headed by its role."""
  prompts = prompt_builder(mc_format)(example, list(demonstrations))
  prompt = prompts[option if option is not None else max(example.answer, 0)]
  encoded = encoder.encode(prompt.components, joint=prompt.joint)
  return encoder.render(encoded, names=list(prompt.roles) + ["head"] * bool(prompt.head)
                        + ["continuation"])
