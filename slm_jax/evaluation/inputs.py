"""What an evaluation reads, checked before anything is scored (a gap never throws away
finished work): the workdirs and their checkpoints, proposal files and folders, PTB paths, the
downstream folders and `--out` (`check_inputs`: every problem in one error); runs whose
linearization beam proposals cannot invert (`check_beam_runs`); a proposals FILE that misses a
sentence some tree model will ask for (`check_file_coverage`); the SyntaxGym suites folder
(`syntaxgym_dir`).

`args` is the parsed command line of `python -m slm_jax.evaluate` (`evaluate.parse_args`).
"""

from __future__ import annotations

import pathlib
from typing import Sequence

from slm_jax import cli
from slm_jax.eval.proposals import FileProposals, check_beam_proposals
from slm_jax.evaluation.checkpoints import check_checkpoints
from slm_jax.evaluation.sources import is_parser

TASKS = ("sg", "blimp", "docppl", "mc", "xsum", "boolq")
DOWNSTREAM_TASKS = ("mc", "xsum", "boolq")


def check_inputs(args) -> None:
  """Every input of the command, checked before anything is scored: each workdir is a training
  workdir with a readable config and at least one checkpoint, each `--checkpoint` a checkpoint
  for the tasks asked (`evaluation.checkpoints.check_checkpoints`), proposal files and PTB paths
  exist, and `--out` is (or can be made) a folder. Raises one error naming every problem."""
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  problems = []
  for workdir in args.workdir:
    try:
      run_config(workdir)
    except (FileNotFoundError, ValueError) as error:
      problems.append(cli.one_line(str(error)))
      continue
    checkpoints = pathlib.Path(workdir) / "checkpoints"
    if not checkpoints.is_dir() or not any(c.name.isdigit() for c in checkpoints.iterdir()):
      problems.append(f"{workdir}: no checkpoint in {checkpoints} (has the run saved one?)")
  for flag, task in (("blimp_proposals", "blimp"), ("docppl_proposals", "docppl")):
    value = getattr(args, flag)
    if task not in args.tasks or value in (None, "grammar", "flat", "beam", "gold"):
      continue
    if is_parser(value):
      folder = value.partition(":")[2]
      if folder and not (pathlib.Path(folder) / "config.json").is_file():
        problems.append(f"--{flag}={value}: {folder} is not a parser folder (no config.json)")
    elif not pathlib.Path(value).is_file():
      problems.append(f"--{flag}={value}: no such proposals file")
  if "docppl" in args.tasks:
    for path in args.docppl_ptb or ():
      if not pathlib.Path(path).exists():
        problems.append(f"--docppl_ptb={path}: no such file or folder")
  if any(t in args.tasks for t in DOWNSTREAM_TASKS):
    if args.downstream_dir is None:
      problems.append("--tasks=mc/xsum/boolq need --downstream_dir (the folder of <task>/ "
                      "downloads; docs/DOWNSTREAM_DATA.md)")
    elif not pathlib.Path(args.downstream_dir).is_dir():
      problems.append(f"--downstream_dir={args.downstream_dir}: no such folder")
    for task in ("xsum", "boolq"):
      for folder in (getattr(args, f"{task}_finetuned") or ()) if task in args.tasks else ():
        if not pathlib.Path(folder).is_dir():
          problems.append(f"--{task}_finetuned={folder}: no such folder")
  problems += check_checkpoints(args.checkpoint, args.tasks)
  out = pathlib.Path(args.out)
  if out.exists() and not out.is_dir():
    problems.append(f"--out={out}: exists and is not a folder")
  if problems:
    raise cli.CliError("; ".join(problems))
  out.mkdir(parents=True, exist_ok=True)


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


def check_file_coverage(args, data: dict) -> None:
  """A proposals FILE must cover every sentence a tree model will ask for: checked before any
  run is scored, so a gap never throws away finished work."""
  from slm_jax.train.loading import run_config  # pylint: disable=g-import-not-at-top
  if not any(run_config(w)[1].scheme.scored_with_structure for w in args.workdir):
    return  # terminal models ask for no trees
  needs = []
  if isinstance(data.get("blimp_proposals"), FileProposals):
    from slm_jax.eval.blimp import load_blimp, word_tokenize  # pylint: disable=g-import-not-at-top
    paradigms = data.get("blimp_paradigms") or load_blimp(data["blimp_dir"], args.max_items)
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
