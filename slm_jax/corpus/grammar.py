"""Feature-template grammars compiled to a plain PCFG (the embedded treebank's grammar).

The text formats are documented at the top of `data/english.grammar` (rules, declarations) and
`data/english.lexicon` (words). `load_grammar` expands every template over its feature variables
into atomic nonterminals (`NP[n]` -> `NP[sg]`, `NP[pl]`), normalizes weights into probabilities per
left-hand side and validates the result: every symbol defined, reachable and productive, no unary
cycles, finite expected size. Any problem raises `GrammarError` naming the file and line.

The compiled `Grammar` is a true CFG: `rules` rewrite a nonterminal into nonterminals, and
`lexical_rules` rewrite a preterminal into one word. Each nonterminal has a kind: PHRASE nodes
appear in output trees under their PTB label, HIDDEN helpers are spliced out (their children attach
to the parent) and LEXICAL (POS) nodes are dropped, leaving the bare word, as in normalized trees.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import pathlib
import re
from typing import Mapping, Sequence

import numpy as np

from slm_jax import files
from slm_jax.kinds import PTB_LABELS
from slm_jax.trees import Child, Tree

PHRASE = "phrase"
HIDDEN = "hidden"
LEXICAL = "lexical"

DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"
DEFAULT_GRAMMAR = DATA_DIR / "english.grammar"

_SYMBOL = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?:\[([A-Za-z0-9_]+(?:,[A-Za-z0-9_]+)*)\])?$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class GrammarError(ValueError):
  """A malformed grammar or lexicon; the message starts with `file:line:`."""

  def __init__(self, where: str, message: str):
    super().__init__(f"{where}: {message}")
    self.where = where


@dataclasses.dataclass(frozen=True)
class Rule:
  """`lhs -> rhs` (all nonterminals) with its probability; `source` is the template's file:line."""
  lhs: str
  rhs: tuple[str, ...]
  prob: float
  source: str = ""


@dataclasses.dataclass(frozen=True)
class LexicalRule:
  """`lhs -> word` for a preterminal `lhs`."""
  lhs: str
  word: str
  prob: float
  source: str = ""


class Grammar:
  """A compiled PCFG. Nonterminals are atomic strings such as `NP[sg]`."""

  def __init__(self, start: str, kinds: Mapping[str, str], rules: Sequence[Rule],
               lexical_rules: Sequence[LexicalRule], features: Mapping[str, tuple[str, ...]],
               source: str = ""):
    self.start = start
    self.kinds = dict(kinds)
    self.nonterminals = tuple(self.kinds)
    self.rules = tuple(rules)
    self.lexical_rules = tuple(lexical_rules)
    self.features = dict(features)
    self.source = source
    self.labels = {nt: output_label(nt) for nt, k in self.kinds.items() if k == PHRASE}
    self.rules_by_lhs: dict[str, list[Rule]] = {nt: [] for nt in self.nonterminals}
    for r in self.rules:
      self.rules_by_lhs[r.lhs].append(r)
    self.lexical_by_lhs: dict[str, list[LexicalRule]] = {nt: [] for nt in self.nonterminals}
    for r in self.lexical_rules:
      self.lexical_by_lhs[r.lhs].append(r)

  def kind(self, nt: str) -> str:
    return self.kinds[nt]

  @functools.cached_property
  def vocabulary(self) -> tuple[str, ...]:
    """All words, sorted."""
    return tuple(sorted({r.word for r in self.lexical_rules}))

  @functools.cached_property
  def word_categories(self) -> dict[str, frozenset[str]]:
    """word -> the preterminals that can produce it."""
    out: dict[str, set[str]] = {}
    for r in self.lexical_rules:
      out.setdefault(r.word, set()).add(r.lhs)
    return {w: frozenset(c) for w, c in out.items()}

  def _mean_matrix(self) -> tuple[list[str], np.ndarray]:
    syn = [nt for nt in self.nonterminals if self.kinds[nt] != LEXICAL]
    index = {nt: i for i, nt in enumerate(syn)}
    mat = np.zeros((len(syn), len(syn)))
    for r in self.rules:
      for s in r.rhs:
        if s in index:
          mat[index[r.lhs], index[s]] += r.prob
    return syn, mat

  def spectral_radius(self) -> float:
    """Of the expected-children matrix over non-lexical nonterminals; < 1 iff consistent."""
    _, mat = self._mean_matrix()
    return float(max(abs(np.linalg.eigvals(mat)))) if len(mat) else 0.0

  def expected_lengths(self) -> dict[str, float]:
    """Expected number of words derived from each nonterminal (exact, unbounded)."""
    syn, mat = self._mean_matrix()
    index = {nt: i for i, nt in enumerate(syn)}
    direct = np.zeros(len(syn))
    for r in self.rules:
      direct[index[r.lhs]] += r.prob * sum(1 for s in r.rhs if s not in index)
    solved = np.linalg.solve(np.eye(len(syn)) - mat, direct)
    out = {nt: float(solved[index[nt]]) for nt in syn}
    out.update({nt: 1.0 for nt, k in self.kinds.items() if k == LEXICAL})
    return out

  def to_output_tree(self, derivation: Tree) -> Tree:
    """Maps a derivation (labels are nonterminals, words under preterminals) to an output tree."""
    kids = self._output_children(derivation)
    if len(kids) != 1 or not isinstance(kids[0], Tree):
      raise ValueError(f"derivation rooted at {derivation.label} does not yield a single tree")
    return kids[0]

  def _output_children(self, node: Tree) -> list[Child]:
    kind = self.kinds[node.label]
    if kind == LEXICAL:
      return list(node.children)
    kids: list[Child] = []
    for child in node.children:
      kids.extend(self._output_children(child) if isinstance(child, Tree) else [child])
    if kind == HIDDEN:
      return kids
    return [Tree(self.labels[node.label], tuple(kids))]


