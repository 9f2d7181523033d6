"""KV-cache decoding with incremental TG metadata equals full recomputation (`Scorer.logprobs`)
token by token, for every attention type, with rows advancing out of step, a multi-token prefix,
and rows copied / reordered mid-way (beam reselection)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.buckets import bucket
from slm_jax.configurations import resolve
from slm_jax.data.encode import encode_document
from slm_jax.inference import incremental
from slm_jax.inference.incremental import IncrementalDecoder
from slm_jax.inference.recompute import RecomputeDecoder
from slm_jax.inference.scorer import Scorer
from slm_jax.kinds import Kind
from slm_jax.model import Decoder, ModelConfig
from slm_jax.tokenizer import make_tokenizer
from slm_jax.trees import Tree

ATTENTIONS = ("causal", "tg", "tg_nomask", "tg_nomask_aug", "mix(tg_nomask,tg)", "mix(causal,tg)")
TOKENIZER = make_tokenizer("word", words="cats chase mice will go the hungry cat meows".split())
WILL_GO = Tree("S", ("cats", Tree("VP", ("will", Tree("VP", ("go",))))))  # nested equal labels
HUNGRY = Tree("S", (Tree("NP", ("the", "hungry", "cat")), Tree("VP", ("meows",))))
CHASE = Tree("S", (Tree("NP", ("the", "cat")), Tree("VP", ("chase", Tree("NP", ("mice",))))))
DOCUMENTS = ([WILL_GO, HUNGRY], [CHASE], [HUNGRY])  # lin2: 27, 18, 15 tokens
TOL = 1e-4  # float32


def setup(attention: str, linearization: str = "lin2", seed: int = 0):
  configuration = resolve(linearization=linearization, attention=attention)
  config = ModelConfig(vocab_size=TOKENIZER.vocab_size, d_model=16, n_layers=2, n_heads=4,
                       n_kv_heads=2, compute_dtype=jnp.float32, init_std=0.3,
                       attention=attention)
  model = Decoder(config, rngs=nnx.Rngs(seed))
  # A final-norm weight away from 1, so applying that norm twice cannot go unnoticed.
  model.final_norm.weight[...] = jnp.linspace(0.5, 2.0, config.d_model)
  sequences = [encode_document(d, TOKENIZER, linearization) for d in DOCUMENTS]
  reference = Scorer(model, TOKENIZER, configuration).logprobs(sequences)
  return model, configuration, sequences, reference


def decode_and_compare(decoder, sequences, reference, prefix: int = 1,
                       shuffle_at: int | None = None) -> float:
  """Feeds each row its sequence (rows start/stop at different times); max |error|."""
  rows = list(range(len(sequences)))  # row r holds sequence order[r]
  order = list(rows)
  decoder.start(np.stack([s.tokens[:prefix] for s in sequences]),
                np.stack([s.kinds[:prefix] for s in sequences]))
  delay = [0, 2, 5]  # row r starts feeding at time delay[r]
  fed = [prefix] * len(sequences)
  worst = 0.0
  for time in range(max(len(s) for s in sequences) + max(delay)):
    if shuffle_at is not None and time == shuffle_at:
      permutation = np.asarray([2, 0, 1])
      decoder.reorder(permutation)
      order = [order[p] for p in permutation]
      fed = [fed[p] for p in permutation]
      delay = [delay[p] for p in permutation]
    active = np.zeros(len(rows), bool)
    ids = np.zeros(len(rows), np.int64)
    kinds = np.zeros(len(rows), np.int64)
    for r in rows:
      sequence = sequences[order[r]]
      if time >= delay[r] and fed[r] < len(sequence):
        active[r] = True
        ids[r], kinds[r] = sequence.tokens[fed[r]], sequence.kinds[fed[r]]
    if not active.any():
      continue
    got = decoder.gather(ids[:, None])[:, 0]
    for r in np.flatnonzero(active):
      worst = max(worst, abs(got[r] - reference[order[r]][fed[r] - 1]))
      fed[r] += 1
    decoder.step(ids, kinds, active)
  assert fed == [len(sequences[o]) for o in order]
  return worst


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_kv_cache_equals_full_recomputation(attention):
  model, configuration, sequences, reference = setup(attention)
  decoder = IncrementalDecoder(model, configuration, max_len=32, batch=3)
  # a prefix fed at once (row metadata of the prefix), then token by token with a reselection
  assert decode_and_compare(decoder, sequences, reference, prefix=3, shuffle_at=7) < TOL


@pytest.mark.parametrize("linearization", ["lin1", "lin1_noont", "lin1_merge", "lin3"])
def test_kv_cache_other_linearizations(linearization):
  model, configuration, sequences, reference = setup("causal", linearization)
  decoder = IncrementalDecoder(model, configuration, max_len=48, batch=3)
  assert decode_and_compare(decoder, sequences, reference, shuffle_at=4) < TOL
  if linearization == "lin1":  # a longer prefix, all at once
    assert decode_and_compare(decoder, sequences, reference, prefix=11) < TOL


def test_arena_compaction_keeps_every_row():
  """The arena overflows mid-sequence (its first free slot is moved near its end, as after
  many steps; a step uses one slot per fed row, its padding none): the compacted rows decode
  the same, forks included."""
  model, configuration, sequences, reference = setup("mix(tg_nomask,tg)")
  decoder = IncrementalDecoder(model, configuration, max_len=28, batch=3, arena_factor=1)
  decoder.start(np.stack([s.tokens[:2] for s in sequences]),
                np.stack([s.kinds[:2] for s in sequences]))
  worst = 0.0
  for t in range(2, max(map(len, sequences))):
    if t in (3, 12):
      decoder.free = decoder.arena - decoder.step_width - 2  # the next steps overflow
    if t == 12:
      decoder.copy_rows([2], [0])  # fork row 0 (its keys stay shared in the arena)
      sequences = sequences[:2] + sequences[:1]
      reference = reference[:2] + reference[:1]
    for r, seq in enumerate(sequences):
      if t < len(seq):
        got = decoder.gather(np.full((3, 1), seq.tokens[t]))[r, 0]
        worst = max(worst, abs(got - reference[r][t - 1]))
        decoder.step_rows([r], [seq.tokens[t]], [seq.kinds[t]])
  assert worst < TOL
  assert decoder.compactions >= 2
  assert decoder.precompile() > 0 and decoder.free + 3 <= decoder.arena


def test_a_step_uses_one_arena_slot_per_fed_row_and_compaction_keeps_only_held_slots():
  """Padding rows of a step take no arena slots (the old decoder used a whole row bucket per
  step); a compaction keeps exactly the distinct slots the rows hold (a fork shares its
  parent's) and leaves the arena past them untouched (it moves O(kept) slots, at least a
  quarter of the arena)."""
  model, configuration, sequences, _ = setup("tg")
  decoder = IncrementalDecoder(model, configuration, max_len=32, batch=40)  # 1,600 slots
  decoder.start(sequences[0].tokens[:4], sequences[0].kinds[:4])  # 4 slots, shared by the rows
  assert decoder.free == 4
  decoder.step_rows([0, 2], sequences[0].tokens[4:6], sequences[0].kinds[4:6])
  assert decoder.free == 6
  decoder.copy_rows([1], [0])
  decoder.release(np.arange(2, 40))
  tail = np.asarray(decoder.cache.k[0][-8:])
  decoder.free = decoder.arena  # the next step compacts
  decoder.step_rows([1], sequences[0].tokens[5:6], sequences[0].kinds[5:6])
  assert decoder.compactions == 1
  assert decoder.free == 4 + 1 + 1  # prefix, row 0's (and row 1's) token, the new one
  np.testing.assert_array_equal(np.asarray(decoder.cache.k[0][-8:]), tail)


def test_the_comparison_detects_a_wrong_mask():
  model, configuration, sequences, reference = setup("tg")
  decoder = IncrementalDecoder(model, configuration, max_len=32, batch=3)
  decoder.groups = (0,)  # decode the TG model as if it were causal
  assert decode_and_compare(decoder, sequences, reference) > 1e-2


def test_copy_rows_and_sparse_steps():
  model, configuration, sequences, reference = setup("mix(causal,tg)")
  decoder = IncrementalDecoder(model, configuration, max_len=48, batch=4)
  seq = sequences[0]
  decoder.start(seq.tokens[:1], seq.kinds[:1])
  for t in range(1, 6):
    decoder.step_rows([1], [seq.tokens[t]], [seq.kinds[t]])
  decoder.copy_rows([0, 3], [1, 1])  # duplicate the advanced row twice
  assert list(decoder.lengths) == [6, 6, 1, 6]
  for t in range(6, 10):
    got = decoder.gather(np.full((4, 1), seq.tokens[t]))[:, 0]
    np.testing.assert_allclose(got[[0, 3] if t > 6 else [0, 1, 3]], reference[0][t - 1],
                               atol=TOL)
    decoder.step_rows([3, 0], [seq.tokens[t]] * 2, [seq.kinds[t]] * 2)
  assert list(decoder.lengths) == [10, 6, 1, 10]
  with pytest.raises(ValueError, match="distinct"):
    decoder.step_rows([0, 0], [1, 1], [3, 3])


def test_recompute_decoder_matches_and_limits_are_checked():
  model, configuration, sequences, reference = setup("tg_nomask")
  assert decode_and_compare(RecomputeDecoder(model, configuration, max_len=48, batch=3),
                            sequences, reference, shuffle_at=3) < TOL
  decoder = IncrementalDecoder(model, configuration, max_len=4, batch=1)
  decoder.start([TOKENIZER.bos_id], [1])
  for _ in range(3):
    decoder.step([5], [3])
  with pytest.raises(ValueError, match="already holds max_len=4"):
    decoder.step([5], [3])
  with pytest.raises(RuntimeError, match="start"):
    IncrementalDecoder(model, configuration, max_len=4, batch=1).step([5], [3])


def test_a_block_feature_added_in_the_model_is_decoded_by_the_cache():
  """QK-norm lives only in `SelfAttention.project`; the KV cache runs the model's own blocks, so
  it decodes the variant exactly (and the variant really changes the model)."""
  configuration = resolve(linearization="lin2", attention="mix(tg_nomask,tg)")
  config = ModelConfig(vocab_size=TOKENIZER.vocab_size, d_model=16, n_layers=2, n_heads=4,
                       n_kv_heads=2, compute_dtype=jnp.float32, init_std=0.3,
                       attention="mix(tg_nomask,tg)", qk_norm=True)
  model = Decoder(config, rngs=nnx.Rngs(3))
  model.blocks[0].attn.q_norm.weight[...] = jnp.linspace(0.2, 3.0, 16)
  plain = Decoder(config.replace(qk_norm=False), rngs=nnx.Rngs(3))
  sequences = [encode_document(d, TOKENIZER, "lin2") for d in DOCUMENTS]
  reference = Scorer(model, TOKENIZER, configuration).logprobs(sequences)
  without = Scorer(plain, TOKENIZER, configuration).logprobs(sequences)
  assert max(np.abs(r - w).max() for r, w in zip(reference, without)) > 1e-2
  decoder = IncrementalDecoder(model, configuration, max_len=32, batch=3)
  assert decode_and_compare(decoder, sequences, reference, prefix=2, shuffle_at=5) < TOL


def test_kv_cache_decodes_olmo2_blocks():
  """OLMo-2 blocks (post-norm, QK-norm over the whole projected width, o bias): the cache runs
  the model's own blocks, so its log-probs equal the full forward with no cache change."""
  configuration = resolve(linearization="lin2", attention="causal")
  config = ModelConfig(vocab_size=TOKENIZER.vocab_size, d_model=16, n_layers=2, n_heads=4,
                       n_kv_heads=2, compute_dtype=jnp.float32, init_std=0.3, qk_norm=True,
                       norm_position="post", qkv_bias=True, o_bias=True, attention="causal")
  model = Decoder(config, rngs=nnx.Rngs(3))
  model.blocks[0].attn.q_norm.weight[...] = jnp.linspace(0.5, 2.0, 16)
  sequences = [encode_document(d, TOKENIZER, "lin2") for d in DOCUMENTS]
  reference = Scorer(model, TOKENIZER, configuration).logprobs(sequences)
  pre = Decoder(config.replace(norm_position="pre"), rngs=nnx.Rngs(3))
  other = Scorer(pre, TOKENIZER, configuration).logprobs(sequences)
  assert max(np.abs(a - b).max() for a, b in zip(reference, other)) > 1e-3  # post-norm matters
  decoder = IncrementalDecoder(model, configuration, max_len=32, batch=3)
  assert decode_and_compare(decoder, sequences, reference, prefix=2, shuffle_at=5) < TOL


