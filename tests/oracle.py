"""A deliberately simple test oracle for linearization, TG metadata, masks and targets (SPEC §2–§5).

Everything here is written as plain recursive traversals and token-by-token stack simulations that
follow the SPEC literally. It is slow on purpose and shares no code with the vectorized
implementation, which the tests compare against it.

API (all per ONE document / segment unless said otherwise):
  loop_linearize(document, scheme)            -> (symbols, kinds)   BOS s1 s2 ... EOS
  stack_walk_metadata(kinds)                  -> (depth, pop)       pop uses T = len(kinds) as infinity
  stack_walk_mask(kinds, attention)           -> T x T bool list (a list of two for a mix)
  stack_walk_attends(kinds, attention)        -> per query, the sorted keys it attends (one mask)
  packed_row_mask(documents_kinds, pad_to, attention) -> row mask (list of two for a mix)
  packed_row_metadata(documents_kinds, pad_to, attention) -> dict of per-token row metadata
  loop_targets(kinds, attention, scheme)      -> per-token bool: is it a training target
  parse_attention(attention)                  -> ("single", name) or ("mix", A, B)
  CONFIGS                                     -> the §5 configurations: name -> (scheme, attention)

Attention spellings accepted: "causal", "tg", "tg_nomask", "tg_nomask_aug", "mix(A,B)",
"mix_A_B" (e.g. "mix_tg_nomask_tg"), a tuple ("mix", A, B), and the configuration names
"tgnomask_mix_tg" / "tgtree_mix_tg".
"""

from __future__ import annotations

import sys

from slm_jax.kinds import (
    BOS_SYMBOL,
    EOS_SYMBOL,
    MERGED_CLOSE_SYMBOL,
    PAUSE_SYMBOL,
    Kind,
    cnt_symbol,
    ont_symbol,
)
from slm_jax.trees import Tree

SCHEMES = ("lin0", "lin1", "lin2", "lin3", "lin1_noont", "lin1_merge", "pause1", "pause2")
SINGLE_ATTENTIONS = ("causal", "tg", "tg_nomask", "tg_nomask_aug")
TG_FAMILY = ("tg", "tg_nomask", "tg_nomask_aug")

# SPEC §5: name -> (linearization, attention)
CONFIGS = {
    "terminal": ("lin0", "causal"),
    "tree": ("lin1", "causal"),
    "tgtree": ("lin2", "causal"),
    "tg": ("lin2", "tg"),
    "tgnomask": ("lin2", "tg_nomask"),
    "tgnomask_aug": ("lin2", "tg_nomask_aug"),
    "tree_noont": ("lin1_noont", "causal"),
    "tree_compress": ("lin1_merge", "causal"),
    "tree_triplecnt": ("lin3", "causal"),
    "tree_shuffle": ("lin1_shuf", "causal"),
    "tgnomask_mix_tg": ("lin2", ("mix", "tg_nomask", "tg")),
    "tgtree_mix_tg": ("lin2", ("mix", "causal", "tg")),
    "pause1": ("pause1", "causal"),
    "pause2": ("pause2", "causal"),
    "pushdown": ("lin1", "causal"),  # SPEC §14: its batches are lin1 rows (the model compacts)
}


# ----------------------------------------------------------------------------------------------
# 1. Linearization (SPEC §2)
# ----------------------------------------------------------------------------------------------

def _emit(node, scheme, symbols, kinds):
  """Appends the linearization of one node (a Tree or a word) by recursion."""
  if isinstance(node, str):
    symbols.append(node)
    kinds.append(Kind.TERMINAL)
    if scheme == "pause1":
      symbols.append(PAUSE_SYMBOL)
      kinds.append(Kind.PAUSE)
    if scheme == "pause2":
      symbols.append(PAUSE_SYMBOL)
      kinds.append(Kind.PAUSE)
      symbols.append(PAUSE_SYMBOL)
      kinds.append(Kind.PAUSE)
    return

  if scheme in ("lin1", "lin2", "lin3", "lin1_merge"):
    symbols.append(ont_symbol(node.label))
    kinds.append(Kind.ONT)

  for child in node.children:
    _emit(child, scheme, symbols, kinds)

  closing = cnt_symbol(node.label)
  if scheme in ("lin1", "lin1_noont", "lin1_merge"):
    symbols.append(closing)
    kinds.append(Kind.CNT)
  elif scheme == "lin2":
    symbols.append(closing)
    kinds.append(Kind.CNT1)
    symbols.append(closing)
    kinds.append(Kind.CNT2)
  elif scheme == "lin3":
    symbols.append(closing)
    kinds.append(Kind.CNT)
    symbols.append(closing)
    kinds.append(Kind.CNT2)
    symbols.append(closing)
    kinds.append(Kind.CNT2)


