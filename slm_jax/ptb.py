"""Penn-Treebank bracketed trees: reader, SPEC §1 normalization, writer.

Syntax. The text is split into `(`, `)` and words (runs of characters that are neither whitespace
nor parentheses). A node is `(` LABEL CHILD+ `)`: LABEL is the word right after `(`, or empty when
`(` is directly followed by `(` (the PTB `( (S …))` wrapper); a child is a word or a node, in any
mix. Any number of trees may follow each other, across or within lines.

Rejected as malformed (`TreeError`, with source and 1-based line; `.kind` is the category counted):
- "unbalanced brackets": a `)` outside any tree (line of that `)`), or a tree still open at the end
  of the text (line where that tree starts; the reason says how many `(` are unclosed);
- "empty tree": `()` or `( )`, at top level or inside a tree (line of that `(`);
- "node without children": a label with nothing after it, `(NP )` (line of that `(`);
- "word outside any tree": a word at top level (line of the word);
- "unknown label": a phrase label not in PTB_LABELS when `unknown_labels="raise"`;
- "invalid utf-8": files only (line of the first bad byte).
A "label with spaces" cannot be told apart in text from a label followed by words (`(NP SBJ x)` is
NP over the words SBJ, x), so it is rejected where it is detectable: `format_tree`, `write_trees`
and `normalize_tree` refuse labels or words containing whitespace or parentheses ("bad label",
"bad word"), and nodes without children.

Strict mode raises at the first problem. Lenient mode skips and counts in the `ReadReport`: a tree
with a problem inside is skipped up to its closing bracket; an unbalanced-bracket problem skips to
the next line that starts with `(` in column 0 (or the end): for an unclosed tree from its start,
for a stray `)` the trees read since the last such line are taken back (all counted); a run of stray
words counts once. A file that is not valid UTF-8 is skipped whole (`files_skipped`).

Normalization (SPEC §1, `NormalizeOptions`; `normalize=None` reads raw trees). A preterminal is a
node whose only child, as read, is a word and whose label (function tags stripped) is not one of the
26 phrase labels: `(NN cat)` is a POS preterminal, `(NP cat)` a one-word phrase. So raw PTB/GUM trees
lose their POS layer, while already-normalized skeletal trees (no POS, as `explain` users type them
and as slm_jax writes them) read back unchanged. Preterminal labels are never checked against
PTB_LABELS; every other label is, after function tags are stripped. A top-level preterminal stays a
node. A wrapper over words only (GUM's `(ROOT (VB Understand))`) cannot be dropped, since nothing
else would hold the words: the sentence keeps one root node labelled X (`ReadReport.word_roots`).
"""

from __future__ import annotations

import bisect
import codecs
import collections
import contextlib
import dataclasses
import errno
import gc
import logging
import os
import pathlib
import re
from typing import Iterable, Literal, Sequence

from slm_jax import inputs
from slm_jax.kinds import PTB_LABELS, UNKNOWN_LABEL
from slm_jax.trees import Child, Tree

_LOG = logging.getLogger(__name__)

_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")
_BAD_CHAR_RE = re.compile(r"[\s()]")
_PTB_LABEL_SET = frozenset(PTB_LABELS)
_WRAPPER_LABELS = frozenset(("", "ROOT", "TOP"))
# Key of `_Normalizer.pending` counting word-only sentences (labels never hold spaces).
_WORD_ROOT = " word root"
DEFAULT_PATTERNS = inputs.PTB_PATTERNS  # the files a folder contributes
MAX_KEPT_ERRORS = 100

# Problem categories (TreeError.kind, ReadReport.skipped_by_reason keys).
UNBALANCED = "unbalanced brackets"
EMPTY_TREE = "empty tree"
NO_CHILDREN = "node without children"
STRAY_WORD = "word outside any tree"
UNKNOWN = "unknown label"
BAD_ENCODING = "invalid utf-8"
BAD_LABEL = "bad label"
BAD_WORD = "bad word"


