"""Downstream evaluation of one trained run, as the evaluator runs it (`--tasks=mc,xsum,boolq`).

- `evaluate_mc`: the 11 multiple-choice tasks (or a subset) of `tasks.read_task` from one data
  folder (`<data_dir>/<task>/`, the layout of docs/DOWNSTREAM_DATA.md), each with its fixed
  demonstrations (`--mc_format=paper`: `paper_format.paper_demonstrations`, the paper code's
  fixed rows; `olmes`: `tasks.demonstrations`; MMLU-Redux takes MMLU's, from `<data_dir>/mmlu`),
  scored by `scoring.evaluate_task` into `<out>/<task>.jsonl` (resumable per task) and summarized
  by `report.mc_summary` into the `downstream.mc` entry `downstream.report` renders.
- `evaluate_xsum`: every finished seed of a `python -m slm_jax.finetune --task=xsum` output
  folder generates a summary of each test article (`inference.generate.generate`: beam 6, ≤ 150
  tokens; word-synchronous for tree models, ≤ 150 tokens and ≤ 75 words) from the prompt it was
  fine-tuned on (`finetune_data.xsum_context`; the article's trailing sentences dropped so the
  prompt and 150 summary positions fit the run's sequence length, counted; the empty test
  article skipped and counted, `skipped_empty_articles`, as the paper code does; tree models
  generate the summary as one sentence, one root, as XSum's one-sentence summaries are
  trained); predictions are appended to
  `<out>/seed<S>.jsonl` (a restart continues after the last complete line); ROUGE-1/2/L F1 ×100
  and R-AVG per seed (`rouge.rouge`).
- `evaluate_boolq_finetuned`: every finished seed of a `--task=boolq` output folder scores the
  BoolQ evaluation split zero-shot, with the prompt it was fine-tuned on (" yes" vs " no",
  raw S_term), accuracy ×100 per seed.

Every text the model reads goes through one `encoding.TextEncoder` with the given tree source
(parsed and linearized for tree models and the Pushdown reference; plain or pause-expanded for
terminal-format ones). Which scorer and which summary search a run gets is `protocol.protocol`'s
choice (the Pushdown reference: teacher-forced scoring with the supplied spans for MC and BoolQ,
the joint beam over summary tokens and attachments for XSum, SPEC §14).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from typing import Any, Sequence

import numpy as np

from slm_jax import cli, files
from slm_jax.downstream import olmes_regime, olmo_data, paper_format
from slm_jax.downstream import tasks as tasks_lib
from slm_jax.downstream.encoding import TextEncoder, TreeSource
from slm_jax.downstream.example import MC_TASKS, TaskExample
from slm_jax.downstream.finetune_data import (SETTINGS_FILE, SUMMARY_FILE, truncation_keep,
                                              xsum_context)
from slm_jax.downstream.protocol import protocol
from slm_jax.downstream.report import mc_summary
from slm_jax.downstream.rouge import rouge
from slm_jax.downstream.scoring import check_item_meta, evaluate_task, read_records
from slm_jax.inference.generate import BEAM, MAX_OPEN, MAX_TOKENS, MAX_WORDS
from slm_jax.inference.generate_batch import CONCURRENT
from slm_jax.train.loading import run_identity


@dataclasses.dataclass(frozen=True)
class DownstreamOptions:
  """What every downstream task of one evaluation shares."""
  data_dir: pathlib.Path  # holds <task>/ (the Hub download folders)
  mc_tasks: tuple[str, ...] = MC_TASKS
  max_items: int | None = None  # first items of each evaluation split
  batch_size: int = 32
  beam: int = BEAM
  max_tokens: int = MAX_TOKENS
  max_words: int = MAX_WORDS
  max_open: int = MAX_OPEN
  progress: bool = True
  mc_format: str = "paper"  # paper (`paper_format`, SPEC §11's default) | olmes (`prompts`)
  olmes_regime: str = "rc_5shot"  # an olmo_data root's OLMES regime (`olmes` format)
  articles_per_batch: int = CONCURRENT  # XSum articles searched together (speed and memory
  # only: the summaries do not depend on it)

  def __post_init__(self):
    if self.articles_per_batch < 1:
      raise ValueError(f"articles_per_batch must be >= 1, got {self.articles_per_batch}")
    unknown = [t for t in self.mc_tasks if t not in MC_TASKS]
    if unknown:
      raise ValueError(f"unknown multiple-choice task(s) {', '.join(unknown)}; expected some "
                       f"of {', '.join(MC_TASKS)}")


def _log(message: str) -> None:
  print(message, file=sys.stderr, flush=True)


def evaluate_mc(run: Any, options: DownstreamOptions, out_dir: str | pathlib.Path,
                tree_source: TreeSource | None) -> dict[str, dict]:
  """task → `downstream.mc` entry of one loaded run (module docstring)."""
  scorer = protocol(run.configuration).scorer(run, options.batch_size)
  out = pathlib.Path(out_dir)
  made_by = run_identity(run)  # the checkpoint: recorded with every item file
  entries: dict[str, dict] = {}
  for task in options.mc_tasks:
    examples, demos, regime = mc_items(task, options)
    started = time.perf_counter()
    summary = evaluate_task(scorer, task, examples, demos, out, tree_source,
                            batch_size=options.batch_size, max_len=run.cfg.data.seq_len,
                            progress=options.progress, mc_format=options.mc_format,
                            made_by=made_by,
                            item_set=f"olmes:{regime.name}" if regime else None,
                            per_char=regime.primary_metric == "acc_per_char" if regime else None)
    records = read_records(out / f"{task}.jsonl")
    entries[task] = mc_summary(summary, sorted(records, key=lambda r: r["index"]))
    if regime:
      entries[task].update(olmes_regime=regime.name, primary_metric=regime.primary_metric)
    entries[task]["seconds"] = round(time.perf_counter() - started, 2)
    _log(f"{task}: accuracy {entries[task]['accuracy']:.2f} over {entries[task]['n']} items")
  return entries


def mc_items(task: str, options: DownstreamOptions
             ) -> tuple[list[TaskExample], Any, olmo_data.Regime | None]:
  """(examples, demonstrations, OLMES regime or None) of one multiple-choice task: with an
  olmo_data root in the `olmes` format, the items of its OLMES regime (`olmes_regime`:
  OLMES's subsample, demonstrations and strings, exactly); else the evaluation split of
  `tasks.read_task` with the format's fixed demonstrations (MMLU-Redux takes MMLU's)."""
  root = tasks_lib.task_folder(options.data_dir, task)
  if (options.mc_format == "olmes" and task in olmo_data.OLMES_NAMES
      and olmo_data.OlmoData.find(options.data_dir) is not None):
    items = olmes_regime.regime_items(task, options.data_dir, options.olmes_regime)
    return items.examples[:options.max_items], items.demonstrations, items.regime
  examples = tasks_lib.read_task(task, root, limit=options.max_items)
  mmlu_root = tasks_lib.task_folder(options.data_dir, "mmlu") if task == "mmlu_redux" else None
  pick = (paper_format.paper_demonstrations if options.mc_format == "paper"
          else tasks_lib.demonstrations)
  return examples, pick(task, root, mmlu_root=mmlu_root), None


def finished_seeds(folder: str | pathlib.Path, task: str) -> dict[int, pathlib.Path]:
  """seed → its folder, for the seeds of a `slm_jax.finetune --task=TASK` output that finished."""
  folder = pathlib.Path(folder)
  if not folder.is_dir():
    raise FileNotFoundError(f"{folder}: no such fine-tuning output folder")
  seeds: dict[int, pathlib.Path] = {}
  for path in sorted(folder.glob("seed*")):
    record = path / SETTINGS_FILE
    if not (path / SUMMARY_FILE).is_file() or not record.is_file():
      continue
    saved = json.loads(record.read_text())
    settings = saved.get("settings", saved)
    if settings.get("task") not in (None, task):
      raise ValueError(f"{path}: a {settings.get('task')} fine-tuning run, not {task}")
    seeds[int(path.name[len("seed"):])] = path
  if not seeds:
    raise FileNotFoundError(f"{folder}: no finished seed<S>/ folder (each needs {SUMMARY_FILE}, "
                            "written when `python -m slm_jax.finetune` completes a seed)")
  return seeds


def _prompt(encoder: TextEncoder, article: str, room: int) -> tuple[np.ndarray, np.ndarray, bool]:
  """(ids, kinds, truncated) of the XSum generation prompt, cut to `room` tokens by dropping the
  article's trailing sentences (its first tokens when not even one sentence fits)."""
  encoded = encoder.encode(list(xsum_context(article)))
  keep, _ = truncation_keep(np.asarray(encoded.component_T), np.asarray(encoded.sequence.sentence),
                            room, truncatable=0)
  if keep is None:
    raise ValueError(f"the XSum instruction alone exceeds {room} tokens")
  ids = np.asarray(encoded.sequence.tokens, np.int32)[keep]
  kinds = np.asarray(encoded.sequence.kinds, np.int32)[keep]
  return ids, kinds, len(keep) < len(encoded)


