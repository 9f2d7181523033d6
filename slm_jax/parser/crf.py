"""The tree CRF of the chart parser, in JAX: inside (log Z), Viterbi CKY, exact top-down sampling.

Factorization. A parse is a binary bracketing T of the n words (its 2n − 1 spans: the n words,
n − 1 internal spans, the root (0, n) among them) and a label ℓ ∈ {∅, labels} on every span, with
∅ forbidden on the root (every tree has a root node). Its score is Σ_{(i,j) ∈ T} s(i, j, ℓ_ij) and
p(T, ℓ) = exp(score) / Z. Labels are independent given T, so

  Z = Σ_T Π_{(i,j) ∈ T} φ(i, j),   φ(i, j) = Σ_ℓ exp s(i, j, ℓ)   (log space: logsumexp over ℓ),

which the inside algorithm computes over span potentials φ (`span_potentials`). The Viterbi parse
uses φ_max(i, j) = max_ℓ s(i, j, ℓ) in the max semiring, and its labels are the per-span argmax.
The parser's model fixes s(i, j, ∅) = 0, so every binarization of an n-ary tree has the same score
(the sum of its constituents' label scores); training maximizes the probability of the gold tree's
right binarization (`labels.binarize`), and decoding debinarizes.

Layout. Charts are width-major: `chart_BWF[b, w, i]` = inside score of the span (i, i + w), for
w = 1..N (row 0 unused) and start i = 0..N; entries with i + w > length are finite filler that no
valid entry reads. `inside` is one `lax.scan` over the width (O(N³) work and O(N²) carry per
sentence, no Python loop over spans); `topdown` picks split points from the root down in a
`lax.fori_loop` of N − 1 steps with an explicit stack, argmax (Viterbi) or Gumbel-argmax (an
exact sample of p(split | span) ∝ exp(inside(i, k) + inside(k, j))), vmapped over samples and
sentences.

Legend: B sentences, N words (padded), F = N + 1 fenceposts, W = N + 1 widths, M = N − 1 split
offsets, L labels (0 = ∅), S samples per sentence, P = 2N − 1 span slots of a binary tree.
Lengths must be ≥ 1 (give padding rows length 1 and ignore them).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

NEG = -1e30  # "log 0" that stays finite (no inf − inf, no NaN gradients)


def _fenceposts(F: int):
  f_F = jnp.arange(F)
  return f_F[:, None], f_F[None, :]


def root_mask_BFF(lengths_B: jax.Array, F: int) -> jax.Array:
  """True at the root span (0, n) of each sentence."""
  i_F1, j_1F = _fenceposts(F)
  return (i_F1 == 0)[None] & (j_1F[None] == lengths_B[:, None, None])


def valid_spans_BFF(lengths_B: jax.Array, F: int) -> jax.Array:
  """True at spans (i, j) with 0 ≤ i < j ≤ n."""
  i_F1, j_1F = _fenceposts(F)
  return (i_F1 < j_1F)[None] & (j_1F[None] <= lengths_B[:, None, None])


def mask_root_empty(scores_BFFL: jax.Array, lengths_B: jax.Array) -> jax.Array:
  """Scores with ∅ (label 0) made impossible on each root span."""
  root_BFF = root_mask_BFF(lengths_B, scores_BFFL.shape[1])
  empty_BFF = jnp.where(root_BFF, NEG, scores_BFFL[..., 0])
  return scores_BFFL.at[..., 0].set(empty_BFF)


def span_potentials(scores_BFFL: jax.Array, lengths_B: jax.Array,
                    semiring: str = "log") -> jax.Array:
  """φ_BFF: logsumexp ("log") or max ("max") of the span's label scores, ∅ excluded at the root;
  0 outside valid spans."""
  masked_BFFL = mask_root_empty(scores_BFFL, lengths_B)
  if semiring == "log":
    phi_BFF = jax.nn.logsumexp(masked_BFFL, axis=-1)
  elif semiring == "max":
    phi_BFF = jnp.max(masked_BFFL, axis=-1)
  else:
    raise ValueError(f"semiring must be 'log' or 'max', got {semiring!r}")
  return jnp.where(valid_spans_BFF(lengths_B, scores_BFFL.shape[1]), phi_BFF, 0.0)


def diagonals(x_BFF: jax.Array) -> jax.Array:
  """x_BWF[b, w, i] = x_BFF[b, i, i + w] (the last column where i + w > N)."""
  F = x_BFF.shape[-1]
  w_W1 = jnp.arange(F)[:, None]
  i_1F = jnp.arange(F)[None, :]
  cols_WF = jnp.minimum(i_1F + w_W1, F - 1)
  return x_BFF[:, jnp.broadcast_to(i_1F, cols_WF.shape), cols_WF]


def _split_candidates(chart_BWF: jax.Array, w) -> jax.Array:
  """cand_BMF[b, m−1, i] = chart(i, i+m) + chart(i+m, i+w) for m < w, NEG for m ≥ w."""
  F = chart_BWF.shape[-1]
  m_M = jnp.arange(1, F - 1)
  i_F = jnp.arange(F)
  left_BMF = chart_BWF[:, m_M, :]
  rows_M1 = jnp.clip(w - m_M, 0, F - 1)[:, None]
  cols_MF = jnp.minimum(i_F[None, :] + m_M[:, None], F - 1)
  right_BMF = chart_BWF[:, jnp.broadcast_to(rows_M1, cols_MF.shape), cols_MF]
  return jnp.where((m_M < w)[None, :, None], left_BMF + right_BMF, NEG)


def inside(phi_BFF: jax.Array, lengths_B: jax.Array,
           semiring: str = "log") -> tuple[jax.Array, jax.Array]:
  """(log Z_B, chart_BWF) of span potentials φ (log or max semiring), one scan over widths."""
  B, F, _ = phi_BFF.shape
  phi_BWF = diagonals(phi_BFF)
  chart_BWF = jnp.full((B, F, F), NEG, phi_BFF.dtype).at[:, 1, :].set(phi_BWF[:, 1, :])
  reduce = jax.nn.logsumexp if semiring == "log" else jnp.max

  def step(chart_BWF, w):
    best_BF = reduce(_split_candidates(chart_BWF, w), axis=1)
    new_BF = jax.lax.dynamic_index_in_dim(phi_BWF, w, axis=1, keepdims=False) + best_BF
    return jax.lax.dynamic_update_index_in_dim(chart_BWF, new_BF, w, axis=1), None

  if F > 2:
    chart_BWF, _ = jax.lax.scan(step, chart_BWF, jnp.arange(2, F))
  logz_B = chart_BWF[jnp.arange(B), lengths_B, 0]
  return logz_B, chart_BWF


def log_partition(scores_BFFL: jax.Array, lengths_B: jax.Array) -> jax.Array:
  """log Z_B of labelled scores."""
  return inside(span_potentials(scores_BFFL, lengths_B, "log"), lengths_B, "log")[0]


def tree_scores(scores_BFFL: jax.Array, spans_BP3: jax.Array, valid_BP: jax.Array) -> jax.Array:
  """Σ over each tree's valid (i, j, label) rows of s(i, j, label): score_B."""
  b_B1 = jnp.arange(scores_BFFL.shape[0])[:, None]
  picked_BP = scores_BFFL[b_B1, spans_BP3[..., 0], spans_BP3[..., 1], spans_BP3[..., 2]]
  return jnp.sum(jnp.where(valid_BP, picked_BP, 0.0), axis=-1)


