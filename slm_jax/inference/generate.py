"""Summary generation (SPEC §11): beam search over the KV cache, word-synchronous for trees.

`beam_generate` (terminal and pause configurations: lin0, pause1, pause2) is standard beam search
over next tokens: the prompt is prefilled once into an `IncrementalDecoder` of `beam` rows; each
step ranks every (live hypothesis, allowed token) pair by total log-prob on the device, takes the
top 2·beam; EOS candidates ranked within the top `beam` finish, the best `beam` others stay live
(reselection = `copy_rows`, paths only; one batched `step_rows` feeds them).
  allowed    base pieces and EOS; PAD, BOS, PAUSE, `)` and every ONT / CNT are masked out (a
             terminal model never emits structure); EOS also until `min_tokens` are out
  pauses     a pause model was trained on k = 1 / 2 `<P>` after *every* terminal piece (k read
             from the linearization of a one-word tree), so a chosen piece is followed by its k
             pauses: fed, scored (SPEC §9 scores pause models on every position), never chosen
             and never counted in `max_tokens`; `text` drops them
  limits     `max_tokens` counts the chosen tokens, EOS included (HF's max_new_tokens); a
             hypothesis still live after `max_tokens` pieces is kept, `finished=False`
  ranking    total log-prob of the chosen and forced tokens (EOS included); optional
             `length_penalty` α ranks by logprob / length^α (length = chosen tokens). Default
             α = 0: the exact beam objective, so the early stop (`beam` finished and no live
             hypothesis above the worst of them; scores only fall) loses nothing and a beam wide
             enough equals exhaustive search (tests); α = 1 is HF's normalization (then the stop
             rule is HF's heuristic). `ranking`, `search_done` (the stop) and `best_first` are
             shared with the Pushdown reference's joint search (`slm_jax.pushdown.generate`)

`word_synchronous_generate` (tree configurations, the scheme table's `beam_searchable` schemes)
generates one sentence (the summary's tree, a new root after the prompt) word by word:
  word step  every beam hypothesis expands depth-first until it starts its next word: candidate
             slots are the grammar's (`grammaticality.Grammar`: ONT labels, the closing its open
             stack allows, ≤ `max_open` consecutive ONTs), EOS (once the grammar's end state is
             reached: lin1/2/3 every bracket closed), a word-initial piece, and a continuation
             piece of the word just emitted; each round keeps the top `beam` candidates (plus a
             `fast_track` of the best word starts); those that started a word join the pool
             (the best `beam` of it), the others form the next frontier, expanded while one
             still scores above the pool's `beam`-th; the pool is the next beam
  words      word-level bases: every base id is a word; BPE bases: a piece whose text starts
             with the base's word prefix (a space) starts a word, any other piece continues the
             one before it (only right after a piece: words are contiguous); a word step ends
             at a word start, so a word's continuation pieces belong to the next step
  limits     ≤ `max_words` word starts; then one last step may only continue, close and end;
             `max_tokens` (default max(6·max_words, 10), SPEC §9's cap) bounds the linearized
             sentence with the closings of every open constituent reserved (the grammar's
             `min_completion`), so every hypothesis can always still close and end
  ranking    joint log-prob of words, structure and EOS (CNT2 counted where it is a target,
             as in `beam`); `length_penalty` as above (length = generated tokens)
  text       the terminals of the best finished hypothesis (brackets dropped), detokenized.

`detokenize` turns generated ids into text: structure, pauses, BOS/EOS dropped; word-level pieces
are PTB words (unescaped: `-LRB-` → `(`, `` `` `` → `"`) joined by spaces; BPE pieces are decoded
together (their spaces are in the pieces; BPE bases encode unescaped text).
`recompute=True` runs either search on `RecomputeDecoder` (full forward pass every step; same
log-probs): the baseline of `benchmarks/downstream_bench.py` and the tests' oracle.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from slm_jax.buckets import bucket
from slm_jax.configurations import Configuration
from slm_jax.inference.beam import MAX_LEN_FACTOR, MIN_LEN, BeamSearcher
from slm_jax.inference.beam_feed import feed_expansions
from slm_jax.inference.grammaticality import AFTER_WORD, Grammar, GrammarState
from slm_jax.inference.incremental import IncrementalDecoder
from slm_jax.inference.recompute import RecomputeDecoder
from slm_jax.inference.scorer import LENGTH_BUCKET
from slm_jax.kinds import PAUSE_CODE, TERMINAL_CODE, Kind
from slm_jax.linearize import linearize
from slm_jax.model.decoder import Decoder
from slm_jax.tokenizer import Tokenizer, WordVocab, ptb_unescape
from slm_jax.trees import Tree

BEAM = 6  # SPEC §11: beam 6, ≤ 150 tokens; trees ≤ 75 words, ≤ 4 consecutive ONTs
MAX_TOKENS = 150
MAX_WORDS = 75
MAX_OPEN = 4


@dataclasses.dataclass
class Generation:
  """The best hypothesis of a search."""
  ids: np.ndarray  # [T] generated token ids, EOS excluded (pauses and structure included)
  kinds: np.ndarray  # [T] their `Kind`s
  text: str  # the terminals, detokenized
  logprob: float  # total log-prob of the generated tokens (EOS included when finished)
  finished: bool  # ended with EOS (False: stopped at a limit)
  words: int  # chosen terminal pieces (beam_generate) / words started (word-synchronous)
  steps: int  # batched decoder calls
  positions: int  # synchronized steps the search ran: token positions / word steps (trees)
  ranked: list[float] = dataclasses.field(default_factory=list)  # ranking scores, best first
  # the Pushdown joint search: each generated token's attachment (its compact-row index: a
  # shift; another index: the stack element it reduces with); None for the other searches
  attachments: np.ndarray | None = None


# ---- tokens and text

def detokenize(tokenizer: Tokenizer, ids) -> str:
  """Text of the terminals among `ids` (module docstring)."""
  ids = np.asarray(ids, np.int64)
  pieces = ids[ids < tokenizer.base_size].tolist()
  if not pieces:
    return ""
  if isinstance(tokenizer.base, WordVocab):
    return " ".join(ptb_unescape(tokenizer.base.decode_piece(i)) for i in pieces)
  return tokenizer.base.decode_word(pieces).strip()


@functools.lru_cache(maxsize=8)
def piece_classes(tokenizer: Tokenizer) -> np.ndarray:
  """[V] int8: 1 a word-initial base piece, 2 a continuation piece, 0 not a base piece."""
  out = np.zeros(tokenizer.vocab_size, np.int8)
  base = tokenizer.base
  prefix = getattr(base, "word_prefix", "")
  if isinstance(base, WordVocab) or not prefix:
    out[:tokenizer.base_size] = 1
    return out
  for i in range(tokenizer.base_size):
    out[i] = 1 if base.decode_piece(i).startswith(prefix) else 2
  return out


def generated_positions(configuration: Configuration, *, max_tokens: int = MAX_TOKENS,
                        max_words: int = MAX_WORDS, tree_max_tokens: int | None = None) -> int:
  """Cache positions a search may fill after the prompt: tree schemes the word-synchronous cap
  (`tree_max_tokens`, default max(6·max_words, 10), closings included), terminal formats
  `max_tokens` chosen pieces plus the pauses fed after each."""
  if configuration.scheme.has_brackets:
    return int(tree_max_tokens or max(MAX_LEN_FACTOR * max_words, MIN_LEN))
  return max_tokens * (1 + pauses_per_terminal(configuration.scheme.name))


def pauses_per_terminal(linearization: str) -> int:
  """`<P>` tokens the scheme puts after each terminal (read from a one-word tree's
  linearization, so the scheme's own rule is the only statement of it)."""
  return int((linearize(Tree("X", ("w",)), linearization).kinds == PAUSE_CODE).sum())


def prompt_arrays(tokenizer: Tokenizer, prompt_tokens, prompt_kinds=None):
  """(ids, kinds) int32 of the prompt: a `linearize.Sequence` of ids, or ids with `prompt_kinds`
  (kinds may be left out when the prompt has no structure tokens: they follow from the ids)."""
  if hasattr(prompt_tokens, "kinds") and prompt_kinds is None:
    prompt_tokens, prompt_kinds = prompt_tokens.tokens, prompt_tokens.kinds
  ids = np.asarray(prompt_tokens, np.int64)
  if ids.ndim != 1 or not ids.size:
    raise ValueError(f"the prompt must be a non-empty 1-D id sequence, got shape {ids.shape}")
  if prompt_kinds is None:
    if tokenizer.is_structural(ids).any():
      raise ValueError("a prompt with structure tokens needs prompt_kinds (CNT1 / CNT2 are "
                       "told apart by kind only)")
    special = {tokenizer.bos_id: Kind.BOS, tokenizer.eos_id: Kind.EOS,
               tokenizer.pause_id: Kind.PAUSE, tokenizer.pad_id: Kind.PAD}
    prompt_kinds = [int(special.get(i, Kind.TERMINAL)) for i in ids.tolist()]
  kinds = np.asarray(prompt_kinds, np.int64)
  if kinds.shape != ids.shape:
    raise ValueError(f"prompt ids {ids.shape} and kinds {kinds.shape} must be parallel")
  return ids.astype(np.int32), kinds.astype(np.int32)


def _decoder(model, configuration, *, max_len, batch, recompute):
  cls = RecomputeDecoder if recompute else IncrementalDecoder
  return cls(model, configuration, max_len=bucket(max_len, LENGTH_BUCKET), batch=batch)


def ranking(score, length, length_penalty: float):
  """The ranking score logprob / length^α of hypotheses (α = 0: the log-prob itself)."""
  return np.asarray(score) / np.maximum(np.asarray(length, np.float64), 1.0) ** length_penalty


def search_done(done_scores, done_lengths, live_scores, length: int, beam: int,
                length_penalty: float) -> bool:
  """The early stop of `beam_generate`: `beam` hypotheses finished and no live one (`length`
  tokens each) ranks above the beam-th of them (exact for α = 0: scores only fall)."""
  if len(done_scores) < beam:
    return False
  worst = np.sort(ranking(done_scores, done_lengths, length_penalty))
  return bool(ranking(live_scores, length, length_penalty).max() <= worst[-beam])


def best_first(done_scores, done_lengths, length_penalty: float) -> tuple[np.ndarray, np.ndarray]:
  """(order best first, ranking scores) of the finished hypotheses."""
  ranked = ranking(done_scores, done_lengths, length_penalty)
  return np.argsort(-ranked, kind="stable"), ranked


# ---- device scoring

@functools.partial(jax.jit, static_argnums=(3,))
def _best_continuations(logprobs_NV, score_N, allowed_V, k: int):
  """The k best (row, token) pairs by score + log p among allowed tokens: flat indices [k] into
  N·V and their log p [k] (rows with score −inf are not live)."""
  total_NV = jnp.where(allowed_V[None, :], score_N[:, None] + logprobs_NV, -jnp.inf)
  _, flat_k = jax.lax.top_k(total_NV.reshape(-1), k)
  return flat_k, logprobs_NV.reshape(-1)[flat_k]


@functools.partial(jax.jit, static_argnums=(3,))
def _best_pieces(logprobs_NV, rows_M, classes_V, k: int):
  """Per fed row, the k best word-initial and the k best continuation pieces: ids, log p
  [M, 2, k] (−inf where a class has fewer than k pieces)."""
  lp_MV = logprobs_NV[rows_M]
  by_class = jnp.stack([jnp.where(classes_V == c, lp_MV, -jnp.inf) for c in (1, 2)], axis=1)
  lp_M2k, ids_M2k = jax.lax.top_k(by_class, k)
  return ids_M2k, lp_M2k


# ---- terminal and pause models

def beam_generate(model: Decoder, tokenizer: Tokenizer, configuration: Configuration,
                  prompt_tokens, *, prompt_kinds=None, beam: int = BEAM,
                  max_tokens: int = MAX_TOKENS, min_tokens: int = 0,
                  length_penalty: float = 0.0, recompute: bool = False) -> Generation:
  """Beam search of a terminal or pause model after the prompt (module docstring)."""
  scheme = configuration.scheme
  if scheme.has_brackets:
    raise ValueError(f"{configuration.name} ({scheme.name}) emits structure: use "
                     "word_synchronous_generate")
  if beam < 1 or max_tokens < 1 or not 0 <= min_tokens < max_tokens:
    raise ValueError(f"need beam >= 1, max_tokens >= 1, 0 <= min_tokens < max_tokens; got "
                     f"{beam}, {max_tokens}, {min_tokens}")
  ids, kinds = prompt_arrays(tokenizer, prompt_tokens, prompt_kinds)
  pauses = pauses_per_terminal(scheme.name)
  width = generated_positions(configuration, max_tokens=max_tokens)  # EOS is never fed
  decoder = _decoder(model, configuration, max_len=len(ids) + width, batch=beam,
                     recompute=recompute)
  decoder.start(ids, kinds)
  allowed = np.zeros(tokenizer.vocab_size, bool)
  allowed[:tokenizer.base_size] = True
  eos = tokenizer.eos_id
  k = min(2 * beam, beam * tokenizer.vocab_size)
  score = np.full(beam, -np.inf)
  score[0] = 0.0  # every row holds the prompt; only row 0 is expanded at first
  hist = np.zeros((beam, width), np.int64)
  done: list[tuple[np.ndarray, float, int, bool]] = []  # (ids, logprob, length, finished)
  steps = 0
  for t in range(max_tokens):
    positions = t + 1
    allowed[eos] = t >= min_tokens
    flat, lp = _best_continuations(decoder.logprobs, jnp.asarray(score, jnp.float32),
                                   jnp.asarray(allowed), k)
    flat, lp = np.asarray(flat), np.asarray(lp, np.float64)
    parent, token = flat // tokenizer.vocab_size, flat % tokenizer.vocab_size
    value = score[parent] + lp
    alive = np.isfinite(value)
    used = t * (1 + pauses)
    ends = np.flatnonzero(alive & (token == eos))
    for rank in ends[ends < beam]:
      done.append((hist[parent[rank], :used].copy(), float(value[rank]), t + 1, True))
    keep = np.flatnonzero(alive & (token != eos))[:beam]
    if t == max_tokens - 1 or not len(keep):
      for i in keep:  # stopped at the limit: kept, marked unfinished
        row = np.append(hist[parent[i], :used], token[i])
        done.append((row, float(value[i]), t + 1, False))
      break
    rows = np.arange(len(keep))
    decoder.copy_rows(rows, parent[keep])
    hist[rows] = hist[parent[keep]]
    score = np.full(beam, -np.inf)
    score[rows] = value[keep]
    hist[rows, used] = token[keep]
    decoder.step_rows(rows, token[keep], np.full(len(keep), TERMINAL_CODE))
    steps += 1
    for p in range(pauses):
      query = np.full((beam, 1), tokenizer.pause_id)
      score[rows] += decoder.gather(query)[rows, 0]
      hist[rows, used + 1 + p] = tokenizer.pause_id
      decoder.step_rows(rows, np.full(len(keep), tokenizer.pause_id),
                        np.full(len(keep), PAUSE_CODE))
      steps += 1
    if search_done([d[1] for d in done], [d[2] for d in done], score[rows], t + 1, beam,
                   length_penalty):
      break
  order, ranked = best_first([d[1] for d in done], [d[2] for d in done], length_penalty)
  best_ids, logprob, _, finished = done[order[0]]
  best_kinds = np.where(best_ids == tokenizer.pause_id, PAUSE_CODE, TERMINAL_CODE)
  return Generation(best_ids, best_kinds.astype(np.int8), detokenize(tokenizer, best_ids),
                    logprob, finished, int((best_kinds == TERMINAL_CODE).sum()), steps,
                    positions, ranked[order].tolist())


# ---- tree models

def word_synchronous_generate(model: Decoder, tokenizer: Tokenizer,
                              configuration: Configuration, prompt_tokens, *, prompt_kinds=None,
                              beam: int = BEAM, max_words: int = MAX_WORDS,
                              max_open: int | None = MAX_OPEN, max_tokens: int | None = None,
                              fast_track: int = 0, labels=None, length_penalty: float = 0.0,
                              recompute: bool = False) -> Generation:
  """Word-synchronous beam generation of one sentence by a tree model (module docstring)."""
  grammar, cap = tree_search_setup(tokenizer, configuration, beam=beam, max_words=max_words,
                                   fast_track=fast_track, max_open=max_open, labels=labels,
                                   max_tokens=max_tokens)
  ids, kinds = prompt_arrays(tokenizer, prompt_tokens, prompt_kinds)
  n = 2 * beam + fast_track  # pool + expanded parents + their extra successors
  decoder = _decoder(model, configuration, max_len=len(ids) + cap, batch=n, recompute=recompute)
  decoder.start(ids, kinds)
  classes = jnp.asarray(piece_classes(tokenizer))
  top = min(max(beam, fast_track), tokenizer.base_size)
  ws = grammar.word_slot
  state = GrammarState.initial(n, cap + 2)
  score, words = np.zeros(n), np.zeros(n, np.int64)
  hist, hist_kind = np.zeros((n, cap + 1), np.int64), np.zeros((n, cap + 1), np.int64)
  done: list[tuple[np.ndarray, np.ndarray, float, int]] = []  # (ids, kinds, logprob, words)
  steps = 0
  beam_rows = np.zeros(1, np.int64)
  for w in range(max_words + 1):
    positions = w + 1
    pool, frontier = np.zeros(0, np.int64), beam_rows
    while len(frontier):
      if len(pool) >= beam:  # depth-first continuation, as in inference.beam
        frontier = frontier[score[frontier] > score[pool[beam - 1]]]
        if not len(frontier):
          break
      parent = state.take(frontier)
      cand, slot_ids, piece_ids = tree_candidates(
          grammar, decoder, parent, frontier, np.full(len(frontier), w), score, cap=cap,
          max_words=max_words, classes=classes, top=top)
      flat = cand.ravel()
      order = np.argsort(-flat, kind="stable")
      chosen = order[np.isfinite(flat[order])][:beam]
      if fast_track:
        column = order % cand.shape[1]
        starts = order[np.isfinite(flat[order]) & (column >= grammar.n_slots) & (
            column < grammar.n_slots + top)][:fast_track]
        chosen = np.concatenate([chosen, starts[~np.isin(starts, chosen)]])
      if not len(chosen):
        break
      f, c = chosen // cand.shape[1], chosen % cand.shape[1]
      for i in np.flatnonzero(c == ws):  # EOS: finished, never fed
        row = frontier[f[i]]
        used = int(parent.length[f[i]])
        done.append((hist[row, :used].copy(), hist_kind[row, :used].copy(),
                     float(cand[f[i], c[i]]), int(words[row])))
      fed = c != ws
      f, c = f[fed], c[fed]
      is_piece = c >= grammar.n_slots
      is_start = is_piece & (c < grammar.n_slots + top)
      first = np.where(is_piece, piece_ids[f, np.maximum(c - grammar.n_slots, 0)],
                       slot_ids[f, np.minimum(c, grammar.n_slots - 1)])
      slot = np.where(is_piece, ws, c)
      new = BeamSearcher._place(frontier[f], pool, n, decoder, hist, hist_kind)
      state.put(new, grammar.advance(parent.take(f), slot, at_end=False, word_len=1))
      score[new] = cand[f, c]
      words[new] = words[frontier[f]] + is_start
      tokens, token_kinds, scored, count = grammar.expand(slot, first, (0,), TERMINAL_CODE)
      used = parent.length[f]
      steps += feed_expansions(decoder, new, tokens, token_kinds, scored, count, used, hist,
                               hist_kind, score)
      pool = np.concatenate([pool, new[is_start]])
      pool = pool[np.argsort(-score[pool], kind="stable")[:beam]]
      frontier = new[~is_start]
    beam_rows = pool
    if not len(pool):
      break
    if len(done) >= beam and length_penalty == 0.0 and (
        score[pool].max() <= np.sort([d[2] for d in done])[-beam]):
      break  # exact: no live hypothesis can beat the beam-th finished one
  return tree_generation(tokenizer, done, steps, positions, length_penalty)


def tree_search_setup(tokenizer: Tokenizer, configuration: Configuration, *, beam: int,
                      max_words: int, fast_track: int, max_open: int | None, labels,
                      max_tokens: int | None) -> tuple[Grammar, int]:
  """(grammar, length cap) of a word-synchronous generation, its options checked."""
  scheme = configuration.scheme
  if not scheme.beam_searchable:
    raise ValueError(f"{configuration.name} ({scheme.name}) has no word-synchronous search "
                     "(terminal and pause models: beam_generate)")
  if beam < 1 or max_words < 1 or fast_track < 0:
    raise ValueError(f"need beam >= 1, max_words >= 1, fast_track >= 0; got {beam}, "
                     f"{max_words}, {fast_track}")
  grammar = Grammar(scheme.name, tokenizer, cnt2_scored=not configuration.attention.tg_family,
                    labels=labels, max_open=max_open)
  return grammar, generated_positions(configuration, max_words=max_words,
                                      tree_max_tokens=max_tokens)


def tree_candidates(grammar: Grammar, decoder, parent: GrammarState, frontier: np.ndarray,
                    words_M: np.ndarray, score: np.ndarray, *, cap: int, max_words: int,
                    classes, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """One expansion round of the word-synchronous generation (module docstring) for the
  `frontier` rows (`parent` their grammar states, `words_M` the word step each is in): (joint
  scores of the candidates [M, slots + 2·top] (−inf: not allowed; the grammar's slots, then
  the `top` best word-initial and continuation pieces), the slots' token ids [M, slots], the
  pieces' ids [M, 2·top])."""
  n, ws, n_ont = decoder.batch, grammar.word_slot, grammar.n_ont
  more = grammar.valid(parent, at_end=False, remaining=1, word_len=1, cap=cap)
  end = grammar.valid(parent, at_end=True, remaining=0, word_len=1, cap=cap)
  open_words = np.asarray(words_M) < max_words  # an ONT and a word start need a word left
  valid = more.copy()  # ONTs and closings that leave the sentence open
  valid[:, :n_ont] &= open_words[:, None]
  valid[:, n_ont:ws] |= end[:, n_ont:ws]  # closings that may end it (the root)
  valid[:, ws] = end[:, ws]  # the grammar's word slot at the end is EOS
  piece_fits = more[:, ws]
  slot_ids = grammar.slot_token_ids(parent, grammar.tokenizer.eos_id)
  query = np.zeros((n, grammar.n_slots), np.int64)
  query[frontier] = slot_ids
  lp_slots = decoder.gather(query)[frontier]
  rows_n = np.zeros(n, np.int32)
  rows_n[:len(frontier)] = frontier
  piece_ids, lp_pieces = (np.asarray(a) for a in _best_pieces(
      decoder.logprobs, jnp.asarray(rows_n), classes, top))
  piece_ids = piece_ids[:len(frontier)].reshape(len(frontier), 2 * top)
  lp_pieces = lp_pieces[:len(frontier)].reshape(len(frontier), 2 * top).astype(np.float64)
  piece_ok = np.concatenate([np.repeat((piece_fits & open_words)[:, None], top, 1),
                             np.repeat((piece_fits & (parent.last == AFTER_WORD))[:, None],
                                       top, 1)], axis=1)
  lp = np.concatenate([lp_slots, lp_pieces], axis=1)  # [M, slots + 2·top]
  ok = np.concatenate([valid, piece_ok], axis=1) & np.isfinite(lp)
  return np.where(ok, score[frontier, None] + lp, -np.inf), slot_ids, piece_ids


def tree_generation(tokenizer: Tokenizer, done: list, steps: int, positions: int,
                    length_penalty: float) -> Generation:
  """The result of a word-synchronous search from its finished hypotheses `done` ((ids, kinds,
  log-prob, words) in the order they finished): the best one by `best_first`."""
  if not done:  # no hypothesis ended within the limits (cannot happen with finite log-probs)
    return Generation(np.zeros(0, np.int64), np.zeros(0, np.int8), "", -np.inf, False, 0, steps,
                      positions)
  order, ranked = best_first([d[2] for d in done], [len(d[0]) + 1 for d in done], length_penalty)
  best_ids, best_kinds, logprob, n_words = done[order[0]]
  return Generation(best_ids, best_kinds.astype(np.int8),
                    detokenize(tokenizer, best_ids[best_kinds == TERMINAL_CODE]), logprob, True,
                    n_words, steps, positions, ranked[order].tolist())


def generate(model: Decoder, tokenizer: Tokenizer, configuration: Configuration, prompt_tokens,
             **options) -> Generation:
  """The search SPEC §11 uses for the configuration: word-synchronous for tree schemes,
  `beam_generate` otherwise."""
  search = word_synchronous_generate if configuration.scheme.has_brackets else beam_generate
  return search(model, tokenizer, configuration, prompt_tokens, **options)