def _completed_lines(path: pathlib.Path) -> list[dict]:
  """The complete JSON lines of a predictions file; a cut last line is removed from the file."""
  if not path.exists():
    return []
  text = path.read_text(encoding="utf-8")
  lines = text.split("\n")
  records, good = [], 0
  for line in lines:
    if not line:
      continue
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError:
      break
    good += len(line) + 1
  if good != len(text):
    files.write_text(path, text[:good])
  return records


def generate_summaries(run: Any, examples: Sequence[TaskExample], path: pathlib.Path,
                       tree_source: TreeSource | None, options: DownstreamOptions) -> list[dict]:
  """One prediction record per example in `path` (resumable), in example order."""
  encoder = TextEncoder(run.tokenizer, run.configuration, tree_source)
  search = protocol(run.configuration)
  room = run.cfg.data.seq_len - search.generated_positions(
      run.configuration, max_tokens=options.max_tokens, max_words=options.max_words)
  if room < 16:
    raise ValueError(f"seq_len {run.cfg.data.seq_len} leaves no room for a prompt besides "
                     "the summary")
  check_item_meta(path.with_suffix(".meta.json"), path, {
      "task": "xsum", "items": len(examples), "configuration": run.configuration.name,
      "tree_source": encoder.tree_source.name if encoder.with_trees else None,
      "beam": options.beam, "max_tokens": options.max_tokens, "max_words": options.max_words,
      "checkpoint": run_identity(run)})
  records = _completed_lines(path)
  for i, record in enumerate(records):
    if i >= len(examples) or record["source"] != examples[i].source:
      raise ValueError(f"{path}: line {i + 1} ({record.get('source')}) does not match the "
                       "examples: use another output folder")
  report = (cli.Progress(f"xsum {path.stem}", len(examples), unit="summaries", done=len(records))
            if options.progress else None)
  with files.appending(path) as sink:  # a failed write (a full disk) names the file
    per_batch = options.articles_per_batch
    for first in range(len(records), len(examples), per_batch):
      chunk = range(first, min(first + per_batch, len(examples)))
      prompts = [_prompt(encoder, examples[i].question, room) for i in chunk]
      found = search.generate_many(run, [(ids, kinds) for ids, kinds, _ in prompts],
                                   beam=options.beam, max_tokens=options.max_tokens,
                                   max_words=options.max_words, max_open=options.max_open,
                                   concurrent=per_batch)
      for i, (ids, _, truncated), summary in zip(chunk, prompts, found):
        record = {"index": i, "source": examples[i].source, "prediction": summary.text,
                  "reference": examples[i].options[0], "logprob": summary.logprob,
                  "finished": summary.finished, "truncated": truncated,
                  "prompt_tokens": len(ids)}
        sink.write(json.dumps(record) + "\n")
        sink.flush()
        records.append(record)
        if report:
          report(len(records))
  return records


