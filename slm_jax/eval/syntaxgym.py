"""SyntaxGym (Hu et al. 2020; paper §5.2, App. B.2, SPEC §9): suites, region surprisals, formulas.

A suite JSON has `region_meta`, `predictions` (formula strings) and `items`, each item a set of
conditions, each condition a list of regions (text, possibly empty). Per condition the regions are
tokenized into PTB-style words and concatenated into one sentence; with prefix log-probabilities
ℓ(k) = log p̃(x≤k) (ℓ(0) = 0) the surprisal of region [s, e) is S = −ℓ(e) + ℓ(s), in bits
(SyntaxGym's unit; an empty region has S = 0). Tree models get ℓ from word-synchronous beam
search, terminal/pause (and Tree-Shuffle) models from teacher forcing.

Formulas (SyntaxGym semantics): `[`/`]` read as `(`/`)`; `(R;%c%)` is the surprisal of region R
(or `*`, the whole sentence) in condition c; arithmetic + − * / and unary minus; comparisons
< > and `=` (approximately equal: |a − b| <= 1e-3 + 1e-5·|b|); `&` and `|` (lowest). A small
recursive-descent parser, no eval. An item is correct when all of the suite's predictions hold;
suite accuracy = correct items / items.

Aggregates: per circuit the mean of its suites' accuracies (`circuits.json` circuit_suites), the
31-suite mean (fgd-embed3, fgd-embed4, nn-nv-rpl dropped), and — the convention the paper's
Tables 13/14 follow (their numbers are k/57, k/56, k/152, k/92, k/266, k/218) — per circuit the
item-level accuracy over every suite whose tag (`re.split("[-_0-9]", name)[0]`) maps to it,
fgd-embed3/4 included, and "SG" = the mean of those six.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import pathlib
import re
from typing import Any, Callable, Sequence as SequenceT

import numpy as np

from slm_jax.parse.splitting import ptb_words

_LOG = logging.getLogger(__name__)

EXCLUDED_SUITES = ("fgd-embed3", "fgd-embed4", "nn-nv-rpl")
# circuits.json `circuit_tags` (used when the file is absent).
CIRCUIT_TAGS = {
    "Licensing": ("npi", "reflexive"), "Long-Distance Dependencies": ("fgd", "cleft"),
    "Agreement": ("number",), "Garden-Path Effects": ("npz", "mvrr"),
    "Gross Syntactic State": ("subordination",), "Center Embedding": ("center",),
}
RTOL, ATOL = 1e-5, 1e-3

PrefixFn = Callable[[list[list[str]]], list[np.ndarray]]


class SuiteError(ValueError):
  """A malformed suite or formula; the message names the file, item and condition."""


# ---- suites


@dataclasses.dataclass(frozen=True)
class Prediction:
  formula: str
  tree: tuple


@dataclasses.dataclass(frozen=True)
class Item:
  number: int
  conditions: dict[str, tuple[str, ...]]  # condition -> region contents, region 1 first


@dataclasses.dataclass(frozen=True)
class Suite:
  name: str
  regions: dict[int, str]
  predictions: tuple[Prediction, ...]
  items: tuple[Item, ...]
  path: str


def load_suite(path: str | pathlib.Path) -> Suite:
  """Reads and checks one suite JSON (every formula parsed, every reference resolvable)."""
  path = pathlib.Path(path)
  try:
    data = json.loads(path.read_text(encoding="utf-8"))
    name = data["meta"]["name"]
    regions = {int(k): v for k, v in data["region_meta"].items()}
    formulas = [p["formula"] for p in data["predictions"] if p.get("type", "formula") == "formula"]
  except (KeyError, TypeError, ValueError) as error:
    raise SuiteError(f"{path}: not a SyntaxGym suite ({error!r})") from error
  items = []
  for raw in data.get("items", []):
    conditions = {}
    for condition in raw["conditions"]:
      contents = {int(r["region_number"]): str(r.get("content") or "").strip()
                  for r in condition["regions"]}
      if sorted(contents) != sorted(regions):
        raise SuiteError(f"{path}: item {raw['item_number']} condition "
                         f"{condition['condition_name']}: regions {sorted(contents)} differ from "
                         f"region_meta {sorted(regions)}")
      conditions[condition["condition_name"]] = tuple(contents[r] for r in sorted(regions))
    items.append(Item(int(raw["item_number"]), conditions))
  predictions = []
  for formula in formulas:
    try:
      tree = parse_formula(formula)
    except SuiteError as error:
      raise SuiteError(f"{path}: {error}") from None
    for region, condition in _references(tree):
      if region != "*" and region not in regions:
        raise SuiteError(f"{path}: formula {formula!r} refers to region {region}, not in "
                         f"region_meta")
      missing = [i.number for i in items if condition not in i.conditions]
      if missing:
        raise SuiteError(f"{path}: formula {formula!r} refers to condition {condition!r}, "
                         f"missing in items {missing[:5]}")
    predictions.append(Prediction(formula, tree))
  return Suite(name, regions, tuple(predictions), tuple(items), str(path))


def load_suites(suites_dir: str | pathlib.Path,
                suites: SequenceT[str] | None = None) -> list[Suite]:
  """The suites of a folder of JSONs (all, or those named), sorted by file name."""
  folder = pathlib.Path(suites_dir)
  paths = sorted(folder.glob("*.json"))
  if not paths:
    raise FileNotFoundError(f"no suite *.json files in {folder}")
  if suites is not None:
    wanted = set(suites)
    paths = [p for p in paths if p.stem in wanted]
    missing = wanted - {p.stem for p in paths}
    if missing:
      raise FileNotFoundError(f"suites not found in {folder}: {sorted(missing)}")
  return [load_suite(p) for p in paths]


def tokenize_region(text: str) -> list[str]:
  """PTB-style words of one region's text (punctuation and clitics split off; "" → [])."""
  return ptb_words(text.strip())


