"""`PushdownLM`: the decoder with stack-tape attention and an attachment head (SPEC §14).

Pushdown Layers (Murty et al. 2023, §3–4), on the OLMo-style decoder of SPEC §6, in every layer
as in the paper's BLLIP models:
- **Stack-tape attention.** Query t sees key j with the extra logit q_t · E_l[depth_t(j)] / √K,
  E_l a learned [depths, K] table of layer l shared by its heads, depth_t(j) the stack tape
  after token t (`structure.stack_tape`, clipped to the table). It enters through the decoder's
  `attend` hook (the reference mask of `attention_mask`, then `attention_core` with the bias), so
  the blocks, norms and head are the decoder's own.
- **Attachment head** (the paper's synchronous variant): at position t, with the final hidden
  states h and the next token's embedding e(x_t+1), q = MLP([h_t; e(x_t+1)]); the logit of
  reducing with the stack element whose last token is j is (q · (W_k h_j) + q · A[depth_t(j)])
  / √P (the depth-aware keys of the paper's additive composition), the logit of a shift is
  q · W_s [h_t; e(x_t+1)] / √P. The softmax runs over the shift and the elements of the current
  sentence only (`structure.reduce_options`), so attachment sequences and binary forests
  correspond one to one; the paper normalizes over all earlier positions.
- **Joint loss** (`loss_sums`): next-token NLL under the silver stack tape plus the attachment
  NLL of every next word, summed; the LM target count normalizes both (as the paper adds them).
  A batch holds packed lin1 rows; the step compacts them to terminal rows and derives the silver
  structure in-graph (`structure.pushdown_rows` with jax.numpy), so the data pipeline is the one
  every lin1 configuration uses. The batch's lin1 `targets` restrict the loss: a compact token
  is an LM target (and a word's attachment is trained) only where its lin1 token is a target.
  Pre-training's lin1 targets cover every terminal and EOS, so they change nothing there;
  XSum / BoolQ fine-tuning (`downstream.finetune_data`) trains the summary / answer words and
  their attachments only.

The paper's relative-position terms and its MLP key/depth composer are left out (RoPE gives
positions; depth enters keys additively).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.kinds import TERMINAL_CODE
from slm_jax.model.attention import attention_core, attention_mask
from slm_jax.model.config import ModelConfig
from slm_jax.model.decoder import Decoder
from slm_jax.model.layers import dense
from slm_jax.model.loss import loss_and_metrics
from slm_jax.pushdown.structure import PushdownRows, pushdown_rows, reduce_options, stack_tape
from slm_jax.structure import RowMetadata, parse_attention, row_metadata, target_mask

_CAUSAL = parse_attention("causal")
_MASKED = float(np.finfo(np.float32).min)  # a masked option: exp underflows to 0, no inf


def _depth_term(x_BTP: jax.Array, table_DP: jax.Array, depth_BTS: jax.Array) -> jax.Array:
  """[B, T, S]: x_t · table[depth[t, s]] (one gather from the [B, T, depths] products)."""
  xe_BTD = jnp.einsum("btp,dp->btd", x_BTP, table_DP.astype(x_BTP.dtype),
                      preferred_element_type=jnp.float32)
  return jnp.take_along_axis(xe_BTD, depth_BTS, axis=-1)


class PushdownLM(nnx.Module):
  """`forward(tokens, meta, tape)` → logits and hidden states; `attachment_logits`; the joint
  `loss_sums` over a lin1 batch."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    if config.pushdown_depths < 1:
      raise ValueError(f"PushdownLM needs model.pushdown_depths ≥ 1, got "
                       f"{config.pushdown_depths}")
    self.config = config
    self.decoder = Decoder(config, rngs=rngs)
    L, K, D = config.n_layers, config.head_dim, config.d_model
    depths = config.pushdown_depths
    init = nnx.initializers.normal(config.init_std)
    self.depth_embed = nnx.Param(init(rngs.params(), (L, depths, K), config.param_dtype))
    self.attach_in = dense(config, 2 * D, D, True, rngs=rngs)
    self.attach_query = dense(config, D, D, True, rngs=rngs)
    self.attach_key = dense(config, D, D, False, rngs=rngs)
    self.attach_shift = dense(config, 2 * D, D, False, rngs=rngs)
    self.attach_depth = nnx.Param(init(rngs.params(), (depths, D), config.param_dtype))

  def clip(self, tape_BTS: jax.Array) -> jax.Array:
    return jnp.clip(tape_BTS, 0, self.config.pushdown_depths - 1).astype(jnp.int32)

  def depth_bias(self, layer: int, q_BTHK: jax.Array, tape_BTS: jax.Array) -> jax.Array:
    """[B, H, T, S] float32: q_t · E_layer[depth_t(s)] / √K, the stack-tape logit term."""
    K = q_BTHK.shape[-1]
    table_DK = self.depth_embed[layer].astype(q_BTHK.dtype)
    qe_BHTD = jnp.einsum("bthk,dk->bhtd", q_BTHK, table_DK, preferred_element_type=jnp.float32)
    return jnp.take_along_axis(qe_BHTD, self.clip(tape_BTS)[:, None], axis=-1) * (K ** -0.5)

  def attend(self, tape_BTS: jax.Array):
    """The decoder's `attend` hook for stack tape `tape_BTS` (queries × keys of the row)."""

    def attend(layer, q_BTHK, k_BSGK, v_BSGK, meta: RowMetadata, attention):
      mask_BATS = attention_mask(meta, np.asarray(attention.groups, np.int32))
      return attention_core(q_BTHK, k_BSGK, v_BSGK, mask_BATS,
                            self.depth_bias(layer, q_BTHK, tape_BTS))

    return attend

  def forward(self, tokens_BT: jax.Array, meta: RowMetadata, tape_BTS: jax.Array,
              embeddings_BTD: jax.Array | None = None):
    """(logits [B, T, V] float32, final hidden states [B, T, D]) of terminal rows under their
    stack tape; `embeddings_BTD` replaces the token embeddings (causality tests)."""
    x_BTD = self.decoder.embed(tokens_BT) if embeddings_BTD is None else embeddings_BTD
    h_BTD = self.decoder.hidden(x_BTD, meta, attend=self.attend(tape_BTS))
    return self.decoder.logits(h_BTD), h_BTD

  def attachment_logits(self, h_BTD: jax.Array, next_BT: jax.Array, tape_BTS: jax.Array,
                        keys_BSD: jax.Array | None = None):
    """(reduce [B, T, S], shift [B, T]) float32 logits of the attachment of token t+1 = next_BT[t]
    at query t: reducing with the element whose last token is s, or shifting (unmasked). The
    keys read the hidden states `keys_BSD` (default: `h_BTD`, queries and keys the same row)."""
    x_BT2D = jnp.concatenate([h_BTD, self.decoder.embed(next_BT).astype(h_BTD.dtype)], axis=-1)
    q_BTP = self.attach_query(jax.nn.relu(self.attach_in(x_BT2D)))
    k_BSP = self.attach_key(h_BTD if keys_BSD is None else keys_BSD)
    scale = q_BTP.shape[-1] ** -0.5
    reduce_BTS = jnp.einsum("btp,bsp->bts", q_BTP, k_BSP, preferred_element_type=jnp.float32)
    reduce_BTS = (reduce_BTS + _depth_term(q_BTP, self.attach_depth[...],
                                           self.clip(tape_BTS))) * scale
    shift_BT = jnp.sum(q_BTP.astype(jnp.float32) * self.attach_shift(x_BT2D), axis=-1) * scale
    return reduce_BTS, shift_BT

  def loss_sums(self, batch: dict) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The train/eval step's sums for a batch of packed lin1 rows (`Batch.as_dict()`)."""
    if batch.get("targets") is None:
      raise ValueError("PushdownLM.loss_sums: the batch has no lin1 `targets` (Batch.as_dict() "
                       "gives them; they restrict the loss)")
    inputs = terminal_inputs(batch["tokens"], batch["meta"].kind, batch["meta"].segment,
                             batch["targets"])
    return joint_loss(self, *inputs)


