"""Text components → one token sequence in a model's format (SPEC §11: every text is parsed).

A prompt is a list of text *components* (a demonstration, the target's question, an instruction
such as "Answer:", an option). `TextEncoder.encode(components)` splits every component into
sentences of PTB-escaped words (`slm_jax.splitting`: pysbd per line, NLTK Treebank words),
gives each sentence a tree from a tree source, and linearizes the whole prompt as one document
`<s> sentence… [</s>]` exactly as `data.encode.encode_document` does for training. The scheme is
the configuration's `scored_as` (the scheme table): tree models (lin1, lin2, lin3, noont, merge)
read their own linearization; terminal models lin0; pause models lin0 with the pause tokens
inserted; Tree-Shuffle is scored in lin0 (SPEC §9), so terminal-format configurations never parse.

`Encoded.component_T` (int32 [T]) is the index of the component each token belongs to (−1 for BOS
and EOS). The paper format's joint parse units (`encode(..., joint=)`, `downstream.mc_joint`) read
the prompt's last two components from one parse: each token of the unit goes to the context part
or the continuation by its lin1 unit, so the two parts need not be contiguous (HellaSwag's
unscored Ctx_b tokens, found on token ids as the paper code finds them, sit inside the
continuation's brackets). Their cuts read the parse's brackets in every format, so a terminal
format's encoder parses the units of `mc_joint.CUT_ON_BRACKETS` with the tree source it is given
(and refuses to encode one without). A component whose text holds no word (empty or whitespace
only) is an error: prompts never build one, and silently dropping it would shift every later
component index.

`TextEncoder(..., paper=True)` writes the paper code's query (`downstream.paper_query`): no BOS,
and the tree family's closings as its double conversion leaves them.

Component encodings are cached by text (the shared demonstrations of a task are tokenized once)
and concatenated with offsets; the result equals `encode_document` of all the sentences' trees
(tokens, kinds, sentence and unit arrays), because every scheme the encoder uses derives tokens
locally within a sentence.

Tree sources (`make_tree_source(spec)`):
  "parser" / "parser:DIR"  Viterbi 1-best of slm_jax's own parser (`parser.api`; DIR a saved parser,
                           default the shipped GUM model), batched in `prefetch`, cached per
                           sentence; sentences it cannot take (longer than its limit) get the flat
                           tree and are counted in `stats["fallback"]`
  "flat"                   `(S w1 … wn)` for every sentence
  "file:PATH"              the first tree of a proposals file (`eval.proposals.FileProposals`,
                           JSONL or PTB blocks); sentences missing from the file fall back to flat
                           (counted)
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Iterable, Sequence as SequenceT

import numpy as np

from slm_jax.configurations import Configuration
from slm_jax.data.encode import encode_document
from slm_jax.downstream import mc_joint, paper_query
from slm_jax.eval.proposals import FileProposals, NoProposals
from slm_jax.kinds import BOS_CODE, EOS_CODE, PAUSE_CODE, TERMINAL_CODE
from slm_jax.linearize import Sequence, get_scheme
from slm_jax.splitting import default_splitter
from slm_jax.tokenizer import Tokenizer
from slm_jax.trees import Tree

Words = tuple[str, ...]
FLAT_LABEL = "S"
COMPONENT_CACHE_LIMIT = 1 << 16  # encoded components kept before the cache restarts


@functools.lru_cache(maxsize=1 << 16)
def split_words(text: str) -> tuple[Words, ...]:
  """The sentences of `text` as PTB-escaped words (empty for text without words)."""
  return tuple(tuple(s.escaped) for s in default_splitter().split(text))


# --- tree sources ---------------------------------------------------------------------------------

class TreeSource:
  """Text → one tree per sentence. Subclasses give `_tree(words)`; `stats` counts sentences."""

  name = "tree source"

  def __init__(self):
    self.stats: collections.Counter = collections.Counter()

  def trees(self, text: str) -> list[Tree]:
    return [self._tree(words) for words in split_words(text)]

  def prefetch(self, texts: Iterable[str]) -> None:
    """A hint: these texts come next (a batched source parses their sentences together)."""
    del texts

  def _tree(self, words: Words) -> Tree:
    raise NotImplementedError

  def _flat(self, words: Words, reason: str) -> Tree:
    self.stats[reason] += 1
    return Tree(FLAT_LABEL, words)


class FlatTrees(TreeSource):
  """`(S w1 … wn)` for every sentence."""

  name = "flat"

  def _tree(self, words: Words) -> Tree:
    return self._flat(words, "flat")


class ParserTrees(TreeSource):
  """The Viterbi tree of slm_jax's parser per sentence (batched, cached; flat beyond its limit)."""

  def __init__(self, path: str | None = None, batch_words: int = 2048):
    super().__init__()
    from slm_jax.parser.api import load_parser  # pylint: disable=g-import-not-at-top
    self.parser = load_parser(path, batch_words=batch_words)
    self.name = "parser" if path is None else f"parser:{path}"
    self._cache: dict[Words, Tree] = {}

  def _usable(self, words: Words) -> bool:
    return 0 < len(words) <= self.parser.max_words

  def prefetch(self, texts: Iterable[str]) -> None:
    todo = dict.fromkeys(w for text in texts for w in split_words(text))
    todo = [w for w in todo if w not in self._cache and self._usable(w)]
    if todo:
      self._cache.update(zip(todo, self.parser.parse([list(w) for w in todo])))
      self.stats["parsed"] += len(todo)

  def _tree(self, words: Words) -> Tree:
    if not self._usable(words):
      return self._flat(words, "fallback")
    if words not in self._cache:  # not prefetched: parse it alone
      self._cache[words] = self.parser.parse([list(words)])[0]
      self.stats["parsed"] += 1
    self.stats["sentences"] += 1
    return self._cache[words]


