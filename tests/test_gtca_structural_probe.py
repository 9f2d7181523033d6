"""The UUAS structural probe (`slm_jax.gtca.structural_probe`): probe training on synthetic states,
word vectors of a tiny Decoder with side hooks, the plot."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax.gtca import probe_trees, structural_probe
from slm_jax.gtca.probe import PUNCT_WORDS
from slm_jax.model import Decoder, ModelConfig
from slm_jax.tokenizer import make_tokenizer
from tests.test_gtca_probe_trees import CAT, random_heads, tree


def synthetic(count: int, seed: int, dim: int = 32, encode: bool = True):
  """Sentences with random trees and word states [1, M, D] whose squared distances are the tree
  distances after a fixed linear map (node = Σ of orthonormal edge vectors up to the root), mixed
  with noise dimensions by a random rotation; or pure noise states."""
  rng = np.random.default_rng(seed)
  rotation = np.linalg.qr(np.random.default_rng(99).normal(size=(dim, dim)))[0]
  sentences, states = [], []
  for _ in range(count):
    n = int(rng.integers(4, 15))
    heads = random_heads(n, rng)
    s = probe_trees.ProbeSentence(tuple(map(str, range(n))), np.arange(n), heads,
                             probe_trees.tree_distances(heads))
    tree_part = np.zeros((n, 16))
    for i in range(n):
      node = i
      while heads[node] >= 0:
        tree_part[i, node] = 1.0
        node = heads[node]
    noise = rng.normal(size=(n, dim - 16))
    h = np.concatenate([tree_part, noise], 1) @ rotation if encode else rng.normal(size=(n, dim))
    sentences.append(s)
    states.append(h)
  return sentences, np.concatenate(states)[None].astype(np.float32)


def test_probe_learns_linearly_encoded_trees_and_not_noise():
  train, h_train = synthetic(200, 1)
  test, h_test = synthetic(40, 2)
  B, loss = structural_probe.train_probes(h_train, train, rank=16, steps=400, batch_size=16,
                                          learning_rate=0.01)
  scores, rhos = structural_probe.evaluate(B, h_test, test)
  assert scores[0] > 0.9 and rhos[0] > 0.8, (scores, rhos, loss)
  noise_train, h_noise = synthetic(200, 1, encode=False)
  noise_test, h_noise_test = synthetic(40, 2, encode=False)
  B, _ = structural_probe.train_probes(h_noise, noise_train, rank=16, steps=400, batch_size=16,
                                       learning_rate=0.01)
  assert structural_probe.evaluate(B, h_noise_test, noise_test)[0][0] < 0.5


def tiny_model(words):
  tokenizer = make_tokenizer("word", words=words)
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=2, n_heads=4,
                       n_kv_heads=2, compute_dtype=jnp.float32, init_std=0.3,
                       attention_impl="xla")
  return Decoder(config, rngs=nnx.Rngs(0)), tokenizer


def test_word_vectors_layers_and_side_hooks():
  sentences = [probe_trees.sentence(tree(text), PUNCT_WORDS)
               for text in (CAT, "(S Cats (VP chase mice) .)")]
  model, tokenizer = tiny_model([w for s in sentences for w in s.words])
  h = structural_probe.word_vectors(model, sentences, tokenizer.encode_word, tokenizer.bos_id,
                                    batch_size=2)
  assert h.shape == (3, 9, 16) and np.isfinite(h).all()
  # Layer 0 is the embedding of each (single-piece) word.
  table = np.asarray(model.embed_tokens.embedding[...])
  ids = [tokenizer.encode_word(w)[0] for w in ("the", "cat", "sat", "on", "the", "mat")]
  np.testing.assert_allclose(h[0, :6], table[ids], rtol=1e-6)
  # A side hook changes the states after block 1 onwards, not the embeddings.
  side = lambda layer, x_BTD: jnp.ones_like(x_BTD) * (layer + 1)
  h_side = structural_probe.word_vectors(model, sentences, tokenizer.encode_word, tokenizer.bos_id,
                                         batch_size=2, side=side)
  np.testing.assert_array_equal(h_side[0], h[0])
  assert np.abs(h_side[1:] - h[1:]).max() > 1e-3
  seen = []

  def side_for(batch: structural_probe.ProbeBatch):
    seen.append((batch.tokens_BT.shape[0], len(batch.sentences),
                 batch.word_index_BT[0, :3].tolist()))
    return side
  h_for = structural_probe.word_vectors(model, sentences, tokenizer.encode_word, tokenizer.bos_id,
                                        batch_size=1, side_for=side_for, layers=[0, 2])
  assert len(seen) == 2 and all(rows == 1 and n == 1 for rows, n, _ in seen)
  assert seen[0][2] == [-1, 0, 1]  # BOS, then word 0, word 1
  np.testing.assert_allclose(h_for, h_side[[0, 2]], rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="layers"):
    structural_probe.word_vectors(model, sentences, tokenizer.encode_word, layers=[3])


def test_plot_draws_a_shared_linear_baseline_once(tmp_path, monkeypatch):
  """Results on the same test sentences share one linear baseline: one grey legend entry, not
  one per curve; different baselines keep one per curve."""
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  figures = []
  monkeypatch.setattr(plt, "close", figures.append)
  result = {"layers": [0, 1], "uuas": [0.2, 0.3], "linear_baseline_uuas": 0.4}
  structural_probe.plot([("a", result), ("b", dict(result, uuas=[0.2, 0.1]))],
                        tmp_path / "same.png")
  structural_probe.plot([("a", result), ("b", dict(result, linear_baseline_uuas=0.5))],
                        tmp_path / "diff.png")
  same, diff = ([t.get_text() for t in f.axes[0].get_legend().get_texts()] for f in figures)
  assert same == ["a", "b", "linear baseline (each word → its right neighbour)"]
  assert diff == ["a", "a: linear baseline", "b", "b: linear baseline"]