def _gather(x_BT: jax.Array, source_BT: jax.Array, fill) -> jax.Array:
  """x at the lin1 index each compact slot holds (`fill` for empty slots, source == T)."""
  T = x_BT.shape[-1]
  picked = jnp.take_along_axis(x_BT, jnp.minimum(source_BT, T - 1), axis=-1)
  return jnp.where(source_BT < T, picked, fill)


def terminal_inputs(tokens_BT, kind_BT, segment_BT, targets_BT=None):
  """(rows, tokens, meta, targets, tape) of the compact terminal rows of packed lin1 rows; the
  compact targets are SPEC §4's (every token after a run's first) and, given the lin1
  `targets_BT`, only those whose lin1 token is a target."""
  rows = pushdown_rows(kind_BT, segment_BT, jnp)
  tokens = _gather(tokens_BT, rows.source, 0).astype(jnp.int32)
  meta = row_metadata(rows.kind, rows.segment, jnp)
  targets = target_mask(rows.kind, rows.segment, "lin0", _CAUSAL, xp=jnp)
  if targets_BT is not None:
    targets = targets & _gather(jnp.asarray(targets_BT, bool), rows.source, False)
  return rows, tokens, meta, targets, stack_tape(rows.span_start, rows.span_end, jnp)


def _shift_left(x_BT: jax.Array, fill) -> jax.Array:
  return jnp.concatenate([x_BT[:, 1:], jnp.full_like(x_BT[:, :1], fill)], axis=-1)