class TreeError(ValueError):
  """Malformed tree input, located as `{source}:{line}: {reason}`."""

  def __init__(self, source: str, line: int | None, reason: str, kind: str | None = None):
    self.source = source
    self.line = line
    self.reason = reason
    self.kind = kind or reason
    where = source if line is None else f"{source}:{line}"
    super().__init__(f"{where}: {reason}")

  def __reduce__(self):
    return (TreeError, (self.source, self.line, self.reason, self.kind))


class _Problem(Exception):
  """A problem found while parsing, located by token index until it becomes a TreeError."""

  def __init__(self, kind: str, reason: str, at: int | None):
    super().__init__(reason)
    self.kind, self.reason, self.at = kind, reason, at


@dataclasses.dataclass(frozen=True)
class NormalizeOptions:
  """SPEC §1 normalization switches; the defaults are the SPEC's."""

  drop_wrapper: bool = True  # top-level "", ROOT or TOP node with one child tree -> that child
  drop_empty: bool = True  # drop -NONE- nodes and every constituent left without children
  strip_function_tags: bool = True  # NP-SBJ-1 -> NP, PP=2 -> PP; -LRB-, -NONE- kept
  drop_preterminals: bool = True  # (NN cat) -> cat
  # "map": unknown phrase labels become X (counted); "raise": TreeError; "keep": left as they are.
  unknown_labels: Literal["map", "raise", "keep"] = "map"

  def __post_init__(self):
    if self.unknown_labels not in ("map", "raise", "keep"):
      raise ValueError(
          f"unknown_labels must be 'map', 'raise' or 'keep', got {self.unknown_labels!r}")

  @classmethod
  def raw(cls) -> NormalizeOptions:
    """No normalization at all (same as `normalize=None`)."""
    return cls(False, False, False, False, "keep")

  @property
  def is_raw(self) -> bool:
    return not (self.drop_wrapper or self.drop_empty or self.strip_function_tags
                or self.drop_preterminals) and self.unknown_labels == "keep"


@dataclasses.dataclass
class ReadReport:
  """What a read produced and everything it skipped or changed, by reason."""

  trees_read: int = 0
  trees_skipped: int = 0
  skipped_by_reason: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  unknown_labels: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  empty_after_normalization: int = 0
  # Sentences that are words only (`(ROOT (VB Understand))`): with POS layers and the wrapper
  # dropped nothing would hold the words, so they keep one root node labelled X.
  word_roots: int = 0
  files_read: int = 0
  files_skipped: int = 0  # lenient mode: files that are not valid UTF-8
  empty_files: int = 0  # files without any tree left (not made into documents)
  # The first MAX_KEPT_ERRORS problems, located (the counts above are always complete).
  errors: list[TreeError] = dataclasses.field(default_factory=list)

  def keep_error(self, error: TreeError) -> None:
    if len(self.errors) < MAX_KEPT_ERRORS:
      self.errors.append(error)

  def add_pending(self, pending: collections.Counter) -> None:
    """Counts one tree's normalization notes (`_Normalizer.pending`)."""
    for key, count in pending.items():
      if key == _WORD_ROOT:
        self.word_roots += count
      else:
        self.unknown_labels[key] += count

  def merge(self, other: ReadReport) -> ReadReport:
    """Adds `other`'s counts to this report (in place) and returns it."""
    self.trees_read += other.trees_read
    self.trees_skipped += other.trees_skipped
    self.skipped_by_reason.update(other.skipped_by_reason)
    self.unknown_labels.update(other.unknown_labels)
    self.empty_after_normalization += other.empty_after_normalization
    self.word_roots += other.word_roots
    self.files_read += other.files_read
    self.files_skipped += other.files_skipped
    self.empty_files += other.empty_files
    for error in other.errors:
      self.keep_error(error)
    return self

  @property
  def noteworthy(self) -> bool:
    return bool(self.trees_skipped or self.unknown_labels or self.empty_after_normalization
                or self.word_roots or self.files_skipped or self.empty_files)

  def summary(self) -> str:
    lines = [f"read {self.trees_read} trees"
             + (f" from {self.files_read} files" if self.files_read else "")
             + f"; skipped {self.trees_skipped} malformed"
             + f"; {self.empty_after_normalization} empty after normalization"]
    if self.skipped_by_reason:
      reasons = self.skipped_by_reason.most_common()
      lines.append("skipped: " + ", ".join(f"{k} ×{v}" for k, v in reasons))
    if self.unknown_labels:
      total = sum(self.unknown_labels.values())
      labels = ", ".join(f"{k!r} ×{v}" for k, v in self.unknown_labels.most_common(10))
      more = ", …" if len(self.unknown_labels) > 10 else ""
      lines.append(f"unknown labels mapped to {UNKNOWN_LABEL}: {total} ({labels}{more})")
    if self.word_roots:
      lines.append(f"sentences of words only, kept under an {UNKNOWN_LABEL} root: "
                   f"{self.word_roots}")
    if self.files_skipped or self.empty_files:
      lines.append(f"files skipped: {self.files_skipped}; files without trees: {self.empty_files}")
    lines.extend(f"  {error}" for error in self.errors[:5])
    if len(self.errors) > 5:
      lines.append(f"  … ({self.trees_skipped + self.files_skipped} problems in all)")
    return "\n".join(lines)