class FileTrees(TreeSource):
  """The first tree of each sentence in a proposals file (flat where the file has none)."""

  def __init__(self, path: str):
    super().__init__()
    self.proposals = FileProposals(path)
    self.name = f"file:{path}"

  def _tree(self, words: Words) -> Tree:
    try:
      tree = self.proposals.proposals(words)[0]
    except NoProposals:
      return self._flat(words, "fallback")
    self.stats["sentences"] += 1
    return tree


def make_tree_source(spec: str = "parser") -> TreeSource:
  """"parser", "parser:DIR", "flat" or "file:PATH" (see the module docstring)."""
  kind, _, argument = spec.partition(":")
  if kind == "parser":
    return ParserTrees(argument or None)
  if kind == "flat" and not argument:
    return FlatTrees()
  if kind == "file" and argument:
    return FileTrees(argument)
  raise ValueError(f"unknown tree source {spec!r}; expected parser, parser:DIR, flat or file:PATH")


# --- encoding -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Encoded:
  """A prompt as ids (`sequence`: BOS first unless the paper format's, EOS last only if asked) and
  each token's component."""

  sequence: Sequence
  component_T: np.ndarray  # int32 [T]: component index, −1 for BOS / EOS
  divisor: int = 0  # a joint unit's continuation divisor (`mc_joint`); 0: the prompt's own

  def __len__(self) -> int:
    return len(self.sequence)


@dataclasses.dataclass(frozen=True)
class _Piece:
  """One component encoded on its own, BOS/EOS stripped; sentence and unit counted from 0."""

  sequence: Sequence
  sentences: int
  units: int  # lin1 base symbols of the component (its unit range)