# ---- formulas

_FORMULA_TOKEN = re.compile(r"\s*(?:(?P<ref>\(\s*(?:\d+|\*)\s*;\s*%[^%]+%\s*\))|"
                            r"(?P<num>\d+(?:\.\d*)?|\.\d+)|(?P<op><=|>=|==|!=|[<>=+\-*/&|()]))")
_REF = re.compile(r"\(\s*(\d+|\*)\s*;\s*%([^%]+)%\s*\)")


def _tokenize_formula(formula: str) -> list[tuple[str, Any]]:
  text = formula.replace("[", "(").replace("]", ")")
  tokens, position = [], 0
  while position < len(text):
    if text[position:].strip() == "":
      break
    match = _FORMULA_TOKEN.match(text, position)
    if not match:
      raise SuiteError(f"formula {formula!r}: cannot read {text[position:position + 12]!r}")
    if match.group("ref"):
      region, condition = _REF.fullmatch(match.group("ref").strip()).groups()
      tokens.append(("ref", ("*" if region == "*" else int(region), condition)))
    elif match.group("num"):
      tokens.append(("num", float(match.group("num"))))
    else:
      tokens.append(("op", match.group("op")))
    position = match.end()
  return tokens


def parse_formula(formula: str) -> tuple:
  """The expression tree of a prediction formula (nested tuples; see module docstring)."""
  tokens = _tokenize_formula(formula)
  position = 0

  def peek():
    return tokens[position] if position < len(tokens) else ("end", None)

  def take(*ops):
    nonlocal position
    kind, value = peek()
    if kind == "op" and value in ops:
      position += 1
      return value
    return None

  def binary(next_level, ops, node):
    def level():
      left = next_level()
      while (op := take(*ops)) is not None:
        left = (node, op, left, next_level())
      return left
    return level

  def unary():
    if take("-"):
      return ("neg", unary())
    if take("+"):
      return unary()
    return primary()

  def primary():
    nonlocal position
    kind, value = peek()
    if kind in ("num", "ref"):
      position += 1
      return (kind, value)
    if take("("):
      inner = disjunction()
      if not take(")"):
        raise SuiteError(f"formula {formula!r}: missing ')' at token {position}")
      return inner
    raise SuiteError(f"formula {formula!r}: unexpected {value!r} at token {position}")

  product = binary(unary, ("*", "/"), "arith")
  total = binary(product, ("+", "-"), "arith")

  def comparison():
    left = total()
    op = take("<", ">", "=", "==", "<=", ">=", "!=")
    return ("cmp", op, left, total()) if op else left

  conjunction = binary(comparison, ("&",), "logic")
  disjunction = binary(conjunction, ("|",), "logic")
  tree = disjunction()
  if position != len(tokens):
    raise SuiteError(f"formula {formula!r}: unexpected {peek()[1]!r} at token {position}")
  if not _is_boolean(tree):
    raise SuiteError(f"formula {formula!r}: is not a comparison")
  return tree


def _is_boolean(tree) -> bool:
  return tree[0] == "cmp" or (tree[0] == "logic" and _is_boolean(tree[2])
                              and _is_boolean(tree[3]))


def _references(tree) -> list[tuple[Any, str]]:
  if tree[0] == "ref":
    return [tree[1]]
  if tree[0] == "num":
    return []
  if tree[0] == "neg":
    return _references(tree[1])
  return _references(tree[2]) + _references(tree[3])