def tokenize(text: str) -> list[str]:
  """`(`, `)` and words; the same tokens as `_TOKEN_RE.findall(text)`, about twice as fast."""
  return text.replace("(", " ( ").replace(")", " ) ").split()


def strip_function_tags(label: str) -> str:
  """`NP-SBJ-1` -> `NP`, `PP=2` -> `PP`, `NP-SBJ=3` -> `NP`; `-LRB-`, `-NONE-` stay."""
  if label.startswith("-"):
    end = label.find("-", 1)
    return label if end < 0 else label[:end + 1]
  for index in range(1, len(label)):
    if label[index] in "-=":
      return label[:index]
  return label


def is_pos_label(label: str) -> bool:
  """A POS tag, not a phrase label: `(NN cat)` is a preterminal, `(NP cat)` a one-word phrase.

  The 26 phrase labels never serve as POS tags, so already-normalized skeletal trees (no POS)
  read back unchanged while raw PTB/GUM trees lose their POS layer.
  """
  return strip_function_tags(label) not in _PTB_LABEL_SET


class _Normalizer:
  """Applies NormalizeOptions bottom-up, one node at a time, as nodes close."""

  def __init__(self, options: NormalizeOptions):
    self.options = options
    # Unknown labels of the current tree, and _WORD_ROOT if it is words only.
    self.pending: collections.Counter = collections.Counter()
    self._phrase_cache: dict[str, tuple[str, str | None]] = {}
    self._pos_cache: dict[str, str] = {}

  def pos_label(self, label: str) -> str:
    hit = self._pos_cache.get(label)
    if hit is None:
      hit = strip_function_tags(label) if self.options.strip_function_tags else label
      self._pos_cache[label] = hit
    return hit

  def is_pos(self, label: str) -> bool:
    return is_pos_label(label)

  def phrase_label(self, label: str, at: int | None) -> str:
    hit = self._phrase_cache.get(label)
    if hit is None:
      base = strip_function_tags(label) if self.options.strip_function_tags else label
      known = base in _PTB_LABEL_SET or self.options.unknown_labels == "keep"
      hit = (base, None) if known else (UNKNOWN_LABEL, base)
      self._phrase_cache[label] = hit
    final, unknown = hit
    if unknown is not None:
      if self.options.unknown_labels == "raise":
        origin = f" (from {label!r})" if label != unknown else ""
        raise _Problem(UNKNOWN, f"unknown label {unknown!r}{origin}", at)
      self.pending[unknown] += 1
    return final

  def take_pending(self) -> collections.Counter | None:
    if not self.pending:
      return None
    pending, self.pending = self.pending, collections.Counter()
    return pending

  def close(self, label: str, children: list[Child], top: bool, preterminal: bool,
            at: int | None) -> Child | None:
    """The normalized node for `label` over already-normalized `children` (None: dropped)."""
    options = self.options
    if options.drop_empty and (label == "-NONE-" or not children):
      return None
    if preterminal and not top:
      if options.drop_preterminals:
        return children[0]
      return Tree(self.pos_label(label), tuple(children))
    if top and label in _WRAPPER_LABELS:
      if not options.drop_wrapper:
        return Tree(label, tuple(children))
      if len(children) == 1 and isinstance(children[0], Tree):
        return children[0]
      if all(isinstance(child, str) for child in children):  # words only: keep a root, as X
        self.pending[_WORD_ROOT] += 1
        return Tree(UNKNOWN_LABEL, tuple(children))
    return Tree(self.phrase_label(label, at), tuple(children))