def base_name(symbol: str) -> str:
  """`NP_c1[sg]` -> `NP_c1`."""
  return symbol.split("[", 1)[0]


def output_label(symbol: str) -> str:
  """The PTB label of a phrase category: its name up to the first `_` (`SBAR_orc[sg]` -> `SBAR`)."""
  return base_name(symbol).split("_", 1)[0]


def atom(name: str, values: Sequence[str]) -> str:
  return f"{name}[{','.join(values)}]" if values else name


@functools.lru_cache(maxsize=None)
def default_grammar() -> Grammar:
  """The embedded treebank's grammar (`data/english.grammar`), loaded once."""
  return load_grammar(DEFAULT_GRAMMAR)


def load_grammar(path: str | pathlib.Path,
                 lexicon_path: str | pathlib.Path | None = None) -> Grammar:
  """Reads, expands, normalizes and validates a grammar (and its `%lexicon`, unless given)."""
  lexicon = None if lexicon_path is None else pathlib.Path(lexicon_path)
  return _Loader(pathlib.Path(path)).load(lexicon)


@dataclasses.dataclass
class _Template:
  lhs: tuple[str, tuple[str, ...]]
  rhs: list[tuple[str, tuple[str, ...]]]
  weight: float
  where: str


def _strip(line: str) -> str:
  return line.split("#", 1)[0].strip()