def evaluate_formula(tree, surprisal: Callable[[Any, str], float]):
  """Value of a parsed formula; `surprisal(region, condition)` resolves references."""
  kind = tree[0]
  if kind == "num":
    return tree[1]
  if kind == "ref":
    return surprisal(*tree[1])
  if kind == "neg":
    return -evaluate_formula(tree[1], surprisal)
  op, left, right = tree[1], evaluate_formula(tree[2], surprisal), None
  if kind == "logic":  # both sides evaluated: no short circuit hides a bad reference
    right = evaluate_formula(tree[3], surprisal)
    return (left and right) if op == "&" else (left or right)
  right = evaluate_formula(tree[3], surprisal)
  if kind == "arith":
    if op == "/":
      return left / right if right != 0 else math.nan  # nan: every comparison fails
    return {"+": left + right, "-": left - right, "*": left * right}[op]
  close = abs(left - right) <= ATOL + RTOL * abs(right)
  return {"<": left < right, ">": left > right, "=": close, "==": close, "!=": not close,
          "<=": left < right or close, ">=": left > right or close}[op]


# ---- evaluation


def prefix_logprob_fn(scorer, **beam_options) -> PrefixFn:
  """sentences → per sentence log p̃(x≤w), w = 1..L (natural log) for a `Scorer`'s model.

  Terminal, pause and Tree-Shuffle models: teacher forcing in the terminal format (a word's
  pieces and its trailing pauses). Other tree models: `BeamSearcher(scorer, **beam_options)`.
  """
  from slm_jax.eval.beam import BeamSearcher  # pylint: disable=g-import-not-at-top
  from slm_jax.eval.docppl import is_tree_model  # pylint: disable=g-import-not-at-top
  if not is_tree_model(scorer.configuration):
    return lambda sentences: [np.cumsum(w) for w in scorer.terminal_word_logprobs(sentences)]
  return _beam_prefix_fn(BeamSearcher(scorer, scorer.tokenizer, scorer.configuration,
                                      **beam_options))


def _beam_prefix_fn(searcher) -> PrefixFn:
  """Prefix log-probabilities by beam search; the longest sentence goes first, so its cache size
  serves them all (`BeamSearcher.decoder` reuses a cache large enough)."""

  def prefixes(sentences):
    longest_first = sorted(range(len(sentences)), key=lambda i: -searcher.slots(sentences[i]))
    found = {i: searcher.search(sentences[i], complete=False).prefix_logprobs
             for i in longest_first}
    return [found[i] for i in range(len(sentences))]

  return prefixes


def _circuits(suites_dir: pathlib.Path, circuits_path) -> tuple[dict, dict]:
  path = pathlib.Path(circuits_path) if circuits_path else suites_dir.parent / "circuits.json"
  if path.is_file():
    data = json.loads(path.read_text(encoding="utf-8"))
    return ({c: tuple(t) for c, t in data["circuit_tags"].items()},
            {c: tuple(s) for c, s in data["circuit_suites"].items()})
  return dict(CIRCUIT_TAGS), {}


def suite_tag(name: str) -> str:
  return re.split(r"[-_0-9]", name)[0]


def evaluate_suite(suite: Suite, prefix_fn: PrefixFn, *, max_items: int | None = None,
                   base: float = 2.0, vocabulary: Callable[[str], bool] | None = None) -> dict:
  """Accuracy of one suite (JSON-ready dict with per-item verdicts and surprisals)."""
  items = suite.items[:max_items] if max_items is not None else suite.items
  layouts = {}  # (item, condition) -> (words, region boundaries)
  for item in items:
    for condition, contents in item.conditions.items():
      region_words = [tokenize_region(c) for c in contents]
      bounds = np.cumsum([0] + [len(w) for w in region_words])
      layouts[(item.number, condition)] = ([w for ws in region_words for w in ws], bounds)
  unique = sorted({tuple(words) for words, _ in layouts.values() if words})
  prefixes = dict(zip(unique, prefix_fn([list(s) for s in unique]))) if unique else {}
  item_correct, failed, surprisals, prediction_hits = [], 0, [], np.zeros(len(suite.predictions))
  for item in items:
    table = {}
    for condition in item.conditions:
      words, bounds = layouts[(item.number, condition)]
      cum = np.concatenate([[0.0], np.asarray(prefixes.get(tuple(words), []), np.float64)])
      with np.errstate(invalid="ignore"):
        values = -(cum[bounds[1:]] - cum[bounds[:-1]]) / math.log(base)
      values[bounds[1:] == bounds[:-1]] = 0.0  # empty region
      table[condition] = values
    finite = all(np.isfinite(v).all() for v in table.values())
    surprisal = lambda region, condition: float(
        table[condition].sum() if region == "*" else table[condition][
            sorted(suite.regions).index(region)])
    verdicts = [bool(evaluate_formula(p.tree, surprisal)) and finite for p in suite.predictions]
    failed += not finite
    prediction_hits += verdicts
    item_correct.append(all(verdicts))
    surprisals.append({c: [round(float(x), 4) for x in v] for c, v in table.items()})
  n = len(items)
  unknown = sum(1 for words in unique for w in words if vocabulary and not vocabulary(w))
  return {
      "accuracy": float(np.mean(item_correct)) if n else math.nan,
      "items": n, "correct": int(sum(item_correct)), "failed_items": failed,
      "predictions": [{"formula": p.formula, "accuracy": float(h / n) if n else math.nan}
                      for p, h in zip(suite.predictions, prediction_hits)],
      "item_numbers": [i.number for i in items], "item_correct": item_correct,
      "surprisals": surprisals, "sentences": len(unique),
      "words": int(sum(len(s) for s in unique)), "unknown_words": unknown,
      "empty_regions": int(sum(int(np.sum(b[1:] == b[:-1])) for _, b in layouts.values())),
  }