def _normalizer_for(normalize: NormalizeOptions | None) -> _Normalizer | None:
  return None if normalize is None or normalize.is_raw else _Normalizer(normalize)


class _Parser:
  """Reads the trees of one text; line numbers are computed only when a problem needs them."""

  def __init__(self, text: str, source: str, normalizer: _Normalizer | None, lenient: bool):
    self.text = text
    self.source = source
    self.norm = normalizer
    self.lenient = lenient
    self.tokens = tokenize(text)
    self._offsets: list[int] | None = None
    self._newlines: list[int] = []
    self._col0_opens: list[int] | None = None

  # --- locating --------------------------------------------------------------------------------

  def _ensure_offsets(self) -> list[int]:
    if self._offsets is None:
      self._offsets = [m.start() for m in _TOKEN_RE.finditer(self.text)]
      self._newlines = [m.start() for m in re.finditer("\n", self.text)]
    return self._offsets

  def line_of(self, token_index: int | None) -> int | None:
    if token_index is None:
      return None
    offsets = self._ensure_offsets()
    offset = offsets[token_index] if token_index < len(offsets) else len(self.text)
    return bisect.bisect_left(self._newlines, offset) + 1

  def _col0(self) -> list[int]:
    """Token indices of `(` at the start of a line."""
    if self._col0_opens is None:
      text, tokens = self.text, self.tokens
      self._col0_opens = [k for k, o in enumerate(self._ensure_offsets())
                          if tokens[k] == "(" and (o == 0 or text[o - 1] == "\n")]
    return self._col0_opens

  def next_line_start(self, token_index: int) -> int:
    """First `(` in column 0 after `token_index`, or the end."""
    opens = self._col0()
    k = bisect.bisect_right(opens, token_index)
    return opens[k] if k < len(opens) else len(self.tokens)

  def last_line_start(self, token_index: int) -> int | None:
    opens = self._col0()
    k = bisect.bisect_right(opens, token_index)
    return opens[k - 1] if k else None

  def error(self, problem: _Problem) -> TreeError:
    return TreeError(self.source, self.line_of(problem.at), problem.reason, problem.kind)

  # --- parsing ---------------------------------------------------------------------------------

  def run(self, report: ReadReport) -> list[Tree]:
    tokens, n = self.tokens, len(self.tokens)
    norm = self.norm
    kept: list[tuple[int, Tree | None, collections.Counter | None]] = []  # (start, tree, unknowns)
    i = 0
    while i < n:
      tok = tokens[i]
      if tok == "(":
        try:
          tree, end = self.parse_one(i)
        except _Problem as problem:
          if norm is not None:
            norm.pending.clear()
          if not self.lenient:
            raise self.error(problem) from None
          end = self.recover(problem, i, report)
        else:
          kept.append((i, tree, norm.take_pending() if norm is not None else None))
        i = end
      elif tok == ")":
        problem = _Problem(UNBALANCED, "unbalanced brackets: unexpected ')'", i)
        if not self.lenient:
          raise self.error(problem)
        block = self.last_line_start(i)
        if block is None:
          block = kept[-1][0] if kept else i
        taken_back = 0
        while kept and kept[-1][0] >= block:
          kept.pop()
          taken_back += 1
        self.skip(problem, max(1, taken_back), report)
        i = self.next_line_start(i)
      else:
        shown = tok if len(tok) <= 40 else tok[:40] + "…"
        problem = _Problem(STRAY_WORD, f"word outside any tree: {shown!r}", i)
        if not self.lenient:
          raise self.error(problem)
        self.skip(problem, 1, report)
        while i < n and tokens[i] != "(" and tokens[i] != ")":
          i += 1
    trees = []
    for _, tree, unknowns in kept:
      if tree is None:
        report.empty_after_normalization += 1
        continue
      trees.append(tree)
      if unknowns:
        report.add_pending(unknowns)
    report.trees_read += len(trees)
    return trees

  def skip(self, problem: _Problem, count: int, report: ReadReport) -> None:
    report.trees_skipped += count
    report.skipped_by_reason[problem.kind] += count
    report.keep_error(self.error(problem))

  def recover(self, problem: _Problem, start: int, report: ReadReport) -> int:
    """Lenient mode: counts the tree starting at `start` as skipped; returns where to go on."""
    if problem.kind != UNBALANCED:
      depth, i, tokens, n = 0, start, self.tokens, len(self.tokens)
      while i < n:
        tok = tokens[i]
        i += 1
        if tok == "(":
          depth += 1
        elif tok == ")":
          depth -= 1
          if depth == 0:
            self.skip(problem, 1, report)
            return i
      problem = _Problem(UNBALANCED, f"unbalanced brackets: {depth} unclosed '('", start)
    self.skip(problem, 1, report)
    return self.next_line_start(start)

  def parse_one(self, start: int) -> tuple[Tree | None, int]:
    """The tree whose `(` is at token `start` (None if normalized away) and the index after it."""
    tokens, n = self.tokens, len(self.tokens)
    norm = self.norm
    raw = norm is None
    if not raw:
      drop_none = norm.options.drop_empty
      drop_pos = norm.options.drop_preterminals
      pos_label = norm.pos_label
      is_pos = norm.is_pos
      close = norm.close
    stack: list[tuple[str, list[Child], int]] = []
    i = start
    while i < n:
      tok = tokens[i]
      if tok == "(":
        if i + 1 == n:
          break
        label = tokens[i + 1]
        if label == "(":
          stack.append(("", [], i))
          i += 1
          continue
        if label == ")":
          raise _Problem(EMPTY_TREE, "empty tree", i)
        if stack and i + 3 < n and tokens[i + 3] == ")":
          word = tokens[i + 2]
          if word != "(" and word != ")" and (raw or is_pos(label)):  # a preterminal (POS word)
            if raw:
              stack[-1][1].append(Tree(label, (word,)))
            elif drop_none and label == "-NONE-":
              pass
            elif drop_pos:
              stack[-1][1].append(word)
            else:
              stack[-1][1].append(Tree(pos_label(label), (word,)))
            i += 4
            continue
        stack.append((label, [], i))
        i += 2
      elif tok == ")":
        label, children, at = stack.pop()
        if i == at + 2:
          raise _Problem(NO_CHILDREN, f"node {label!r} has no children", at)
        if raw:
          node = Tree(label, tuple(children))
        else:
          preterminal = (i == at + 3 and isinstance(children[0], str) and is_pos(label)
                         if children else False)
          node = close(label, children, not stack, preterminal, at)
        i += 1
        if not stack:
          return node, i
        if node is not None:
          stack[-1][1].append(node)
      else:
        stack[-1][1].append(tok)
        i += 1
    depth = len(stack) + (1 if i < n else 0)
    raise _Problem(UNBALANCED, f"unbalanced brackets: {depth} unclosed '('", start)


