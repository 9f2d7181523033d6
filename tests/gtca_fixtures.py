"""Tiny files of GTCA's real sets in exactly their Hugging Face download layouts.

`write_gtca_fixtures(root)` writes, as `hf download … --local-dir root/<set>` would
(docs/DOWNSTREAM_DATA.md, "GTCA sets"):
- `cloth/`: `AndyChiang/cloth` main branch, `CLOTH_{train,valid,test}_cleaned.json` (one row per
  question: `sentence` with `[MASK]`, `answer`, `distractors`; train as JSON lines, the others as
  JSON arrays);
- `cloth_passages/`: the CLOTH passage layout (`article` with `_` blanks, `options` per blank,
  `answers` letters) as `data/{train,test}.jsonl`; the last test passage has no `answers` (its
  blanks are unlabeled);
- `cola/`: GLUE `nyu-mll/glue` `cola/{train,validation,test}-00000-of-00001.parquet`
  (`sentence`, `label`, `idx`; test labels −1);
- `mmlu/`, `hellaswag/`, `winogrande/` (and the other downstream tasks): the downstream fixtures
  (`tests.downstream_fixtures.write_fixtures`) plus MMLU's `all/auxiliary_train` split;
- `blimp/`: BLiMP's own layout (`<UID>.jsonl`, one pair per line with every field the release
  has), `BLIMP_PARADIGMS` × `rows` pairs; `adjunct_island`'s good sentences repeat
  `regular_plural_subject_verb_agreement_1`'s (BLiMP repeats sentences across paradigms too).
"""

from __future__ import annotations

import json
import pathlib

from tests.downstream_fixtures import HUB_SHARD, PEOPLE, THINGS, _cycle, _mmlu, _parquet, \
    write_fixtures

CLOTH_FILES = {"train": "train", "validation": "valid", "test": "test"}
VERBS = ("carried", "painted", "borrowed", "cleaned", "dropped", "found")
# UID -> (field, linguistics_term, good and bad sentence of pair i); words of the tests' vocabulary
BLIMP_PARADIGMS = {
    "regular_plural_subject_verb_agreement_1": (
        "morphology", "subject_verb_agreement",
        lambda who, thing: (f"{who} was early .", f"{who} were early .")),
    "determiner_noun_agreement_1": (
        "morphology", "determiner_noun_agreement",
        lambda who, thing: (f"{who} carried the {thing} home .",
                            f"{who} carried a the {thing} home .")),
    "adjunct_island": (
        "syntax", "island_effects",
        lambda who, thing: (f"{who} was early .", f"{who} early was .")),
}
BLIMP_WHO, BLIMP_THINGS = ("Anna", "Brian", "Carla", "Dmitri"), ("kettle", "bicycle", "ladder")


def blimp_pair(uid: str, i: int) -> dict:
  """Pair i of paradigm `uid` as a line of BLiMP's release."""
  field, term, make = BLIMP_PARADIGMS[uid]
  good, bad = make(_cycle(BLIMP_WHO, i), _cycle(BLIMP_THINGS, i))
  return {"sentence_good": good, "sentence_bad": bad, "field": field, "linguistics_term": term,
          "UID": uid, "simple_LM_method": True, "one_prefix_method": False,
          "two_prefix_method": False, "lexically_identical": False, "pairID": str(i)}