def _grown_decoder(chunk_rows: int, rows: int = 48, seed: int = 0):
  """A tg decoder whose rows hold 1..40 tokens (cache widths 16 to 48), and a snapshot to
  restore it from: (decoder, restore(), next token and kind of every row)."""
  configuration = resolve(linearization="lin2", attention="tg")
  config = ModelConfig(vocab_size=TOKENIZER.vocab_size, d_model=64, n_layers=2, n_heads=4,
                       n_kv_heads=2, compute_dtype=jnp.float32, init_std=0.3, attention="tg")
  model = Decoder(config, rngs=nnx.Rngs(seed))
  decoder = IncrementalDecoder(model, configuration, max_len=64, batch=rows,
                               chunk_rows=chunk_rows)
  rng = np.random.default_rng(seed)
  decoder.start([TOKENIZER.bos_id], [int(Kind.BOS)])
  lengths = rng.integers(1, 40, rows)
  words = rng.integers(TOKENIZER.vocab_size - 9, TOKENIZER.vocab_size, (41, rows))
  for t in range(40):
    fed = np.flatnonzero(lengths > t)
    decoder.step_rows(fed, words[t, fed], np.full(len(fed), int(Kind.TERMINAL)))
  cache, logprobs = jax.tree.map(jnp.copy, decoder.cache), jnp.copy(decoder.logprobs)
  free, held = decoder.free, decoder.lengths.copy()

  def restore():
    decoder.cache, decoder._logprobs = jax.tree.map(jnp.copy, cache), jnp.copy(logprobs)
    decoder.free, decoder.lengths = free, held.copy()

  return decoder, restore, words[40], np.full(rows, int(Kind.TERMINAL))


