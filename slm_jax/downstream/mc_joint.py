"""The paper format's joint parse units (SPEC §11): one parse across the context / continuation cut.

qlwpc/TG-Interpolation `olmo/eval/downstream.py` @ cd50d9ef reads pre-parsed lines and cuts them
after parsing; three tasks parse the context and the scored continuation together. Each rule
names its method there and the character offsets of that method in the file at that commit (the
repository could only be read through a text index, which gives offsets, not line numbers):

  WinoGrande  (`WinoGrande.load_local_datasets`, @~197,700–199,200; the shots in
              `WinoGrande.prepare_shots` right after it) — the sentence
              with the GOLD option in the blank is parsed once. Its bracket string is split on
              spaces (one token = a word and the markup glued after it) and scanned character by
              character against `left = sentence.split("_", 1)[0] + gold` (whitespace of `left`
              skipped inside the scan; markup characters take part, as in the code); the token
              during which the scan reaches the end of `left` closes the context, so the closers and openers after
              the option's last word stay in the context. Option k's context swaps the gold
              option's text for option k's inside that last token (`str.replace`: a gold option
              of several words is not found, every option reads the gold context, the scores tie
              and option 1 wins, counted as `multiword_gold`). The continuation (the rest of the
              parse) is the same for every option; WinoGrande scores the raw sum.
  HellaSwag   (`HellaSwag.load_local_datasets` / `get_mask`, @~193,400–194,700) — each
              continuation is one parse of `swag(Ctx_b + " " + ending)`; the code's `get_mask`
              takes the ids of " " + Ctx_b as its tokenizer reads the plain string
              (`tokenizer.encode`, not word by word) and masks, in order, the first continuation
              token equal to each of them (`masked_tokens`: on token ids, so a word the plain
              string splits differently from the parse, " Then," → " Then" "," against the
              parse's " Then" " ,", stops the match there); the divisor counts them all.
  OpenBookQA  (`OpenBookQA.load_local_datasets` @~211,000–212,000; the lines come from
              `datatools/obqa_tree_clean.py` @ 8e909852) — each option's line is one parse of
              `stem + " " + option + "."`, rebuilt on the gold line by the code's graft
              (`downstream.obqa_graft`: the option's node in the last sentence, or across
              sentences when it spans them; lines the code leaves as parsed are counted
              `not_grafted`, lines rebuilt across sentences `multi_tree`); the bracket strings of
              the grafted lines are cut after the last `>` of their common prefix
              (`os.path.commonprefix(c).rfind('>') + 1`): the context is that shared prefix, each
              continuation the rest. The divisor is the continuation's plain characters minus
              one (the code's `cont_str_len_term`; S_full's adds the brackets,
              `paper_query.full_divisor`).

`split(joint, trees_of)` gives one option's unit as sentence trees, the number of its lin1
symbols that belong to the context (`JointSplit.cut`), the text conditioned on but not scored
(masked on the encoder's token ids by `masked_tokens`), and the divisor. The encoder
(`downstream.encoding.TextEncoder.encode(..., joint=)`) linearizes the trees once and assigns
every token to the context part or the continuation by its lin1 unit (HellaSwag's masked tokens
go to the context part). The cuts are taken on the bracket strings before any conversion to a
model's format, as the code takes them on its parsed lines for every grammar type: a terminal
format reads the same parses (`CUT_ON_BRACKETS`: the encoder gives it its tree source) and scores
the same words as a tree format, OpenBookQA's graft included; only its tokens lose the brackets.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import os
from typing import Callable, Sequence

import numpy as np

from slm_jax.downstream.obqa_graft import PTB_BRACKETS, graft
from slm_jax.kinds import PAUSE_CODE
from slm_jax.splitting import default_splitter
from slm_jax.trees import Tree

RULES = ("winogrande", "hellaswag", "openbookqa")
CUT_ON_BRACKETS = ("winogrande", "openbookqa")  # rules whose cut reads the parse's brackets


@dataclasses.dataclass(frozen=True)
class Joint:
  """One option's joint parse unit (a `prompts.Prompt.joint`): the prompt's last two components
  (context part, continuation) come from one parse instead of two."""

  rule: str  # one of RULES
  texts: tuple[str, ...]  # what is parsed: WG (gold-filled,), HS (unit,), OBQA every option's line
  option: int
  gold: int = 0
  left: str = ""  # WG: the sentence before the blank + the gold option (the code's left_text)
  gold_text: str = ""  # WG: the gold option's text
  fill: str = ""  # WG: this option's text
  masked: str = ""  # HS: " " + Ctx_b, the words conditioned on but not scored
  options: tuple[str, ...] = ()  # OBQA: the option texts matched in their lines


@dataclasses.dataclass(frozen=True)
class JointSplit:
  """One option's unit: its sentence trees, the lin1 symbols of the context part, the text
  not scored (`masked_tokens` finds its tokens), the divisor, and what was counted
  (`multiword_gold`, `not_grafted`, `multi_tree`, `bare_word`)."""

  trees: tuple[Tree, ...]
  cut: int
  masked: str = ""  # HellaSwag: " " + Ctx_b, conditioned on but not scored
  divisor: int = 0
  events: tuple[str, ...] = ()


# --- trees as the paper code's bracket strings ------------------------------------------------------

def raw_words(text: str) -> list[str]:
  """The unit's words as written (the splitter's raw words, one per tree leaf)."""
  return [w for s in default_splitter().split(text) for w in s.words]


def tg_symbols(trees: Sequence[Tree], words: Sequence[str]) -> tuple[list[str], list[int]]:
  """The lin1 symbols of `trees` in the code's bracket notation (`convert_TG_format`: `<(L>`,
  `<L)>`, a word as " " + word) and the symbol index of every word; `words` = the leaves as
  written (PTB escapes undone)."""
  out, at = [], []
  for tree in trees:
    stack: list = [tree]
    while stack:
      node = stack.pop()
      if isinstance(node, str):
        at.append(len(out))
        out.append(" " + words[len(at) - 1])
      elif isinstance(node, tuple):
        out.append(f"<{node[0]})>")
      else:
        out.append(f"<({node.label}>")
        stack.append((node.label,))
        stack.extend(reversed(node.children))
  if len(at) != len(words):
    raise ValueError(f"{len(at)} leaves for {len(words)} words")
  return out, at


def _leaves(trees: Sequence[Tree]) -> list[str]:
  return [w for t in trees for w in t.leaves()]


# --- WinoGrande -------------------------------------------------------------------------------------

def answer_word(symbols: Sequence[str], left: str) -> int:
  """The index of the word whose bracket token ends the code's character scan of `left`
  (`symbols`: `tg_symbols`)."""
  tokens = [""]  # the line split on spaces: leading markup, then each word + the markup after it
  for symbol in symbols:
    if symbol.startswith(" "):
      tokens.append(symbol[1:])
    else:
      tokens[-1] += symbol
  j = 0
  for word, token in enumerate(tokens, -1):
    for char in token:
      while j < len(left) and left[j].isspace():
        j += 1
      if j < len(left) and char == left[j]:
        j += 1
    if j == len(left):
      return word
  raise ValueError(f"the parse does not contain {left!r}")


def _winogrande(joint: Joint, trees: list[Tree]) -> JointSplit:
  words = raw_words(joint.texts[0])
  symbols, word_at = tg_symbols(trees, words)
  a = answer_word(symbols, joint.left)
  if not 0 <= a < len(words) - 1:
    raise ValueError(f"nothing follows the option in {joint.texts[0]!r}")
  events = ()
  if joint.gold_text in words[a]:
    new = words[a].replace(joint.gold_text, joint.fill).split()
  else:  # the code's replace finds nothing: the gold context for every option
    new, events = [words[a]], ("multiword_gold",)
  escaped = [w for s in default_splitter().split(" ".join(new)) for w in s.escaped]
  trees = _replace_leaf(trees, a, escaped if len(escaped) == len(new) else new)
  return JointSplit(tuple(trees), word_at[a + 1] + len(new) - 1, events=events)


def _replace_leaf(trees: list[Tree], index: int, words: Sequence[str]) -> list[Tree]:
  """`trees` with leaf `index` replaced by `words` (under the same parent)."""
  count = 0

  def walk(node: Tree) -> Tree:
    nonlocal count
    children = []
    for child in node.children:
      if isinstance(child, str):
        children += list(words) if count == index else [child]
        count += 1
      else:
        children.append(walk(child))
    return Tree(node.label, tuple(children))

  return [walk(t) for t in trees]


# --- HellaSwag --------------------------------------------------------------------------------------

def masked_tokens(tokens_T: np.ndarray, kinds_T: np.ndarray, wanted: Sequence[int]
                  ) -> np.ndarray:
  """bool [T]: the code's `get_mask` — for each id of `wanted` in order, the first token after
  the previous match with that id (a pause token follows its token's mask, as the code pauses
  the mask with the ids); an id not found ends the matching."""
  real_T = kinds_T != PAUSE_CODE
  real = np.flatnonzero(real_T)
  ids = np.asarray(tokens_T)[real]
  hit = np.zeros(len(ids), bool)
  at = 0
  for token in wanted:  # a few ids (the Ctx_b words), each found by one vectorized search
    found = np.flatnonzero(ids[at:] == token)
    if not len(found):
      break
    hit[at + found[0]] = True
    at += int(found[0]) + 1
  last_real_T = np.maximum.accumulate(np.where(real_T, np.arange(len(real_T)), -1))
  mask_T = np.zeros(len(real_T), bool)
  mask_T[real] = hit
  return mask_T[np.maximum(last_real_T, 0)] & (last_real_T >= 0)


def _hellaswag(joint: Joint, trees: list[Tree]) -> JointSplit:
  return JointSplit(tuple(trees), 0, masked=joint.masked)


# --- OpenBookQA ---------------------------------------------------------------------------------

def _openbookqa(joint: Joint, trees_of: Callable[[str], list[Tree]]) -> JointSplit:
  k = joint.option
  lines = [list(trees_of(text)) for text in joint.texts]
  grafted, events = graft(lines, joint.options, joint.gold)
  strings = []
  for line in grafted:
    words = [PTB_BRACKETS.get(w, w) for w in _leaves(line)]
    strings.append(tg_symbols(line, words))
  texts = ["".join(symbols) for symbols, _ in strings]
  cut_char = os.path.commonprefix(texts).rfind(">") + 1
  symbols, word_at = strings[k]
  ends = list(itertools.accumulate(len(x) for x in symbols))
  cut = bisect.bisect_left(ends, cut_char) + 1 if cut_char else 0  # symbols ending by the cut
  after = [symbols[i][1:] for i in word_at if i >= cut]
  return JointSplit(tuple(grafted[k]), cut, divisor=_chars(after), events=events[k])


def _chars(words: Sequence[str]) -> int:
  """The code's divisor: the plain continuation " w1 w2 …" without its leading space."""
  return max(len("".join(" " + w for w in words)) - 1, 0)


def split(joint: Joint, trees_of: Callable[[str], list[Tree]]) -> JointSplit:
  """One option's joint unit (module docstring); `trees_of(text)` gives a text's sentence
  trees (the parses of every format: the cuts read their brackets)."""
  if joint.rule == "winogrande":
    return _winogrande(joint, list(trees_of(joint.texts[0])))
  if joint.rule == "hellaswag":
    return _hellaswag(joint, list(trees_of(joint.texts[0])))
  if joint.rule == "openbookqa":
    return _openbookqa(joint, trees_of)
  raise ValueError(f"unknown joint rule {joint.rule!r}; expected one of {', '.join(RULES)}")


__all__ = ["CUT_ON_BRACKETS", "Joint", "JointSplit", "RULES", "answer_word", "masked_tokens",
           "raw_words", "split", "tg_symbols"]