@contextlib.contextmanager
def _no_cyclic_gc():
  """Pauses the cyclic garbage collector: parsing makes no cycles, and with many trees alive the
  collector's repeated full scans would double the reading time."""
  was_enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if was_enabled:
      gc.enable()


def _finish(report: ReadReport, own: bool, source: str) -> None:
  if own and report.noteworthy:
    _LOG.warning("%s: %s", source, report.summary())


def parse_trees(text: str, *, source: str = "<string>",
                normalize: NormalizeOptions | None = NormalizeOptions(), lenient: bool = False,
                report: ReadReport | None = None) -> list[Tree]:
  """All bracketed trees of `text`, in order, normalized (SPEC §1) unless `normalize` is None."""
  own = report is None
  report = ReadReport() if own else report
  with _no_cyclic_gc():
    trees = _Parser(text, source, _normalizer_for(normalize), lenient).run(report)
  _finish(report, own, source)
  return trees


def normalize_tree(tree: Tree, options: NormalizeOptions | None = NormalizeOptions(),
                   report: ReadReport | None = None) -> Tree | None:
  """`tree` normalized like the reader does (None when nothing is left); checks labels and words."""
  norm = _normalizer_for(options)
  try:
    # Post-order without recursion: frames of (node, normalized children, next child index).
    _check_label(tree.label)
    frames: list[list] = [[tree, [], 0]]
    while True:
      frame = frames[-1]
      node, out, index = frame
      if index < len(node.children):
        frame[2] = index + 1
        child = node.children[index]
        if isinstance(child, str):
          _check_word(child)
          out.append(child)
        else:
          _check_label(child.label)
          frames.append([child, [], 0])
        continue
      frames.pop()
      if not node.children:
        raise _Problem(NO_CHILDREN, f"node {node.label!r} has no children", None)
      if norm is None:
        result = node
      else:
        preterminal = (len(node.children) == 1 and isinstance(node.children[0], str)
                       and norm.is_pos(node.label))
        result = norm.close(node.label, out, not frames, preterminal, None)
      if not frames:
        break
      if result is not None:
        frames[-1][1].append(result)
  except _Problem as problem:
    raise TreeError("<tree>", None, problem.reason, problem.kind) from None
  if report is not None:
    if result is None:
      report.empty_after_normalization += 1
    elif norm is not None and norm.pending:
      report.add_pending(norm.pending)
  return result


