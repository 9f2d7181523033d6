"""The chart parser's network in Flax NNX: word encoder → fencepost vectors → span label scores.

Words: a character CNN (max-pooled over the word's characters) concatenated with a word embedding,
then a 2-layer BiLSTM or a pre-LN transformer (learned positions) over `<s> w1 … wn </s>`. Each
output vector is split into a forward half f and a backward half b (Stern et al. 2017; Kitaev &
Klein 2018); fencepost k (between words k and k + 1, k = 0..n) is (f_k, b_{k+1}) and a span is

  r(i, j) = [f_j − f_i ; b_i − b_j].

The label MLP's first layer is linear, so it is applied to the fenceposts once (g_k = W_f f_k −
W_b b_k) and a span's pre-activation is g_j − g_i + bias: O(N·D·H) matmuls plus O(N²·H) adds,
not O(N²·D·H). Then LayerNorm, ReLU, dropout and a linear map to the L − 1 non-∅ labels;
s(i, j, ∅) = 0 (so every binarization of a tree scores the same; see `crf`). An `Ensemble` of
scorers trained alike scores spans by the members' mean (s(i, j, ∅) stays 0).

Legend: B sentences, T = N + 2 tokens, C characters, F = N + 1 fenceposts, D encoder width,
H MLP width, L labels (0 = ∅), G POS tags (training's auxiliary head only).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from slm_jax.parser import crf
from slm_jax.parser.config import ParserModelConfig
from slm_jax.parser.vocab import PAD


class CharCNN(nnx.Module):
  """Characters of each token → one vector (convolution, ReLU, max over the word)."""

  def __init__(self, num_chars: int, cfg: ParserModelConfig, rngs: nnx.Rngs):
    self.embed = nnx.Embed(num_chars, cfg.char_dim, rngs=rngs)
    self.conv = nnx.Conv(cfg.char_dim, cfg.char_filters, kernel_size=(cfg.char_kernel,),
                         padding="SAME", rngs=rngs)

  def __call__(self, char_ids_BTC: jax.Array) -> jax.Array:
    B, T, C = char_ids_BTC.shape
    x = self.embed(char_ids_BTC.reshape(B * T, C))
    h = jax.nn.relu(self.conv(x))
    h = jnp.where((char_ids_BTC.reshape(B * T, C) != PAD)[..., None], h, 0.0)
    return jnp.max(h, axis=1).reshape(B, T, -1)


class BiLSTM(nnx.Module):
  def __init__(self, d_in: int, cfg: ParserModelConfig, rngs: nnx.Rngs):
    self.layers = nnx.List()
    for layer in range(cfg.layers):
      width = d_in if layer == 0 else 2 * cfg.hidden
      self.layers.append(nnx.Bidirectional(
          nnx.RNN(nnx.OptimizedLSTMCell(width, cfg.hidden, rngs=rngs), rngs=False),
          nnx.RNN(nnx.OptimizedLSTMCell(width, cfg.hidden, rngs=rngs), rngs=False), rngs=False))
    self.dropout = nnx.Dropout(cfg.dropout, rngs=rngs)
    self.hidden = cfg.hidden

  def __call__(self, x_BTD: jax.Array, tokens_B: jax.Array) -> jax.Array:
    zeros_BH = jnp.zeros((x_BTD.shape[0], self.hidden), x_BTD.dtype)
    carry = ((zeros_BH, zeros_BH), (zeros_BH, zeros_BH))  # (c, h) of each direction
    for k, layer in enumerate(self.layers):
      if k:
        x_BTD = self.dropout(x_BTD)
      x_BTD = layer(x_BTD, seq_lengths=tokens_B, initial_carry=carry)
    return x_BTD


class TransformerLayer(nnx.Module):
  def __init__(self, cfg: ParserModelConfig, rngs: nnx.Rngs):
    d = 2 * cfg.hidden
    self.norm1 = nnx.LayerNorm(d, rngs=rngs)
    self.attention = nnx.MultiHeadAttention(cfg.heads, d, dropout_rate=cfg.dropout, decode=False,
                                            deterministic=False,
                                            rngs=rngs)
    self.norm2 = nnx.LayerNorm(d, rngs=rngs)
    self.ff1 = nnx.Linear(d, cfg.ff_dim, rngs=rngs)
    self.ff2 = nnx.Linear(cfg.ff_dim, d, rngs=rngs)
    self.dropout = nnx.Dropout(cfg.dropout, rngs=rngs)

  def __call__(self, x_BTD: jax.Array, mask_B1TT: jax.Array) -> jax.Array:
    x_BTD = x_BTD + self.dropout(self.attention(self.norm1(x_BTD), mask=mask_B1TT))
    return x_BTD + self.dropout(self.ff2(self.dropout(jax.nn.relu(self.ff1(self.norm2(x_BTD))))))


class Transformer(nnx.Module):
  def __init__(self, d_in: int, cfg: ParserModelConfig, rngs: nnx.Rngs):
    d = 2 * cfg.hidden
    self.project = nnx.Linear(d_in, d, rngs=rngs)
    self.positions = nnx.Embed(cfg.max_words + 2, d, rngs=rngs)
    self.layers = nnx.List([TransformerLayer(cfg, rngs) for _ in range(cfg.layers)])
    self.norm = nnx.LayerNorm(d, rngs=rngs)

  def __call__(self, x_BTD: jax.Array, tokens_B: jax.Array) -> jax.Array:
    T = x_BTD.shape[1]
    x_BTD = self.project(x_BTD) + self.positions(jnp.arange(T))[None]
    keep_BT = jnp.arange(T)[None, :] < tokens_B[:, None]
    mask_B1TT = (keep_BT[:, None, :, None] & keep_BT[:, None, None, :])
    for layer in self.layers:
      x_BTD = layer(x_BTD, mask_B1TT)
    return self.norm(x_BTD)


class SpanScorer(nnx.Module):
  """(word ids, character ids, lengths) → span label scores s(i, j, ℓ), `scores_BFFL`."""

  def __init__(self, cfg: ParserModelConfig, num_words: int, num_chars: int, num_labels: int,
               rngs: nnx.Rngs):
    self.cfg = cfg
    self.chars = CharCNN(num_chars, cfg, rngs)
    self.words = nnx.Embed(num_words, cfg.word_dim, rngs=rngs)
    d_in = cfg.char_filters + cfg.word_dim
    encoder = BiLSTM if cfg.encoder == "bilstm" else Transformer
    self.encoder = encoder(d_in, cfg, rngs)
    self.dropout = nnx.Dropout(cfg.dropout, rngs=rngs)
    self.fence_forward = nnx.Linear(cfg.hidden, cfg.mlp_dim, use_bias=False, rngs=rngs)
    self.fence_backward = nnx.Linear(cfg.hidden, cfg.mlp_dim, use_bias=False, rngs=rngs)
    self.span_bias = nnx.Param(jnp.zeros(cfg.mlp_dim))
    self.span_norm = nnx.LayerNorm(cfg.mlp_dim, rngs=rngs)
    self.out = nnx.Linear(cfg.mlp_dim, num_labels - 1, rngs=rngs)

  def __call__(self, word_ids_BT: jax.Array, char_ids_BTC: jax.Array,
               lengths_B: jax.Array) -> jax.Array:
    return self.span_scores(self.encode(word_ids_BT, char_ids_BTC, lengths_B))

  def encode(self, word_ids_BT: jax.Array, char_ids_BTC: jax.Array,
             lengths_B: jax.Array) -> jax.Array:
    """The encoder's output over `<s> w1 … wn </s>`, `h_BTD` (D = 2 × hidden)."""
    x_BTD = jnp.concatenate([self.chars(char_ids_BTC), self.words(word_ids_BT)], axis=-1)
    return self.encoder(self.dropout(x_BTD), lengths_B + 2)

  def span_scores(self, h_BTD: jax.Array) -> jax.Array:
    half = self.cfg.hidden
    forward_BFD = h_BTD[:, :-1, :half]  # f_k = forward state after word k (k = 0: <s>)
    backward_BFD = h_BTD[:, 1:, half:]  # b_{k+1} = backward state at the token after fence k
    g_BFH = self.fence_forward(self.dropout(forward_BFD)) - self.fence_backward(
        self.dropout(backward_BFD))
    pre_BFFH = g_BFH[:, None, :, :] - g_BFH[:, :, None, :] + self.span_bias[...]
    hidden_BFFH = self.dropout(jax.nn.relu(self.span_norm(pre_BFFH)))
    labels_BFFL = self.out(hidden_BFFH)
    empty_BFF1 = jnp.zeros(labels_BFFL.shape[:-1] + (1,), labels_BFFL.dtype)
    return jnp.concatenate([empty_BFF1, labels_BFFL], axis=-1)