def _merge_closings(symbols, kinds):
  """lin1_merge: every maximal run of consecutive closings becomes one ")" of kind CNT."""
  out_symbols = []
  out_kinds = []
  for symbol, kind in zip(symbols, kinds):
    if kind == Kind.CNT:
      if out_kinds and out_kinds[-1] == Kind.CNT:
        continue  # still inside the same run: already represented by its ")"
      out_symbols.append(MERGED_CLOSE_SYMBOL)
      out_kinds.append(Kind.CNT)
    else:
      out_symbols.append(symbol)
      out_kinds.append(kind)
  return out_symbols, out_kinds


def linearize_sentence(tree: Tree, scheme: str) -> tuple[list[str], list[Kind]]:
  """One sentence without BOS/EOS."""
  if scheme == "lin1_shuf":
    raise ValueError("lin1_shuf is random; the oracle does not implement it")
  if scheme not in SCHEMES:
    raise ValueError(f"unknown scheme {scheme!r}")
  symbols: list[str] = []
  kinds: list[Kind] = []
  _emit(tree, scheme, symbols, kinds)
  if scheme == "lin1_merge":
    symbols, kinds = _merge_closings(symbols, kinds)
  return symbols, kinds


def loop_linearize(document, scheme: str) -> tuple[list[str], list[Kind]]:
  """`BOS s1 s2 ... EOS` in the given scheme."""
  symbols = [BOS_SYMBOL]
  kinds = [Kind.BOS]
  for tree in document:
    sentence_symbols, sentence_kinds = linearize_sentence(tree, scheme)
    symbols.extend(sentence_symbols)
    kinds.extend(sentence_kinds)
  symbols.append(EOS_SYMBOL)
  kinds.append(Kind.EOS)
  return symbols, kinds


# ----------------------------------------------------------------------------------------------
# 2. Metadata by a literal TG stack machine (SPEC §3)
# ----------------------------------------------------------------------------------------------

def _check_segment(kinds):
  for kind in kinds:
    if Kind(kind) == Kind.PAD:
      raise ValueError("a segment must not contain PAD tokens")


def stack_walk_metadata(kinds) -> tuple[list[int], list[int]]:
  """(depth, pop) for one segment.

  The machine: ONT pushes itself and opens a constituent; TERMINAL/PAUSE/BOS/EOS push themselves;
  a closing (CNT or CNT1) pops everything back to and including its constituent's ONT (pop = the
  closing's index for each), then pushes itself; a closing with nothing open pops nothing (depth 0)
  and pushes itself; CNT2 pushes nothing (pop = own index + 1). Never popped: pop = T.
  BOS/EOS always get depth 0. A CNT2 copies the depth of the closing it repeats (the most recent
  CNT/CNT1; 0 if there is none).

  Note: with pop[CNT2] = i + 1, SPEC §3's compose rule `pop[j] == i` would wrongly select a CNT2
  that directly precedes a CNT1 (`VP) VP) S)`); TG never pushes CNT2, so compose must not see it.
  stack_walk_mask does not use pop and gets this right.
  """
  _check_segment(kinds)
  kinds = [Kind(k) for k in kinds]
  T = len(kinds)
  depth = [0] * T
  pop = [T] * T
  stack: list[int] = []  # token indices
  open_onts: list[int] = []  # token index of each open constituent's ONT, innermost last
  last_closing_depth = 0  # depth of the most recent CNT/CNT1: what a following CNT2 copies

  for i in range(T):
    kind = kinds[i]
    if kind == Kind.ONT:
      depth[i] = len(open_onts)
      stack.append(i)
      open_onts.append(i)
    elif kind in (Kind.CNT, Kind.CNT1):
      if open_onts:
        ont = open_onts.pop()
        depth[i] = depth[ont]
        while True:
          j = stack.pop()
          pop[j] = i
          if j == ont:
            break
      else:
        depth[i] = 0
      last_closing_depth = depth[i]
      stack.append(i)
    elif kind == Kind.CNT2:
      depth[i] = last_closing_depth
      pop[i] = i + 1
    elif kind in (Kind.BOS, Kind.EOS):
      depth[i] = 0  # root level, whatever is (wrongly) still open
      stack.append(i)
    else:  # TERMINAL, PAUSE
      depth[i] = len(open_onts)
      stack.append(i)
  return depth, pop


# ----------------------------------------------------------------------------------------------
# 3. Masks by simulating the stack directly (not from pop)
# ----------------------------------------------------------------------------------------------