def attachment_nll(model: PushdownLM, h_BTD, tokens_BT, rows: PushdownRows, tape_BTS,
                   targets_BT):
  """Per-query NLL [B, T] of the next token's silver attachment, and where it counts [B, T]
  (the next token is a terminal target)."""
  T = tokens_BT.shape[-1]
  reduce_BTS, shift_BT = model.attachment_logits(h_BTD, _shift_left(tokens_BT, 0), tape_BTS)
  options_BTS = reduce_options(rows, jnp)
  logits = jnp.concatenate([jnp.where(options_BTS, reduce_BTS, _MASKED), shift_BT[..., None]],
                           axis=-1)  # [B, T, S + 1]; slot S = shift
  index = jnp.arange(T, dtype=jnp.int32)
  label = _shift_left(rows.attach, T)  # attachment of token t + 1
  slot = jnp.where(label == index + 1, T, jnp.minimum(label, T))
  picked = jnp.take_along_axis(logits, slot[..., None], axis=-1)[..., 0]
  nll_BT = jax.nn.logsumexp(logits, axis=-1) - picked
  counts = _shift_left(targets_BT, False) & (_shift_left(rows.kind, 0) == TERMINAL_CODE)
  return jnp.where(counts, nll_BT, 0.0), counts


def joint_loss(model: PushdownLM, rows: PushdownRows, tokens_BT, meta, targets_BT, tape_BTS):
  """(loss_sum, sums): the LM sums of `loss_and_metrics` (terminal rows, silver tape) with the
  attachment NLL added to `loss_sum`, and `attach_loss_sum` / `attach_count` on their own."""
  logits_BTV, h_BTD = model.forward(tokens_BT, meta, tape_BTS)
  _, sums = loss_and_metrics(logits_BTV, tokens_BT, targets_BT, meta.kind)
  nll_BT, counts_BT = attachment_nll(model, h_BTD, tokens_BT, rows, tape_BTS, targets_BT)
  sums["attach_loss_sum"] = nll_BT.sum()
  sums["attach_count"] = counts_BT.sum(dtype=jnp.float32)
  sums["loss_sum"] = sums["loss_sum"] + sums["attach_loss_sum"]
  return sums["loss_sum"], sums