class Ensemble(nnx.Module):
  """Several span scorers trained alike (seeds differ) on one vocabulary and label set; scores
  s(i, j, ℓ) are the members' mean (a product of experts, with the temperature of one member), so
  Viterbi, sampling and K-best run on the ensemble exactly as on one scorer."""

  def __init__(self, members: list[SpanScorer]):
    if len(members) < 2:
      raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}")
    if any(m.cfg != members[0].cfg for m in members[1:]):
      raise ValueError("ensemble members must share one ParserModelConfig")
    self.cfg = members[0].cfg
    self.members = nnx.List(members)

  def __call__(self, word_ids_BT: jax.Array, char_ids_BTC: jax.Array,
               lengths_B: jax.Array) -> jax.Array:
    total_BFFL = self.members[0](word_ids_BT, char_ids_BTC, lengths_B)
    for member in self.members[1:]:
      total_BFFL = total_BFFL + member(word_ids_BT, char_ids_BTC, lengths_B)
    return total_BFFL / len(self.members)


class PosTagger(nnx.Module):
  """Training-only auxiliary head: POS tag logits of each word from the encoder output (GUM's
  constituency trees were parsed from gold POS tags, so predicting them shapes the encoder). Not
  part of a saved parser."""

  def __init__(self, cfg: ParserModelConfig, num_tags: int, rngs: nnx.Rngs):
    self.dropout = nnx.Dropout(cfg.dropout, rngs=rngs)
    self.out = nnx.Linear(2 * cfg.hidden, num_tags, rngs=rngs)

  def __call__(self, h_BTD: jax.Array) -> jax.Array:
    """`tag_logits_BNG` for words 1..N (G tags); `<s>` and `</s>` dropped."""
    return self.out(self.dropout(h_BTD[:, 1:-1]))


