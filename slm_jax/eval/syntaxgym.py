"""SyntaxGym (Hu et al. 2020; paper §5.2, App. B.2, SPEC §9): suites, region surprisals, formulas.

A suite JSON has `region_meta`, `predictions` (formula strings) and `items`, each item a set of
conditions, each condition a list of regions (text, possibly empty). Per condition the regions are
tokenized into PTB-style words and concatenated into one sentence; with prefix log-probabilities
ℓ(k) = log p̃(x≤k) (ℓ(0) = 0) the surprisal of region [s, e) is S = −ℓ(e) + ℓ(s), in bits
(SyntaxGym's unit; an empty region has S = 0). Tree models get ℓ from word-synchronous beam
search, terminal/pause (and Tree-Shuffle) models from teacher forcing.

Formulas (SyntaxGym semantics): `[`/`]` read as `(`/`)`; `(R;%c%)` is the surprisal of region R
(or `*`, the whole sentence) in condition c; arithmetic + − * / and unary minus; comparisons
< > and `=` (approximately equal: |a − b| <= 1e-3 + 1e-5·|b|); `&` and `|` with **equal
precedence, left to right** (the official syntaxgym grammar: `a | b & c` is `(a | b) & c`), below
the comparisons. A small recursive-descent parser, no eval.

**An item is correct when the suite's first prediction holds** (SPEC §9; the convention of Hu et
al.'s released results and of the paper's code) and its surprisals are finite; suite accuracy =
correct items / items. Every prediction's own accuracy is reported separately (`predictions`),
e.g. fgd_hierarchy's second one (two surprisals in different contexts equal within 1e-3), and
never folded into the verdict. Aggregation — the headline SG (mean of the six circuits, each
pooled over its items), the suite mean, the suite sets `hu31` / `paper32` — is
`slm_jax.eval.sg_aggregate`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import pathlib
import re
from typing import Any, Callable, Mapping, Sequence as SequenceT

import numpy as np

from slm_jax.eval import sg_aggregate
from slm_jax.splitting import ptb_words

_LOG = logging.getLogger(__name__)

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
    raw_items = data["items"]
  except (KeyError, TypeError, ValueError) as error:
    raise SuiteError(f"{path}: not a SyntaxGym suite ({error!r})") from error
  if not isinstance(raw_items, list) or not raw_items:
    raise SuiteError(f"{path}: a SyntaxGym suite without items (\"items\" is "
                     f"{'empty' if raw_items == [] else type(raw_items).__name__}); a suite "
                     "dropped from the headline would change its mean silently")
  items = []
  for raw in raw_items:
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
                suites: str | SequenceT[str] | None = "all") -> list[Suite]:
  """The suites of a folder of JSONs, sorted by file name: "all", a named set (`hu31`,
  `paper32`; None = hu31, `sg_aggregate.select_suites`) or the names listed."""
  folder = pathlib.Path(suites_dir)
  paths = sorted(folder.glob("*.json"))
  if not paths:
    raise FileNotFoundError(f"no suite *.json files in {folder}")
  if suites != "all":
    try:
      names, _ = sg_aggregate.select_suites([p.stem for p in paths], suites)
    except FileNotFoundError as error:
      raise FileNotFoundError(f"{folder}: {error}") from None
    wanted = set(names)
    paths = [p for p in paths if p.stem in wanted]
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

  disjunction = binary(comparison, ("&", "|"), "logic")  # one level: left to right
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


TREE_SCORINGS = ("joint", "terminal")


def prefix_logprob_fn(scorer, *, tree_scoring: str = "joint", **beam_options) -> PrefixFn:
  """sentences → per sentence log p̃(x≤w), w = 1..L (natural log) for a `Scorer`'s model.

  Terminal, pause and Tree-Shuffle models: teacher forcing in the terminal format (a word's
  pieces and its trailing pauses; Tree-Shuffle on terminals only, SPEC §9). Other tree models:
  `BeamSearcher(scorer, **beam_options)`; `tree_scoring="joint"` (default) reads the beam's
  marginal logsumexp of joint log-probs, `"terminal"` the best beam hypothesis' terminal-token
  log-probs only (the paper's `tree_eval_type=terminal`).
  """
  from slm_jax.inference.beam import BeamSearcher  # pylint: disable=g-import-not-at-top
  if tree_scoring not in TREE_SCORINGS:
    raise ValueError(f"tree_scoring must be one of {TREE_SCORINGS}, got {tree_scoring!r}")
  if not scorer.configuration.scheme.scored_with_structure:
    return lambda sentences: [np.cumsum(w) for w in scorer.terminal_word_logprobs(sentences)]
  return _beam_prefix_fn(BeamSearcher(scorer, scorer.tokenizer, scorer.configuration,
                                      **beam_options), tree_scoring)


def _beam_prefix_fn(searcher, tree_scoring: str = "joint") -> PrefixFn:
  """Prefix log-probabilities by beam search: `BeamSearcher.search_many` (the batched search by
  default; `batched=False` in the searcher's options: one sentence at a time, longest first so
  its cache size serves them all)."""
  field = "terminal_prefix_logprobs" if tree_scoring == "terminal" else "prefix_logprobs"

  def prefixes(sentences):
    if not searcher.batched:
      longest_first = sorted(range(len(sentences)), key=lambda i: -searcher.slots(sentences[i]))
      found = {i: getattr(searcher.search(sentences[i], complete=False), field)
               for i in longest_first}
      return [found[i] for i in range(len(sentences))]
    return [getattr(r, field) for r in searcher.search_many(sentences, complete=False)]

  return prefixes


def evaluate_suite(suite: Suite, prefix_fn: PrefixFn, *, max_items: int | None = None,
                   base: float = 2.0, vocabulary: Callable[[str], bool] | None = None,
                   split_region: Callable[[str], list[str]] = tokenize_region) -> dict:
  """Accuracy of one suite (JSON-ready dict with per-item verdicts and surprisals): an item is
  correct when the first prediction holds; `predictions` gives each prediction's accuracy.
  `split_region`: a region's text → the units `prefix_fn` scores (PTB words; a pretrained
  checkpoint's raw-text scorer takes each region whole: `eval.raw_text.region_units`)."""
  items = suite.items[:max_items] if max_items is not None else suite.items
  layouts = {}  # (item, condition) -> (words, region boundaries)
  for item in items:
    for condition, contents in item.conditions.items():
      region_words = [split_region(c) for c in contents]
      bounds = np.cumsum([0] + [len(w) for w in region_words])
      layouts[(item.number, condition)] = ([w for ws in region_words for w in ws], bounds)
  unique = sorted({tuple(words) for words, _ in layouts.values() if words})
  prefixes = dict(zip(unique, prefix_fn([list(s) for s in unique]))) if unique else {}
  verdicts_IP = np.zeros((len(items), len(suite.predictions)), bool)
  failed, surprisals = 0, []
  for i, item in enumerate(items):
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
    verdicts_IP[i] = [bool(evaluate_formula(p.tree, surprisal)) and finite
                      for p in suite.predictions]
    failed += not finite
    surprisals.append({c: [round(float(x), 4) for x in v] for c, v in table.items()})
  n = len(items)
  item_correct = verdicts_IP[:, 0] if suite.predictions else np.zeros(n, bool)
  unknown = sum(1 for words in unique for w in words if vocabulary and not vocabulary(w))
  return {
      "accuracy": float(item_correct.mean()) if n else math.nan,
      "items": n, "correct": int(item_correct.sum()), "failed_items": failed,
      "item_rule": sg_aggregate.ITEM_RULE,
      "predictions": [{"formula": p.formula, "accuracy": float(h / n) if n else math.nan,
                       "correct": int(h)} for p, h in zip(suite.predictions,
                                                          verdicts_IP.sum(axis=0))],
      "all_predictions_correct": int(verdicts_IP.all(axis=1).sum()),
      "item_numbers": [i.number for i in items], "item_correct": item_correct.tolist(),
      "surprisals": surprisals, "sentences": len(unique),
      "words": int(sum(len(s) for s in unique)), "unknown_words": unknown,
      "empty_regions": int(sum(int(np.sum(b[1:] == b[:-1])) for _, b in layouts.values())),
  }


def evaluate_syntaxgym(scorer_or_beam_fn, suites_dir: str | pathlib.Path, *,
                       max_items: int | None = None, suites: str | SequenceT[str] | None = None,
                       base: float = 2.0, circuits_path: str | None = None,
                       tree_scoring: str = "joint",
                       progress: Callable[[int, int], None] | None = None,
                       on_suite: Callable[[str, dict], None] | None = None,
                       done: Mapping[str, dict] | None = None,
                       split_region: Callable[[str], list[str]] = tokenize_region,
                       **beam_options) -> dict:
  """SyntaxGym accuracies (JSON-ready): per suite, per circuit, the headline SG, the suite mean.

  `scorer_or_beam_fn`: a `Scorer` (tree models → beam search with `beam_options`, read as
  `tree_scoring`), a `BeamSearcher`, or a prefix function `sentences -> [log p̃(x≤w)]`.
  `suites`: `hu31` (None, the default), `paper32`, or suite names (`sg_aggregate`).
  `progress(done, total)` is called with the suites done, at the start and after each suite
  (`cli.Progress` prints the rate and ETA: a tree model's beam at b = 300 takes minutes a suite).
  `on_suite(name, result)` is called with each suite's result as soon as it is done (a caller
  can keep finished suites: `eval.sg_partial.SuitesInFlight`). `done` (name → result) holds
  suites finished before (a killed evaluation's, `SuitesInFlight.done`): they are taken as they
  are, not evaluated again (`counts.reused_suites`). Tree models search the
  sentences of a suite together (`BeamSearcher.search_many`; `batched=False` in `beam_options`
  searches one at a time). `split_region`: as `evaluate_suite`'s.
  """
  from slm_jax.inference.beam import BeamSearcher  # pylint: disable=g-import-not-at-top
  from slm_jax.inference.scorer import Scorer  # pylint: disable=g-import-not-at-top
  suites_dir = pathlib.Path(suites_dir)
  vocabulary = None
  fn = scorer_or_beam_fn
  if isinstance(fn, Scorer):
    tokenizer = fn.tokenizer
    fn = prefix_logprob_fn(fn, tree_scoring=tree_scoring, **beam_options)
  elif isinstance(fn, BeamSearcher):
    tokenizer, fn = fn.tokenizer, _beam_prefix_fn(fn, tree_scoring)
  else:
    tokenizer = None
  if tokenizer is not None and tokenizer.base.kind == "word":
    vocabulary = lambda w: tokenizer.encode_word(w) != (0,)
  tags = sg_aggregate.circuit_tags(circuits_path or suites_dir.parent / "circuits.json")
  available = sorted(p.stem for p in suites_dir.glob("*.json"))
  names, label = sg_aggregate.select_suites(available, suites) if available else ([], "")
  results = {}
  loaded = load_suites(suites_dir, names)
  if progress:
    progress(0, len(loaded))
  done = dict(done or {})
  reused = 0
  for suite in loaded:
    if suite.name in done:
      result, reused = done[suite.name], reused + 1
    else:
      result = evaluate_suite(suite, fn, max_items=max_items, base=base, vocabulary=vocabulary,
                              split_region=split_region)
      result["circuit"] = sg_aggregate.circuit_of(suite.name, tags)
      if on_suite:
        on_suite(suite.name, result)
    results[suite.name] = result
    if progress:
      progress(len(results), len(loaded))
    _LOG.info("SyntaxGym %s: %d/%d items correct", suite.name, result["correct"],
              result["items"])
  summary = sg_aggregate.aggregate({n: r["item_correct"] for n, r in results.items()}, tags,
                                   label)
  return {
      "suites": results, **summary,
      "counts": {
          "suites": len(results), "reused_suites": reused,
          "items": sum(r["items"] for r in results.values()),
          "sentences": sum(r["sentences"] for r in results.values()),
          "words": sum(r["words"] for r in results.values()),
          "unknown_words": sum(r["unknown_words"] for r in results.values()),
          "empty_regions": sum(r["empty_regions"] for r in results.values()),
          "failed_items": sum(r["failed_items"] for r in results.values()),
          "items_failing_a_later_prediction": sum(
              r["correct"] - r["all_predictions_correct"] for r in results.values()),
      },
      "base": base, "tree_scoring": tree_scoring,
  }