class TextEncoder:
  """Components → `Encoded` for one model's tokenizer and configuration (module docstring)."""

  def __init__(self, tokenizer: Tokenizer, configuration: Configuration,
               tree_source: TreeSource | None = None, *, paper: bool = False):
    self.tokenizer = tokenizer
    self.configuration = configuration
    self.scheme = configuration.scheme.scored_as
    self.with_trees = get_scheme(self.scheme).has_brackets
    if self.with_trees and tree_source is None:
      raise ValueError(f"{configuration.name} reads trees ({self.scheme}): give a tree source "
                       "(make_tree_source('parser' | 'flat' | 'file:PATH'))")
    self.tree_source = tree_source if self.with_trees else None
    self.joint_source = tree_source  # the joint units' parses, in every format (mc_joint)
    self.paper = paper  # the paper code's query: no BOS, its closings (paper_query)
    self._pieces: dict = {}  # text -> _Piece; mc_joint.Joint -> (piece, parts, divisor, events)
    self.joint_stats: collections.Counter = collections.Counter()  # mc_joint events

  def summary_counters(self, joint_format: bool) -> dict:
    """What a task's summary reports of this encoding: the joint parse units' events (`paper`
    format, whose prompts carry them)."""
    return {"joint_units": dict(self.joint_stats)} if joint_format else {}

  def prefetch(self, texts: Iterable[str]) -> None:
    """Parses the sentences of `texts` in batched calls (tree models; a no-op otherwise)."""
    if self.tree_source is not None:
      self.tree_source.prefetch(t for t in texts if t not in self._pieces)

  def prefetch_prompts(self, prompts: Iterable) -> None:
    """Parses what encoding `prompts` will parse, in batched calls: every text of a tree model,
    a terminal format's joint units cut on brackets."""
    if self.with_trees:
      self.prefetch(t for p in prompts for t in p.parse_texts)
    elif self.joint_source is not None:
      self.joint_source.prefetch(t for p in prompts if p.joint is not None
                                 and p.joint.rule in mc_joint.CUT_ON_BRACKETS
                                 for t in p.joint.texts)

  def component_trees(self, text: str) -> list[Tree]:
    """The trees of one component's sentences (flat `X` trees for terminal formats)."""
    if self.tree_source is None:
      return [Tree("X", words) for words in split_words(text)]  # X never reaches lin0 / pause
    return self.tree_source.trees(text)

  def _joint_trees(self, joint: "mc_joint.Joint"):
    """`joint`'s tree reader: the tree source in every format where its cut reads brackets."""
    if self.with_trees or joint.rule not in mc_joint.CUT_ON_BRACKETS:
      return self.component_trees
    if self.joint_source is None:
      raise ValueError(f"the paper format's {joint.rule} units are cut on their parses in every "
                       f"format: give the {self.configuration.name} encoder a tree source "
                       "(--tree_source)")
    return self.joint_source.trees

  def _piece(self, text: str, index: int) -> _Piece:
    piece = self._pieces.get(text)
    if piece is None:
      trees = self.component_trees(text)
      if not trees:
        raise ValueError(f"component {index} has no words: {text!r}")
      whole = encode_document(trees, self.tokenizer, self.scheme)
      inner = whole.take(np.arange(1, len(whole) - 1))
      units = int(whole.unit[-1]) - 1  # EOS follows the component's last base symbol
      inner = dataclasses.replace(inner, unit=inner.unit - 1)
      piece = _Piece(inner, len(trees), units)
      if len(self._pieces) >= COMPONENT_CACHE_LIMIT:
        self._pieces.clear()
      self._pieces[text] = piece
    return piece

  def _joint_piece(self, joint: "mc_joint.Joint") -> tuple[_Piece, np.ndarray, int]:
    """The paper format's joint unit (`downstream.mc_joint`) as one piece, which part (0: the
    context part or an unscored token, 1: the continuation) each token belongs to by its lin1
    unit (HellaSwag: its Ctx_b tokens by `mc_joint.masked_tokens` on the ids), and the
    continuation's divisor. Cached per unit; its events (`multiword_gold`, `not_grafted`,
    `multi_tree`, `bare_word`; OpenBookQA's `grafted` lines; HellaSwag's `head_masked` — every
    token of " " + Ctx_b found on its id —, `head_unmasked` — the code's matching stopped short
    —, `no_head`) are counted in `joint_stats` once per option unit parsed."""
    cached = self._pieces.get(joint)
    if cached is None:
      found = mc_joint.split(joint, self._joint_trees(joint))
      whole = encode_document(list(found.trees), self.tokenizer, self.scheme)
      inner = whole.take(np.arange(1, len(whole) - 1))
      unit_T = inner.unit - 1  # the lin1 symbol of every token within the unit
      part_T = unit_T >= found.cut
      events = list(found.events)
      if joint.rule == "openbookqa" and "not_grafted" not in events:
        events.append("grafted")
      if found.masked:  # HellaSwag's Ctx_b: matched on token ids as the paper code does
        wanted = self.tokenizer.encode_text(found.masked)
        masked_T = mc_joint.masked_tokens(inner.tokens, inner.kinds, wanted)
        part_T &= ~masked_T
        hits = int((masked_T & (inner.kinds != PAUSE_CODE)).sum())
        events.append("head_masked" if hits == len(wanted) else "head_unmasked")
      elif joint.rule == "hellaswag":
        events.append("no_head")
      piece = _Piece(dataclasses.replace(inner, unit=unit_T), len(found.trees),
                     int(whole.unit[-1]) - 1)
      cached = (piece, part_T.astype(np.int32), found.divisor)
      self.joint_stats.update(events)
      if len(self._pieces) >= COMPONENT_CACHE_LIMIT:
        self._pieces.clear()
      self._pieces[joint] = cached
    return cached

  def encode(self, components: SequenceT[str], *, eos: bool = False,
             joint: "mc_joint.Joint | None" = None) -> Encoded:
    """The prompt `components` as one document (see the module docstring). With `joint`, the
    last two components are read from that one parse unit (`downstream.mc_joint`; the
    component texts name them, the unit's trees give their tokens) and `Encoded.divisor` is the
    unit's continuation divisor (0 when the format's own applies). A `paper` encoder writes no
    BOS and the code's closings (`paper_query.code_closings`)."""
    if isinstance(components, str):
      raise TypeError("encode takes a list of components, not one string")
    if not components:
      raise ValueError("encode needs at least one component")
    own = len(components) - (2 if joint is not None else 0)
    if own < 0:
      raise ValueError("a joint unit needs its two components (context part, continuation)")
    parts = [(p, np.full(len(p.sequence), c, np.int32))
             for c, p in enumerate(self._piece(text, c) for c, text in enumerate(components[:own]))]
    divisor = 0
    if joint is not None:
      piece, part_T, divisor = self._joint_piece(joint)
      parts.append((piece, part_T + own))
    pieces = [p for p, _ in parts]
    sentences = np.cumsum([0] + [p.sentences for p in pieces])
    units = np.cumsum([1] + [p.units for p in pieces])  # BOS is unit 0
    tokenizer = self.tokenizer
    bos = 0 if self.paper else 1
    ids = [np.asarray([tokenizer.bos_id] * bos, np.int32)] + [p.sequence.tokens for p in pieces]
    kinds = [np.asarray([BOS_CODE] * bos, np.int8)] + [p.sequence.kinds for p in pieces]
    sentence = [np.zeros(bos, np.int32)] + [p.sequence.sentence + s
                                            for p, s in zip(pieces, sentences[:-1])]
    unit = [np.zeros(bos, np.int32)] + [p.sequence.unit + u for p, u in zip(pieces, units[:-1])]
    component = [np.full(bos, -1, np.int32)] + [c for _, c in parts]
    if eos:
      ids.append(np.asarray([tokenizer.eos_id], np.int32))
      kinds.append(np.asarray([EOS_CODE], np.int8))
      sentence.append(np.asarray([sentences[-1] - 1], np.int32))
      unit.append(np.asarray([units[-1]], np.int32))
      component.append(np.full(1, -1, np.int32))
    sequence = Sequence(np.concatenate(ids).astype(np.int32), np.concatenate(kinds),
                        np.concatenate(sentence).astype(np.int32),
                        np.concatenate(unit).astype(np.int32))
    component_T = np.concatenate(component)
    if self.paper:
      sequence, component_T = paper_query.code_closings(sequence, component_T, self.scheme)
    return Encoded(sequence, component_T, divisor)

  def render(self, encoded: Encoded, *, names: SequenceT[str] | None = None) -> str:
    """The encoded prompt as text: one line per component, symbols separated by spaces (word
    pieces joined into their word), each line headed by the component's name or index; BOS
    leads the first line's block and EOS, when present, closes it."""
    sequence = encoded.sequence
    terminal = sequence.kinds == TERMINAL_CODE
    start_T = ~terminal | (np.diff(sequence.unit, prepend=-1) != 0)  # a word = its pieces
    start_T[1:] |= ~terminal[:-1]
    symbols = np.asarray(self.tokenizer.decode(sequence.tokens, word_index=np.cumsum(start_T)),
                         dtype=object)
    owner = encoded.component_T[start_T]
    lines = [] if owner[0] != -1 else [str(symbols[0])]
    for c in range(int(encoded.component_T.max()) + 1):
      label = names[c] if names is not None else str(c)
      lines.append(f"[{label}] " + " ".join(symbols[owner == c].tolist()))
    if len(owner) > 1 and owner[-1] == -1:
      lines.append(str(symbols[-1]))
    return "\n".join(lines)