class TrainedParser(nnx.Module):
  """What training optimizes: the span scorer and, when `tag_weight` > 0, the POS head."""

  def __init__(self, scorer: SpanScorer, tagger: PosTagger | None, tag_weight: float = 1.0):
    self.scorer = scorer
    self.tagger = tagger
    self.tag_weight = tag_weight

  def loss_sums(self, batch: dict) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(loss, sums) of a training batch (`parser.train.encode_batch`): the CRF NLL of the gold
    trees per real word, plus `tag_weight` × the POS cross-entropy per tagged word. The loss is
    already the batch's mean, so `count` is 1 (the shared train step divides gradients by it);
    sums: `loss_sum` (the objective), `span_loss`, `tag_loss`."""
    real_B, lengths_B, tags_BN = batch["real"], batch["lengths"], batch["tags"]
    words = jnp.maximum(jnp.sum(jnp.where(real_B, lengths_B, 0)), 1)
    h_BTD = self.scorer.encode(batch["word_ids"], batch["char_ids"], lengths_B)
    per_sentence_B = crf.nll(self.scorer.span_scores(h_BTD), lengths_B, batch["gold"],
                             batch["valid"])
    span_loss = jnp.sum(jnp.where(real_B, per_sentence_B, 0.0)) / words
    if self.tagger is None:
      loss, tag_loss = span_loss, jnp.zeros(())
    else:
      tagged_BN = tags_BN > 0
      per_word_BN = optax.softmax_cross_entropy_with_integer_labels(self.tagger(h_BTD), tags_BN)
      tag_loss = (jnp.sum(jnp.where(tagged_BN, per_word_BN, 0.0))
                  / jnp.maximum(jnp.sum(tagged_BN), 1))
      loss = span_loss + self.tag_weight * tag_loss
    return loss, {"loss_sum": loss, "count": jnp.ones(()), "span_loss": span_loss,
                  "tag_loss": tag_loss}