def _check_label(label: str) -> None:
  bad = _BAD_CHAR_RE.search(label)
  if bad:
    what = "a parenthesis" if bad.group() in "()" else "whitespace"
    raise _Problem(BAD_LABEL, f"label contains {what}: {label!r}", None)


def _check_word(word: str) -> None:
  if not word:
    raise _Problem(BAD_WORD, "empty word", None)
  bad = _BAD_CHAR_RE.search(word)
  if bad:
    what = "a parenthesis" if bad.group() in "()" else "whitespace"
    raise _Problem(BAD_WORD, f"word contains {what}: {word!r}", None)


# --- files ---------------------------------------------------------------------------------------


def _missing(path: pathlib.Path) -> FileNotFoundError:
  return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))


def read_file(path: str | os.PathLike, *, normalize: NormalizeOptions | None = NormalizeOptions(),
              lenient: bool = False, report: ReadReport | None = None) -> list[Tree]:
  """The sentence trees of one file (a document), in order. UTF-8; a BOM is ignored."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise _missing(path)
  own = report is None
  report = ReadReport() if own else report
  data = path.read_bytes()
  if data.startswith(codecs.BOM_UTF8):
    data = data[len(codecs.BOM_UTF8):]
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    error = TreeError(str(path), data.count(b"\n", 0, e.start) + 1,
                      f"invalid UTF-8 at byte {e.start}", BAD_ENCODING)
    if not lenient:
      raise error from None
    report.files_skipped += 1
    report.skipped_by_reason[BAD_ENCODING] += 1
    report.keep_error(error)
    _finish(report, own, str(path))
    return []
  with _no_cyclic_gc():
    trees = _Parser(text, str(path), _normalizer_for(normalize), lenient).run(report)
  report.files_read += 1
  _finish(report, own, str(path))
  return trees


def _files(paths: str | os.PathLike | Iterable[str | os.PathLike],
           patterns: Sequence[str]) -> list[pathlib.Path]:
  """The PTB files under `paths` (`inputs.discover`: named files whatever their name, folders'
  `patterns` files recursively; every file once, sorted by path)."""
  return [pathlib.Path(p) for p, _ in inputs.discover(paths, inputs.ptb_files(patterns))]


def read_folder(path: str | os.PathLike, patterns: Sequence[str] = DEFAULT_PATTERNS, *,
                normalize: NormalizeOptions | None = NormalizeOptions(), lenient: bool = False,
                report: ReadReport | None = None) -> list[tuple[str, list[Tree]]]:
  """(file path, its trees) for every matching file under `path`, recursively, sorted by path."""
  folder = pathlib.Path(path)
  if not folder.is_dir():
    raise _missing(folder)
  own = report is None
  report = ReadReport() if own else report
  with _no_cyclic_gc():
    out = [(str(f), read_file(f, normalize=normalize, lenient=lenient, report=report))
           for f in _files([folder], patterns)]
  _finish(report, own, str(folder))
  return out


def read_documents(paths: str | os.PathLike | Iterable[str | os.PathLike], *,
                   sentences: bool = False, patterns: Sequence[str] = DEFAULT_PATTERNS,
                   normalize: NormalizeOptions | None = NormalizeOptions(), lenient: bool = False,
                   report: ReadReport | None = None) -> list[list[Tree]]:
  """Documents from files and folders: one per file, or one per tree with `sentences=True`.

  Files are read whatever their name; folders contribute their `patterns` files (see read_folder);
  every file once, in sorted path order. A file without trees makes no document; it is counted
  as `empty_files`.
  """
  own = report is None
  report = ReadReport() if own else report
  files = _files(paths, patterns)
  documents: list[list[Tree]] = []
  with _no_cyclic_gc():
    for f in files:
      trees = read_file(f, normalize=normalize, lenient=lenient, report=report)
      if not trees:
        report.empty_files += 1
      elif sentences:
        documents.extend([tree] for tree in trees)
      else:
        documents.append(trees)
  _finish(report, own, ", ".join(str(p) for p in files[:3]) + (" …" if len(files) > 3 else ""))
  return documents


# --- writing -------------------------------------------------------------------------------------

_CLOSE = object()


def _validated(node: Tree) -> Tree:
  try:
    _check_label(node.label)
    if not node.children:
      raise _Problem(NO_CHILDREN, f"node {node.label!r} has no children", None)
    if not node.label and isinstance(node.children[0], str):
      raise _Problem(BAD_LABEL, "empty label before a word cannot be written", None)
    for child in node.children:
      if isinstance(child, str):
        _check_word(child)
  except _Problem as problem:
    raise TreeError("<tree>", None, problem.reason, problem.kind) from None
  return node


def format_tree(tree: Tree, *, pretty: bool = False) -> str:
  """`(S Cats (VP chase mice))` on one line, or indented by two spaces per level with `pretty`."""
  if pretty:
    return _format_pretty(tree)
  parts: list[str] = []
  stack: list = [tree]
  while stack:
    item = stack.pop()
    if item is _CLOSE:
      parts[-1] += ")"
    elif isinstance(item, str):
      parts.append(item)
    else:
      _validated(item)
      parts.append("(" + item.label)
      stack.append(_CLOSE)
      stack.extend(reversed(item.children))
  return " ".join(parts)


def _format_pretty(tree: Tree) -> str:
  lines: list[str] = []
  stack: list = [(tree, 0)]
  while stack:
    item, depth = stack.pop()
    if item is _CLOSE:
      lines[-1] += ")"
    elif isinstance(item, str):
      lines.append("  " * depth + item)
    elif all(isinstance(child, str) for child in _validated(item).children):
      lines.append("  " * depth + "(" + " ".join((item.label, *item.children)) + ")")
    else:
      lines.append("  " * depth + "(" + item.label)
      stack.append((_CLOSE, depth))
      stack.extend((child, depth + 1) for child in reversed(item.children))
  return "\n".join(lines)


def format_document(trees: Iterable[Tree], *, pretty: bool = False) -> str:
  """One tree per line (pretty: blank line between trees), ending with a newline."""
  separator = "\n\n" if pretty else "\n"
  text = separator.join(format_tree(tree, pretty=pretty) for tree in trees)
  return text + "\n" if text else ""


def write_trees(path: str | os.PathLike, trees: Iterable[Tree], *, pretty: bool = False) -> None:
  """Writes `trees` to `path` (UTF-8), one per line; `read_file(path, normalize=None)` reads them
  back unchanged."""
  text = format_document(trees, pretty=pretty)
  pathlib.Path(path).write_text(text, encoding="utf-8")