def parse_attention(attention):
  """("single", name) or ("mix", A, B)."""
  if isinstance(attention, tuple):
    if len(attention) == 3 and attention[0] == "mix":
      a, b = attention[1], attention[2]
      if a in SINGLE_ATTENTIONS and b in SINGLE_ATTENTIONS:
        return ("mix", a, b)
    raise ValueError(f"bad attention {attention!r}")
  name = attention.strip()
  if name in SINGLE_ATTENTIONS:
    return ("single", name)
  if name == "tgnomask_mix_tg":
    return ("mix", "tg_nomask", "tg")
  if name == "tgtree_mix_tg":
    return ("mix", "causal", "tg")
  if name.startswith("mix(") and name.endswith(")"):
    parts = name[4:-1].split(",")
    if len(parts) == 2:
      a = parts[0].strip()
      b = parts[1].strip()
      if a in SINGLE_ATTENTIONS and b in SINGLE_ATTENTIONS:
        return ("mix", a, b)
  if name.startswith("mix_"):
    rest = name[4:]
    found = []
    for a in SINGLE_ATTENTIONS:
      for b in SINGLE_ATTENTIONS:
        if rest == a + "_" + b:
          found.append((a, b))
    if len(found) == 1:
      return ("mix", found[0][0], found[0][1])
  raise ValueError(f"unknown attention {attention!r}")


def has_tg(attention) -> bool:
  """True for tg, tg_nomask, tg_nomask_aug and any hybrid containing one of them."""
  parsed = parse_attention(attention)
  if parsed[0] == "single":
    return parsed[1] in TG_FAMILY
  return parsed[1] in TG_FAMILY or parsed[2] in TG_FAMILY


def stack_walk_attends(kinds, attention: str) -> list[list[int]]:
  """For each query i, the sorted list of keys j it attends, for a single (non-mix) attention."""
  _check_segment(kinds)
  if attention not in SINGLE_ATTENTIONS:
    raise ValueError(f"stack_walk_attends takes one of {SINGLE_ATTENTIONS}, got {attention!r}")
  kinds = [Kind(k) for k in kinds]
  T = len(kinds)
  attends: list[list[int]] = []

  if attention == "causal":
    for i in range(T):
      attends.append(list(range(i + 1)))
    return attends

  stack: list[int] = []
  open_onts: list[int] = []
  for i in range(T):
    kind = kinds[i]
    compose = kind == Kind.CNT1
    popped: list[int] = []

    # Advance the machine by token i.
    if kind == Kind.ONT:
      stack.append(i)
      open_onts.append(i)
    elif kind in (Kind.CNT, Kind.CNT1):
      if open_onts:
        ont = open_onts.pop()
        while True:
          j = stack.pop()
          popped.append(j)
          if j == ont:
            break
      stack.append(i)
    elif kind == Kind.CNT2:
      pass  # never pushed
    else:
      stack.append(i)

    # What query i sees.
    if compose:
      visible = set(popped)
      visible.add(i)
    elif attention == "tg":
      visible = set(stack)
      visible.add(i)  # a CNT2 is not on the stack but sees itself
    elif attention == "tg_nomask":
      visible = set()
      for j in range(i + 1):
        if kinds[j] != Kind.CNT2 or j == i:
          visible.add(j)
    else:  # tg_nomask_aug
      visible = set(range(i + 1))
    attends.append(sorted(visible))
  return attends


def _attends_to_mask(attends, T):
  mask = [[False] * T for _ in range(T)]
  for i in range(T):
    for j in attends[i]:
      mask[i][j] = True
  return mask


def stack_walk_mask(kinds, attention):
  """T x T mask (list of lists of bool) for one segment; for a mix, a list [mask_A, mask_B]
  (head group 0 = heads [0, H/2) uses A, head group 1 = heads [H/2, H) uses B)."""
  T = len(kinds)
  parsed = parse_attention(attention)
  if parsed[0] == "single":
    return _attends_to_mask(stack_walk_attends(kinds, parsed[1]), T)
  return [
      _attends_to_mask(stack_walk_attends(kinds, parsed[1]), T),
      _attends_to_mask(stack_walk_attends(kinds, parsed[2]), T),
  ]


# ----------------------------------------------------------------------------------------------
# 4. Packed rows
# ----------------------------------------------------------------------------------------------

def _pack_single(documents_kinds, pad_to, attention):
  T = pad_to
  mask = [[False] * T for _ in range(T)]
  offset = 0
  for doc_kinds in documents_kinds:
    n = len(doc_kinds)
    doc_mask = stack_walk_mask(doc_kinds, attention)
    for a in range(n):
      for b in range(n):
        mask[offset + a][offset + b] = doc_mask[a][b]
    offset += n
  for i in range(offset, T):
    mask[i][i] = True  # padding attends only itself
  return mask