def test_a_row_gets_the_same_bits_in_any_step_composition():
  """Issue #46: a step computes its rows in fixed chunks of rows of one cache width, so a row's
  log-probabilities are the same bits whichever rows share the step — alone, with rows of other
  widths, with every row, in another order, with a row count that leaves more padding. The
  chunk here is 8 rows, where XLA:CPU's kernels do change with the row count (the control: the
  same rows computed unchunked, 3 vs 27 at once, differ), as a GPU's do at any count."""
  decoder, restore, tokens, kinds = _grown_decoder(chunk_rows=8)
  target = np.asarray([3, 17, 30])
  others = np.setdiff1d(np.arange(decoder.batch), target)
  assert len({bucket(int(n) + 1, 16, 64) for n in decoder.lengths[target]}) > 1

  def fed(rows):
    restore()
    decoder.step_rows(rows, tokens[rows], kinds[rows])
    return np.asarray(decoder.logprobs)[target]

  alone = fed(target)
  for rows in (np.r_[target, others[:5]], np.r_[others[::-1], target], np.r_[others[:13], target],
               np.r_[others[:20:3], target[::-1], others[20:]]):
    np.testing.assert_array_equal(fed(rows), alone)
  # The control: the unchunked step (`_step_chunk` of all rows at once) changes the bits.
  restore()
  width, model = 64, nnx.merge(decoder.graphdef.graphdef, decoder.params)
  step = jax.jit(lambda cache, lp, fed_3M: incremental._step_chunk(
      model, decoder.groups, width, cache, lp, fed_3M, np.int32(decoder.free)))
  outputs = []
  for rows in (target, np.r_[target, others[:24]]):
    fed_3M = np.stack([rows, tokens[rows], kinds[rows]]).astype(np.int32)
    restore()
    outputs.append(np.asarray(step(decoder.cache, decoder.logprobs, fed_3M)[1])[target])
  assert np.abs(outputs[0] - outputs[1]).max() > 0


def test_chunk_layout_groups_rows_by_their_own_width():
  """Rows are placed in chunks of their own cache width (the least width above their length),
  in their order within a width, each width's rows padded to whole chunks; padding rows (index
  n) are placed nowhere."""
  n, widths = 10, (16, 24, 32, 48, 64)
  rows = jnp.asarray([5, 9, 2, n, n, 7, 1], jnp.int32)
  lengths = jnp.asarray([3, 20, 15, 0, 0, 40, 16], jnp.int32)  # widths 16, 24, 16, -, -, 48, 24
  source, first, chunks = incremental.chunk_layout(rows, lengths, n, widths, chunk=2)
  np.testing.assert_array_equal(first, [0, 1, 2, 2, 3])
  np.testing.assert_array_equal(chunks, [1, 1, 0, 1, 0])
  np.testing.assert_array_equal(source[:6], [0, 2, 1, 6, 5, 7])  # 7: padding (index R)
  assert (np.asarray(source[6:]) == 7).all() and len(source) % 2 == 0