class _Loader:
  """Parses the two text formats, then compiles and validates."""

  def __init__(self, path: pathlib.Path):
    self.path = path
    self.start: tuple[str, str] | None = None
    self.lexicon: tuple[str, str] | None = None
    self.variables: dict[str, tuple[str, ...]] = {}
    self.values: set[str] = set()
    self.kinds: dict[str, str] = {}
    self.arity: dict[str, tuple[int, str]] = {}
    self.templates: list[_Template] = []
    self.words: dict[str, dict[str, float]] = {}  # preterminal atom -> word -> weight
    self.word_source: dict[str, str] = {}

  def load(self, lexicon_path: pathlib.Path | None) -> Grammar:
    try:
      text = self.path.read_text(encoding="utf-8")
    except OSError as e:
      raise GrammarError(str(self.path), f"cannot read grammar: {e}") from e
    self._parse_grammar(text)
    where = f"{self.path}:1"
    if self.start is None:
      raise GrammarError(where, "no %start declaration")
    if lexicon_path is None:
      if self.lexicon is None:
        raise GrammarError(where, "no %lexicon declaration (and no lexicon path given)")
      lexicon_path = self.path.parent / self.lexicon[0]
    try:
      lex_text = lexicon_path.read_text(encoding="utf-8")
    except OSError as e:
      raise GrammarError(self.lexicon[1] if self.lexicon else str(lexicon_path),
                         f"cannot read lexicon {lexicon_path}: {e}") from e
    self._parse_lexicon(lexicon_path, lex_text)
    return self._compile()

  # ---- parsing ------------------------------------------------------------------------------
  def _parse_grammar(self, text: str) -> None:
    lhs = None
    for number, raw in enumerate(files.text_lines(text), 1):
      where = f"{self.path}:{number}"
      line = _strip(raw)
      if not line:
        continue
      if line.startswith("%"):
        self._directive(line, where)
        lhs = None
      elif line.startswith("|"):
        if lhs is None:
          raise GrammarError(where, "a line starting with '|' must follow a rule")
        self._alternatives(lhs, line[1:], where)
      else:
        if "->" not in line:
          raise GrammarError(where, f"expected a rule 'LHS -> RHS' or a %directive, got {line!r}")
        head, body = line.split("->", 1)
        lhs = self._symbol(head.strip(), where)
        if self.kinds.get(lhs[0]) == LEXICAL:
          raise GrammarError(where, f"lexical category {lhs[0]} cannot have grammar rules "
                             "(list its words in the lexicon)")
        self._alternatives(lhs, body, where)

  def _directive(self, line: str, where: str) -> None:
    name, *args = line.split()
    if name in ("%start", "%lexicon"):
      if len(args) != 1:
        raise GrammarError(where, f"{name} takes exactly one argument")
      attr = name[1:]
      if getattr(self, attr) is not None:
        raise GrammarError(where, f"{name} given twice (first at {getattr(self, attr)[1]})")
      setattr(self, attr, (args[0], where))
    elif name == "%feature":
      if len(args) < 3 or args[1] != "=":
        raise GrammarError(where, "expected '%feature VAR = value1 value2 ...'")
      var, domain = args[0], tuple(args[2:])
      for token in (var, *domain):
        if not _NAME.match(token):
          raise GrammarError(where, f"bad feature name {token!r}")
      if var in self.variables or var in self.values:
        raise GrammarError(where, f"feature variable {var!r} already declared (or used as a value)")
      if len(set(domain)) != len(domain) or set(domain) & set(self.variables) or var in domain:
        raise GrammarError(where, f"bad values for feature {var!r}: {' '.join(domain)}")
      self.variables[var] = domain
      self.values.update(domain)
    elif name in ("%phrase", "%hidden", "%lexical"):
      kind = name[1:]
      for cat in args:
        if not _NAME.match(cat):
          raise GrammarError(where, f"bad category name {cat!r}")
        if cat in self.kinds:
          raise GrammarError(where, f"category {cat} declared twice")
        if kind == PHRASE and output_label(cat) not in PTB_LABELS:
          raise GrammarError(where, f"phrase {cat} has output label {output_label(cat)!r}, "
                             "which is not a PTB label")
        self.kinds[cat] = kind
    else:
      raise GrammarError(where, f"unknown directive {name}")

  def _symbol(self, token: str, where: str,
              values_only: bool = False) -> tuple[str, tuple[str, ...]]:
    if token and (token[0].isdigit() or token[0] in "+-."):
      raise GrammarError(where, f"bad weight {token!r} (weights are positive numbers, last)")
    match = _SYMBOL.match(token)
    if not match:
      raise GrammarError(where, f"bad symbol {token!r}")
    name, feats = match.group(1), tuple(match.group(2).split(",")) if match.group(2) else ()
    if name not in self.kinds:
      raise GrammarError(where, f"unknown symbol {token!r}: category {name} is not declared "
                         "with %phrase, %hidden or %lexical")
    for f in feats:
      if f in self.variables and not values_only:
        continue
      if f not in self.values:
        note = " (a variable is not allowed here)" if f in self.variables else ""
        raise GrammarError(where, f"undefined feature value {f!r} in {token!r}{note}")
    seen = self.arity.setdefault(name, (len(feats), where))
    if seen[0] != len(feats):
      raise GrammarError(where, f"{name} used with {len(feats)} feature(s) here but {seen[0]} "
                         f"at {seen[1]}")
    return name, feats

  def _alternatives(self, lhs: tuple[str, tuple[str, ...]], body: str, where: str) -> None:
    for alt in body.split("|"):
      tokens = alt.split()
      weight = 1.0
      if tokens and _NUMBER.match(tokens[-1]):
        weight = _weight(tokens.pop(), where)
      if not tokens:
        raise GrammarError(where, "empty right-hand side (rules must produce at least one symbol)")
      rhs = [self._symbol(t, where) for t in tokens]
      self.templates.append(_Template(lhs, rhs, weight, where))

  def _parse_lexicon(self, path: pathlib.Path, text: str) -> None:
    columns: list[list[str]] | None = None
    for number, raw in enumerate(files.text_lines(text), 1):
      where = f"{path}:{number}"
      line = _strip(raw)
      if not line:
        continue
      tokens = line.split()
      if tokens[0].startswith("%"):
        if tokens[0] != "%paradigm" or len(tokens) < 2:
          raise GrammarError(where, "expected '%paradigm CATEGORY ...'")
        columns = []
        for col in tokens[1:]:
          cats = []
          for part in col.split("+"):
            name, feats = self._symbol(part, where, values_only=True)
            if self.kinds[name] != LEXICAL:
              raise GrammarError(where, f"{name} is not a %lexical category")
            cats.append(atom(name, feats))
          columns.append(cats)
        continue
      if columns is None:
        raise GrammarError(where, "words before the first %paradigm line")
      weight = 1.0
      if len(tokens) == len(columns) + 1 and _NUMBER.match(tokens[-1]):
        weight = _weight(tokens.pop(), where)
      if len(tokens) != len(columns):
        raise GrammarError(where, f"expected {len(columns)} word(s) and an optional weight, got "
                           f"{len(tokens)} token(s)")
      for word, cats in zip(tokens, columns):
        if _NUMBER.match(word) or word[0].isdigit():
          raise GrammarError(where, f"bad word or weight {word!r}")
        for cat in cats:
          entries = self.words.setdefault(cat, {})
          entries[word] = entries.get(word, 0.0) + weight
          self.word_source.setdefault(cat, where)

  # ---- compiling ----------------------------------------------------------------------------
  def _compile(self) -> Grammar:
    start, start_where = self.start
    start_name, start_feats = self._symbol(start, start_where, values_only=True)
    start = atom(start_name, start_feats)
    weights: dict[tuple[str, tuple[str, ...]], float] = {}
    sources: dict[tuple[str, tuple[str, ...]], str] = {}
    for tpl in self.templates:
      for lhs, rhs, w in self._expand(tpl):
        key = (lhs, rhs)
        weights[key] = weights.get(key, 0.0) + w
        sources.setdefault(key, tpl.where)
    defined = {lhs for lhs, _ in weights} | set(self.words)
    for (lhs, rhs), where in sources.items():
      for s in rhs:
        if s not in defined:
          lexical = self.kinds[base_name(s)] == LEXICAL
          what = "has no words in the lexicon" if lexical else "has no rules"
          raise GrammarError(where, f"unknown symbol {s} (in the expansion {lhs} -> "
                             f"{' '.join(rhs)}): {s} {what}")
    if start not in defined:
      raise GrammarError(start_where, f"start symbol {start} has no rules")
    kinds = {}
    order = [start] + sorted(defined - {start})
    for nt in order:
      kinds[nt] = self.kinds[base_name(nt)]
    self._check_start(start, weights, start_where)
    rules = _normalize(weights, sources)
    lexical = []
    for cat, entries in self.words.items():
      total = sum(entries.values())
      lexical += [LexicalRule(cat, w, x / total, self.word_source[cat]) for w, x in entries.items()]
    grammar = Grammar(start, kinds, rules, lexical, self.variables, str(self.path))
    self._validate(grammar, sources)
    return grammar

  def _expand(self, tpl: _Template):
    lhs_vars = [f for f in dict.fromkeys(tpl.lhs[1]) if f in self.variables]
    rhs_vars = [f for s in tpl.rhs for f in s[1] if f in self.variables and f not in lhs_vars]
    rhs_vars = list(dict.fromkeys(rhs_vars))
    split = math.prod(len(self.variables[v]) for v in rhs_vars)
    names = lhs_vars + rhs_vars
    for values in itertools.product(*(self.variables[v] for v in names)):
      env = dict(zip(names, values))
      lhs = atom(tpl.lhs[0], [env.get(f, f) for f in tpl.lhs[1]])
      rhs = tuple(atom(name, [env.get(f, f) for f in feats]) for name, feats in tpl.rhs)
      yield lhs, rhs, tpl.weight / split

  def _check_start(self, start: str, weights, where: str) -> None:
    if self.kinds[base_name(start)] == PHRASE:
      return
    if self.kinds[base_name(start)] == LEXICAL:
      raise GrammarError(where, f"start symbol {start} is lexical")
    for lhs, rhs in weights:
      if lhs == start and (len(rhs) != 1 or self.kinds[base_name(rhs[0])] != PHRASE):
        raise GrammarError(where, f"hidden start symbol {start} must rewrite to exactly one "
                           f"phrase, not {' '.join(rhs)}")

  def _validate(self, g: Grammar, sources) -> None:
    where = f"{self.path}:1"
    productive = {nt for nt, k in g.kinds.items() if k == LEXICAL}
    changed = True
    while changed:
      changed = False
      for r in g.rules:
        if r.lhs not in productive and all(s in productive for s in r.rhs):
          productive.add(r.lhs)
          changed = True
    if bad := [nt for nt in g.nonterminals if nt not in productive]:
      raise GrammarError(where, "unproductive nonterminals (derive no finite string): "
                         + " ".join(bad))
    reached, stack = {g.start}, [g.start]
    while stack:
      for r in g.rules_by_lhs[stack.pop()]:
        for s in r.rhs:
          if s not in reached:
            reached.add(s)
            stack.append(s)
    if bad := [nt for nt in g.nonterminals if nt not in reached]:
      hint = self.word_source.get(bad[0]) or next(
          (w for (lhs, _), w in sources.items() if lhs == bad[0]), where)
      raise GrammarError(hint, f"unreachable from {g.start}: {' '.join(bad)}")
    unary = {nt: [r.rhs[0] for r in g.rules_by_lhs[nt] if len(r.rhs) == 1] for nt in g.nonterminals}
    state: dict[str, int] = {}

    def visit(nt: str, path: list[str]) -> None:
      state[nt] = 1
      for nxt in unary[nt]:
        if state.get(nxt) == 1:
          cycle = path[path.index(nxt):] + [nxt] if nxt in path else [nt, nxt]
          raise GrammarError(where, f"unary cycle: {' -> '.join(cycle)}")
        if nxt not in state:
          visit(nxt, path + [nxt])
      state[nt] = 2

    for nt in g.nonterminals:
      if nt not in state:
        visit(nt, [nt])
    radius = g.spectral_radius()
    if not radius < 1.0:
      raise GrammarError(where, f"inconsistent grammar: expected size is infinite (spectral radius "
                         f"{radius:.3f} >= 1); lower the weights of recursive rules")


def _weight(token: str, where: str) -> float:
  try:
    value = float(token)
  except ValueError:
    value = math.nan
  if not (math.isfinite(value) and value > 0):
    raise GrammarError(where, f"bad weight {token!r} (must be a positive finite number)")
  return value


def _normalize(weights: Mapping[tuple[str, tuple[str, ...]], float], sources) -> list[Rule]:
  totals: dict[str, float] = {}
  for (lhs, _), w in weights.items():
    totals[lhs] = totals.get(lhs, 0.0) + w
  return [Rule(lhs, rhs, w / totals[lhs], sources[(lhs, rhs)]) for (lhs, rhs), w in weights.items()]