def write_blimp(folder: str | pathlib.Path, rows: int = 3) -> pathlib.Path:
  """`rows` pairs of every paradigm of `BLIMP_PARADIGMS` as `folder/<UID>.jsonl`."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  for uid in BLIMP_PARADIGMS:
    (folder / f"{uid}.jsonl").write_text("".join(json.dumps(blimp_pair(uid, i)) + "\n"
                                                 for i in range(rows)))
  return folder


def cloth_question(i: int) -> dict:
  who, thing = _cycle(PEOPLE, i), _cycle(THINGS, i)
  return {"sentence": f"{who} [MASK] {thing} to the market on Monday .",
          "answer": _cycle(VERBS, i), "distractors": [_cycle(VERBS, i + k) for k in (1, 2, 3)]}


def cloth_passage(i: int, labeled: bool = True) -> dict:
  who, thing = _cycle(PEOPLE, i), _cycle(THINGS, i)
  row = {"article": f"{who} woke up early . She _ {thing} to the shop . The shop _ closed , so "
                    f"she went _ .",
         "options": [list(VERBS[:4]), ["was", "were", "is", "be"], ["home", "house", "away",
                                                                    "there"]],
         "source": "high" if i % 2 else "middle", "id": f"passage{i}"}
  if labeled:
    row["answers"] = ["A", "A", "A"]
  return row


def cola_row(i: int, labeled: bool = True) -> dict:
  who, thing = _cycle(PEOPLE, i), _cycle(THINGS, i)
  good = i % 2 == 0
  sentence = f"{who} carried {thing} home ." if good else f"{who} carried home {thing} the ."
  return {"sentence": sentence, "label": int(good) if labeled else -1, "idx": i}


def write_gtca_fixtures(root: str | pathlib.Path, rows: int = 4) -> dict[str, pathlib.Path]:
  """Every GTCA set's tiny download under `root/<set>`; returns set -> folder."""
  root = pathlib.Path(root)
  out = dict(write_fixtures(root, rows))
  _parquet(root / "mmlu" / f"all/auxiliary_train-{HUB_SHARD}.parquet",
           [dict(_mmlu(i, "miscellaneous"), subject="") for i in range(2 * rows)])
  cloth = root / "cloth"
  cloth.mkdir(parents=True, exist_ok=True)
  for split, name in CLOTH_FILES.items():
    n = 2 * rows if split == "train" else rows
    questions = [cloth_question(i) for i in range(n)]
    path = cloth / f"CLOTH_{name}_cleaned.json"
    if split == "train":
      path.write_text("".join(json.dumps(q) + "\n" for q in questions))
    else:
      path.write_text(json.dumps(questions))
  out["cloth"] = cloth
  passages = root / "cloth_passages" / "data"
  passages.mkdir(parents=True, exist_ok=True)
  (passages / "train.jsonl").write_text("".join(json.dumps(cloth_passage(i)) + "\n"
                                                for i in range(rows)))
  (passages / "test.jsonl").write_text("".join(json.dumps(cloth_passage(i, i < rows - 1)) + "\n"
                                               for i in range(rows)))
  out["cloth_passages"] = root / "cloth_passages"
  for split, n, labeled in (("train", 3 * rows, True), ("validation", 2 * rows, True),
                            ("test", rows, False)):
    _parquet(root / "cola" / f"cola/{split}-{HUB_SHARD}.parquet",
             [cola_row(i, labeled) for i in range(n)])
  out["cola"] = root / "cola"
  out["blimp"] = write_blimp(root / "blimp")
  return out


def tiny_workdir(folder: pathlib.Path, words, monkeypatch) -> pathlib.Path:
  """A one-layer word-level backbone for the GTCA CLIs: its tokenizer saved as a workdir's
  (`folder/workdir`), its model returned by a patched `load_run` (a trained workdir is the only
  other thing the CLIs would read)."""
  import types  # pylint: disable=import-outside-toplevel
  from flax import nnx  # pylint: disable=import-outside-toplevel
  import slm_jax.train.loading as loading  # pylint: disable=import-outside-toplevel
  from slm_jax.gtca import backbone, train  # pylint: disable=import-outside-toplevel
  from slm_jax.model import Decoder, ModelConfig  # pylint: disable=import-outside-toplevel
  from slm_jax.tokenizer import make_tokenizer  # pylint: disable=import-outside-toplevel
  tokenizer = make_tokenizer("word", words=sorted(words))
  workdir = folder / "workdir"
  workdir.mkdir()
  tokenizer.save(workdir)
  model = Decoder(ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1,
                              n_heads=2, mlp_ratio=2, attention_impl="xla"), rngs=nnx.Rngs(0))
  fake = lambda path, *a, **k: types.SimpleNamespace(model=model, tokenizer=tokenizer, step=0)  # noqa
  for module in (train, backbone, loading):
    monkeypatch.setattr(module, "load_run", fake)
  return workdir
