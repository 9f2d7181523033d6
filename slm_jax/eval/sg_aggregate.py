"""SyntaxGym aggregation (SPEC §9, paper Tables 13–14): suite sets, circuits, the headline SG.

From per-suite item verdicts (an item is correct when the suite's *first* prediction holds):
- suite accuracy = correct items / items;
- circuit accuracy = correct items / items **pooled over every suite of the circuit** (a suite
  belongs to the circuit of its tag, `re.split("[-_0-9]", name)[0]`, via `circuits.json`
  `circuit_tags`, as the paper's code and Hu et al.'s notebooks map them);
- **headline SG = the mean of the six circuit accuracies** (paper Table 14: 87.72, 94.74, 93.42,
  98.91, 74.81, 78.44 → 88.01); `None` unless all six circuits have items;
- the mean of the suite accuracies is the secondary column (Hu et al.'s "SG score" over the 31);
- `circuits_by_suite`: per circuit the mean of its suites' accuracies (Hu et al.'s circuit plots).

Suite sets: `hu31` (default; Hu et al. 2020 drop fgd-embed3, fgd-embed4 and nn-nv-rpl) and
`paper32` (the paper's code keeps fgd-embed3/4: 31 + 2 = 33 suite files, its LDD circuit then has
218 items, Table 14's k/218; the name is SPEC's); any other value is a comma-separated list of
suite names.

`read_reference_results(csv)` reads Hu et al.'s released per-item verdicts
(`model,suite,item,correct`, `../shared/data/syntaxgym/reference_results/`), so the same
aggregation can be checked against the numbers their notebooks report.
"""

from __future__ import annotations

import csv
import json
import pathlib
import re
from typing import Mapping, Sequence

import numpy as np

# circuits.json `circuit_tags` (used when the file is absent).
CIRCUIT_TAGS = {
    "Licensing": ("npi", "reflexive"), "Long-Distance Dependencies": ("fgd", "cleft"),
    "Agreement": ("number",), "Garden-Path Effects": ("npz", "mvrr"),
    "Gross Syntactic State": ("subordination",), "Center Embedding": ("center",),
}
SUITE_SETS = {  # name -> suites left out of the folder's 34
    "hu31": ("fgd-embed3", "fgd-embed4", "nn-nv-rpl"),
    "paper32": ("nn-nv-rpl",),
}
DEFAULT_SUITE_SET = "hu31"
ITEM_RULE = "first prediction"  # the verdict of an item (SPEC §9)


def suite_tag(name: str) -> str:
  return re.split(r"[-_0-9]", name)[0]


def circuit_tags(path: str | pathlib.Path | None) -> dict[str, tuple[str, ...]]:
  """`circuit_tags` of a circuits.json (the built-in table when `path` is None or absent)."""
  if path is not None and pathlib.Path(path).is_file():
    data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    return {c: tuple(t) for c, t in data["circuit_tags"].items()}
  return dict(CIRCUIT_TAGS)


def circuit_of(suite: str, tags: Mapping[str, Sequence[str]]) -> str | None:
  tag = suite_tag(suite)
  return next((c for c, members in tags.items() if tag in members), None)


def select_suites(available: Sequence[str], spec: str | Sequence[str] | None) -> tuple[list[str],
                                                                                         str]:
  """(suite names, label): a named set (`hu31`, `paper32`; None = hu31) keeps `available` minus
  its exclusions; a list (or a comma-separated string) names suites, all of which must exist."""
  if spec is None:
    spec = DEFAULT_SUITE_SET
  if isinstance(spec, str) and spec in SUITE_SETS:
    left_out = set(SUITE_SETS[spec])
    return [s for s in available if s not in left_out], spec
  names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
  names = [s for s in names if s]
  missing = sorted(set(names) - set(available))
  if missing or not names:
    raise FileNotFoundError(f"SyntaxGym suites not found: {missing or '(none named)'}; known sets "
                            f"{', '.join(SUITE_SETS)} or names of {len(available)} suites")
  return names, ",".join(names)


def aggregate(item_correct: Mapping[str, Sequence[bool]],
              tags: Mapping[str, Sequence[str]] | None = None, suite_set: str = "") -> dict:
  """Headline SG and the secondary columns (fractions in [0, 1]) from per-suite verdicts."""
  tags = dict(CIRCUIT_TAGS if tags is None else tags)
  verdicts = {s: np.asarray(v, bool) for s, v in item_correct.items()}
  accuracy = {s: float(v.mean()) if len(v) else None for s, v in verdicts.items()}
  pooled, by_suite, items = {}, {}, {}
  for circuit in tags:
    members = [s for s in verdicts if circuit_of(s, tags) == circuit]
    n = sum(len(verdicts[s]) for s in members)
    items[circuit] = n
    pooled[circuit] = sum(int(verdicts[s].sum()) for s in members) / n if n else None
    accs = [accuracy[s] for s in members if accuracy[s] is not None]
    by_suite[circuit] = float(np.mean(accs)) if accs else None
  suite_accs = [a for a in accuracy.values() if a is not None]
  unmapped = sorted(s for s in verdicts if circuit_of(s, tags) is None)
  return {
      "sg": float(np.mean(list(pooled.values()))) if all(
          v is not None for v in pooled.values()) and pooled else None,
      "circuits": pooled, "circuit_items": items, "circuits_by_suite": by_suite,
      "suite_mean": float(np.mean(suite_accs)) if suite_accs else None,
      "suite_count": len(suite_accs), "suite_set": suite_set, "item_rule": ITEM_RULE,
      "unmapped_suites": unmapped,
  }


def circuit_labels(suites: Sequence[str], counts: Sequence[int],
                   tags: Mapping[str, Sequence[str]] | None = None) -> np.ndarray:
  """[items] the circuit of every item of `suites` (counts[i] items each), for the bootstrap's
  per-circuit strata ("" for a suite outside the six circuits)."""
  tags = dict(CIRCUIT_TAGS if tags is None else tags)
  return np.concatenate([[circuit_of(s, tags) or ""] * int(n) for s, n in zip(suites, counts)]
                        or [np.zeros(0, str)])


def read_reference_results(path: str | pathlib.Path) -> dict[str, dict[str, np.ndarray]]:
  """Per model (a file may hold several seeds) and suite, the item verdicts of one released
  results CSV (`model,suite,item,correct`), in item order. A row that is not True/False is an
  error naming file and line."""
  path = pathlib.Path(path)
  rows: dict[str, dict[str, list[tuple[int, bool]]]] = {}
  with open(path, newline="", encoding="utf-8") as f:
    for line, row in enumerate(csv.DictReader(f), 2):
      try:
        verdict = {"True": True, "False": False}[row["correct"]]
        rows.setdefault(row["model"], {}).setdefault(row["suite"], []).append(
            (int(row["item"]), verdict))
      except (KeyError, ValueError) as error:
        raise ValueError(f"{path}:{line}: not a results row ({error!r})") from None
  return {m: {s: np.asarray([v for _, v in sorted(r)], bool) for s, r in suites.items()}
          for m, suites in rows.items()}