def nll(scores_BFFL: jax.Array, lengths_B: jax.Array, gold_BP3: jax.Array,
        gold_valid_BP: jax.Array) -> jax.Array:
  """Negative log-likelihood per sentence of the gold labelled binary trees: log Z − score."""
  return log_partition(scores_BFFL, lengths_B) - tree_scores(scores_BFFL, gold_BP3, gold_valid_BP)


def span_marginals(scores_BFFL: jax.Array, lengths_B: jax.Array) -> jax.Array:
  """p(span (i, j) with label ℓ in the parse), marginals_BFFL = ∂ log Z / ∂ s."""
  return jax.grad(lambda s: jnp.sum(log_partition(s, lengths_B)))(scores_BFFL)


def topdown(chart_BWF: jax.Array, lengths_B: jax.Array, key: jax.Array | None = None,
            num_samples: int = 1) -> tuple[jax.Array, jax.Array]:
  """Internal spans of one bracketing per sample, from the root down: (i, j) rows `spans_BSM2`
  (M = N − 1 slots, the first n − 1 valid: `valid_BSM`). `key=None`: argmax splits (the Viterbi
  tree of a max chart); else Gumbel-argmax (exact samples of an inside chart)."""
  B, _, F = chart_BWF.shape
  N = F - 1
  S = num_samples
  if N < 2:
    return jnp.zeros((B, S, 0, 2), jnp.int32), jnp.zeros((B, S, 0), bool)
  m_M = jnp.arange(1, N)
  if key is None:
    keys_BS = jnp.zeros((B, S), jnp.uint32)
  else:
    keys = jax.random.split(key, B * S)
    keys_BS = keys.reshape(B, S, *keys.shape[1:])

  def one(chart_WF, n, sample_key):
    stack_i = jnp.zeros(N, jnp.int32)
    stack_j = jnp.zeros(N, jnp.int32).at[0].set(n)
    out_M2 = jnp.zeros((N - 1, 2), jnp.int32)

    def body(t, state):
      stack_i, stack_j, depth, out_M2 = state
      live = depth > 0
      top = jnp.maximum(depth - 1, 0)
      i, j = stack_i[top], stack_j[top]
      w = j - i
      left_M = chart_WF[m_M, i]
      right_M = chart_WF[jnp.clip(w - m_M, 0, N), jnp.minimum(i + m_M, N)]
      cand_M = jnp.where(m_M < w, left_M + right_M, NEG)
      if key is not None:
        cand_M = cand_M + jax.random.gumbel(jax.random.fold_in(sample_key, t), cand_M.shape)
      k = i + m_M[jnp.argmax(cand_M)]
      out_M2 = out_M2.at[t].set(jnp.where(live, jnp.stack([i, j]), 0))
      depth = jnp.where(live, depth - 1, depth)
      for lo, hi in ((k, j), (i, k)):
        push = live & (hi - lo >= 2)
        stack_i = stack_i.at[depth].set(jnp.where(push, lo, stack_i[depth]))
        stack_j = stack_j.at[depth].set(jnp.where(push, hi, stack_j[depth]))
        depth = depth + push.astype(jnp.int32)
      return stack_i, stack_j, depth, out_M2

    depth0 = (n >= 2).astype(jnp.int32)
    _, _, _, out_M2 = jax.lax.fori_loop(0, N - 1, body, (stack_i, stack_j, depth0, out_M2))
    return out_M2, jnp.arange(N - 1) < n - 1

  per_sample = jax.vmap(one, in_axes=(None, None, 0))
  return jax.vmap(per_sample)(chart_BWF, lengths_B, keys_BS)