def evaluate_syntaxgym(scorer_or_beam_fn, suites_dir: str | pathlib.Path, *,
                       max_items: int | None = None, suites: SequenceT[str] | None = None,
                       base: float = 2.0, circuits_path: str | None = None,
                       **beam_options) -> dict:
  """SyntaxGym accuracies (JSON-ready): per suite, per circuit, the 31-suite mean, paper SG.

  `scorer_or_beam_fn`: a `Scorer` (tree models → beam search with `beam_options`), a
  `BeamSearcher`, or a prefix function `sentences -> [log p̃(x≤w), w = 1..L]` per sentence.
  """
  from slm_jax.eval.beam import BeamSearcher  # pylint: disable=g-import-not-at-top
  from slm_jax.eval.scorer import Scorer  # pylint: disable=g-import-not-at-top
  suites_dir = pathlib.Path(suites_dir)
  vocabulary = None
  fn = scorer_or_beam_fn
  if isinstance(fn, Scorer):
    tokenizer = fn.tokenizer
    fn = prefix_logprob_fn(fn, **beam_options)
  elif isinstance(fn, BeamSearcher):
    tokenizer, fn = fn.tokenizer, _beam_prefix_fn(fn)
  else:
    tokenizer = None
  if tokenizer is not None and tokenizer.base.kind == "word":
    vocabulary = lambda w: tokenizer.encode_word(w) != (0,)
  circuit_tags, circuit_suites = _circuits(suites_dir, circuits_path)
  tag_circuit = {t: c for c, tags in circuit_tags.items() for t in tags}
  results = {}
  for suite in load_suites(suites_dir, suites):
    result = evaluate_suite(suite, fn, max_items=max_items, base=base, vocabulary=vocabulary)
    result["circuit"] = tag_circuit.get(suite_tag(suite.name))
    results[suite.name] = result
    _LOG.info("SyntaxGym %s: %d/%d items correct", suite.name, result["correct"],
              result["items"])
  by_suite = {}
  for circuit, names in circuit_suites.items():
    accs = [results[s]["accuracy"] for s in names if s in results]
    by_suite[circuit] = float(np.mean(accs)) if accs else None
  by_items = {}
  for circuit in circuit_tags:
    members = [r for r in results.values() if r["circuit"] == circuit]
    items = sum(r["items"] for r in members)
    by_items[circuit] = sum(r["correct"] for r in members) / items if items else None
  kept = [n for n in results if n not in EXCLUDED_SUITES]
  paper = [v for v in by_items.values() if v is not None]
  return {
      "suites": results,
      "circuits": by_suite,
      "circuits_by_items": by_items,
      "sg_31": float(np.mean([results[n]["accuracy"] for n in kept])) if kept else None,
      "sg_31_suites": len(kept),
      "sg_paper": float(np.mean(paper)) if len(paper) == len(by_items) else None,
      "counts": {
          "suites": len(results), "items": sum(r["items"] for r in results.values()),
          "sentences": sum(r["sentences"] for r in results.values()),
          "words": sum(r["words"] for r in results.values()),
          "unknown_words": sum(r["unknown_words"] for r in results.values()),
          "empty_regions": sum(r["empty_regions"] for r in results.values()),
          "failed_items": sum(r["failed_items"] for r in results.values()),
      },
      "base": base,
  }