def evaluate_xsum(folder: str | pathlib.Path, options: DownstreamOptions,
                  out_dir: str | pathlib.Path, tree_source: TreeSource | None) -> dict:
  """`downstream.xsum` entry: ROUGE per finished seed of an XSum fine-tuning output folder."""
  from slm_jax.train.loading import load_run  # pylint: disable=g-import-not-at-top
  split = tasks_lib.load_split("xsum", tasks_lib.task_folder(options.data_dir, "xsum"),
                               limit=options.max_items)
  examples = split.examples  # the empty article skipped and counted (the paper's 11,333)
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  seeds: dict[str, dict] = {}
  for seed, path in finished_seeds(folder, "xsum").items():
    run = load_run(path)
    records = generate_summaries(run, examples, out / f"seed{seed}.jsonl", tree_source, options)
    scores = rouge([r["prediction"] for r in records], [r["reference"] for r in records])
    seeds[str(seed)] = {"rouge1": 100 * scores.rouge1, "rouge2": 100 * scores.rouge2,
                        "rougeL": 100 * scores.rougeL, "ravg": scores.r_avg,
                        "n": scores.count, "empty": scores.empty,
                        "unfinished": sum(not r["finished"] for r in records),
                        "truncated_prompts": sum(r["truncated"] for r in records),
                        "workdir": str(path), "step": int(run.step)}
    _log(f"xsum seed {seed}: R-AVG {scores.r_avg:.2f} over {scores.count} articles")
  return {"seeds": seeds, "folder": str(folder),
          "skipped_empty_articles": int(split.counts["empty_document"])}


def evaluate_boolq_finetuned(folder: str | pathlib.Path, options: DownstreamOptions,
                             out_dir: str | pathlib.Path, tree_source: TreeSource | None) -> dict:
  """`downstream.boolq_ft` entry: zero-shot BoolQ accuracy per finished fine-tuned seed."""
  from slm_jax.train.loading import load_run  # pylint: disable=g-import-not-at-top
  # from olmo_data, the validation docs of OLMES's requests: SuperGLUE's "Title -- passage",
  # the form of the train docs a fine-tuning there read (olmo_data.DOC_SOURCED)
  examples = tasks_lib.load_split(
      "boolq", tasks_lib.task_folder(options.data_dir, "boolq"), limit=options.max_items,
      olmes_docs=olmo_data.OlmoData.find(options.data_dir) is not None).examples
  seeds: dict[str, dict] = {}
  for seed, path in finished_seeds(folder, "boolq").items():
    run = load_run(path)
    scorer = protocol(run.configuration).scorer(run, options.batch_size)
    summary = evaluate_task(scorer, "boolq", examples, None, pathlib.Path(out_dir) / f"seed{seed}",
                            tree_source, batch_size=options.batch_size,
                            max_len=run.cfg.data.seq_len, progress=options.progress,
                            made_by=run_identity(run))
    seeds[str(seed)] = {"accuracy": 100 * summary["accuracy"], "n": summary["scored"],
                        "wrong_ties_nonfinite": int(summary["ties"]) + int(summary["nonfinite"]),
                        "workdir": str(path), "step": int(run.step)}
    _log(f"boolq seed {seed}: accuracy {seeds[str(seed)]['accuracy']:.2f}")
  return {"seeds": seeds, "folder": str(folder)}