def _row_length(documents_kinds, pad_to):
  total = 0
  for doc_kinds in documents_kinds:
    total += len(doc_kinds)
  if total > pad_to:
    raise ValueError(f"documents take {total} tokens, more than pad_to={pad_to}")
  return total


def packed_row_mask(documents_kinds, pad_to: int, attention):
  """Row mask for documents packed one after another (segments 1, 2, ...) then padding
  (segment 0) up to pad_to. Cross-document entries are False; padding attends only itself.
  For a mix returns [mask_A, mask_B]."""
  _row_length(documents_kinds, pad_to)
  parsed = parse_attention(attention)
  if parsed[0] == "single":
    return _pack_single(documents_kinds, pad_to, parsed[1])
  return [
      _pack_single(documents_kinds, pad_to, parsed[1]),
      _pack_single(documents_kinds, pad_to, parsed[2]),
  ]


def packed_row_metadata(documents_kinds, pad_to: int, attention="causal") -> dict:
  """Per-token row metadata: kind, segment, position, depth, pop, is_compose.

  Choices (SPEC §3 leaves them open): `pop` is an index into the ROW (segment offset added) and
  "infinity" is the row length pad_to; padding tokens get segment 0, position 0, depth 0,
  pop = pad_to, is_compose False. is_compose is True at CNT1 when the attention has a tg member.
  """
  _row_length(documents_kinds, pad_to)
  tg = has_tg(attention)
  T = pad_to
  out = {"kind": [], "segment": [], "position": [], "depth": [], "pop": [], "is_compose": []}
  offset = 0
  for d, doc_kinds in enumerate(documents_kinds):
    n = len(doc_kinds)
    depth, pop = stack_walk_metadata(doc_kinds)
    for a in range(n):
      out["kind"].append(Kind(doc_kinds[a]))
      out["segment"].append(d + 1)
      out["position"].append(a)
      out["depth"].append(depth[a])
      if pop[a] >= n:
        out["pop"].append(T)
      else:
        out["pop"].append(offset + pop[a])
      out["is_compose"].append(tg and Kind(doc_kinds[a]) == Kind.CNT1)
    offset += n
  for _ in range(offset, T):
    out["kind"].append(Kind.PAD)
    out["segment"].append(0)
    out["position"].append(0)
    out["depth"].append(0)
    out["pop"].append(T)
    out["is_compose"].append(False)
  return out


# ----------------------------------------------------------------------------------------------
# 5. Targets (SPEC §4)
# ----------------------------------------------------------------------------------------------

def loop_targets(kinds, attention, scheme: str) -> list[bool]:
  """Is token i a training target (predicted from token i - 1)?"""
  kinds = [Kind(k) for k in kinds]
  tg = has_tg(attention)
  targets = []
  for i in range(len(kinds)):
    kind = kinds[i]
    target = True
    if i == 0:
      target = False  # nothing precedes it
    if kind in (Kind.BOS, Kind.PAD):
      target = False
    if tg and i > 0 and kinds[i - 1] == Kind.CNT1:
      target = False  # the CNT2 after a CNT1 is deterministic
    if scheme == "lin1_shuf" and kind in (Kind.ONT, Kind.CNT, Kind.CNT1, Kind.CNT2):
      target = False
    targets.append(target)
  return targets


# ----------------------------------------------------------------------------------------------
# 6. Example printer
# ----------------------------------------------------------------------------------------------

def print_table(document, scheme="lin2", attention="tg", file=None):
  if file is None:
    file = sys.stdout
  symbols, kinds = loop_linearize(document, scheme)
  depth, pop = stack_walk_metadata(kinds)
  targets = loop_targets(kinds, attention, scheme)
  parsed = parse_attention(attention)
  single = parsed[1] if parsed[0] == "single" else parsed[2]
  attends = stack_walk_attends(kinds, single)
  print(f"{scheme} under {attention} (attends shown for {single}); T = {len(kinds)}", file=file)
  print(f"{'i':>3} {'token':<8} {'kind':<9} {'depth':>5} {'pop':>4} {'target':<6} attends",
        file=file)
  for i in range(len(kinds)):
    seen = " ".join(symbols[j] for j in attends[i])
    print(f"{i:>3} {symbols[i]:<8} {kinds[i].name:<9} {depth[i]:>5} {pop[i]:>4} "
          f"{str(targets[i]):<6} {seen}", file=file)


if __name__ == "__main__":
  example = Tree("S", (Tree("NP", ("the", "hungry", "cat")), Tree("VP", ("meows",))))
  print_table([example], "lin2", "tg")