def label_spans(scores_BFFL: jax.Array, lengths_B: jax.Array, internal_BSM2: jax.Array,
                internal_valid_BSM: jax.Array, key: jax.Array | None = None
                ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """All 2n − 1 spans of each bracketing with a label each: argmax (key=None) or sampled from
  softmax(s(i, j, ·)) (∅ excluded at the root). Returns (spans_BSP3, valid_BSP, score_BS)."""
  B, F = scores_BFFL.shape[:2]
  N = F - 1
  S = internal_BSM2.shape[1]
  leaf_i_N = jnp.arange(N)
  leaves_BSN2 = jnp.broadcast_to(jnp.stack([leaf_i_N, leaf_i_N + 1], -1), (B, S, N, 2))
  spans_BSP2 = jnp.concatenate([internal_BSM2, leaves_BSN2], axis=2)
  valid_BSP = jnp.concatenate(
      [internal_valid_BSM, jnp.broadcast_to(leaf_i_N < lengths_B[:, None, None], (B, S, N))], 2)
  masked_BFFL = mask_root_empty(scores_BFFL, lengths_B)
  b_B11 = jnp.arange(B)[:, None, None]
  logits_BSPL = masked_BFFL[b_B11, spans_BSP2[..., 0], spans_BSP2[..., 1]]
  noisy_BSPL = logits_BSPL
  if key is not None:
    noisy_BSPL = logits_BSPL + jax.random.gumbel(key, logits_BSPL.shape)
  labels_BSP = jnp.argmax(noisy_BSPL, axis=-1).astype(jnp.int32)
  picked_BSP = jnp.take_along_axis(logits_BSPL, labels_BSP[..., None], axis=-1)[..., 0]
  score_BS = jnp.sum(jnp.where(valid_BSP, picked_BSP, 0.0), axis=-1)
  spans_BSP3 = jnp.concatenate([spans_BSP2, labels_BSP[..., None]], axis=-1)
  return spans_BSP3, valid_BSP, score_BS


@jax.jit
def viterbi(scores_BFFL: jax.Array, lengths_B: jax.Array):
  """The best labelled binary tree per sentence: (spans_BP3, valid_BP, score_B)."""
  phi_BFF = span_potentials(scores_BFFL, lengths_B, "max")
  best_B, chart_BWF = inside(phi_BFF, lengths_B, "max")
  internal_BSM2, valid_BSM = topdown(chart_BWF, lengths_B)
  spans, valid, score = label_spans(scores_BFFL, lengths_B, internal_BSM2, valid_BSM)
  del best_B
  return spans[:, 0], valid[:, 0], score[:, 0]


@functools.partial(jax.jit, static_argnames=("num_samples",))
def sample(scores_BFFL: jax.Array, lengths_B: jax.Array, key: jax.Array, num_samples: int):
  """Exact samples of labelled binary trees: (spans_BSP3, valid_BSP, score_BS, logz_B)."""
  phi_BFF = span_potentials(scores_BFFL, lengths_B, "log")
  logz_B, chart_BWF = inside(phi_BFF, lengths_B, "log")
  split_key, label_key = jax.random.split(key)
  internal_BSM2, valid_BSM = topdown(chart_BWF, lengths_B, split_key, num_samples)
  spans, valid, score = label_spans(scores_BFFL, lengths_B, internal_BSM2, valid_BSM, label_key)
  return spans, valid, score, logz_B
