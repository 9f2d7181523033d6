"""The UUAS structural probe (`slm_jax.gtca.probe`): gold dependency trees from head rules, tree
distances, the MST, probe training on synthetic states, and the CLI end to end on a tiny Decoder."""

from __future__ import annotations

import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax import ptb
from slm_jax.gtca import probe
from slm_jax.model import Decoder, ModelConfig
from slm_jax.tokenizer import make_tokenizer
from tests.shared_data import require_shared

CAT = "(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"


def tree(text: str):
  return ptb.parse_trees(text, normalize=probe.TREE_OPTIONS)[0]


def test_head_rules_on_a_tagged_tree():
  words, kept, heads = probe.tree_dependencies(tree(CAT))
  assert words == ["the", "cat", "sat", "on", "the", "mat", "."]
  assert kept.tolist() == [0, 1, 2, 3, 4, 5]  # the final "." is punctuation
  # the→cat, cat→sat, sat = root, on→sat, the→mat, mat→on
  assert heads.tolist() == [1, 2, -1, 2, 5, 3]
  assert probe.tree_edges(heads) == {(0, 1), (1, 2), (2, 3), (4, 5), (3, 5)}


def test_distances_hand_computed():
  d = probe.tree_distances(np.array([1, 2, -1, 2, 5, 3]))
  want = np.array([[0, 1, 2, 3, 5, 4],
                   [1, 0, 1, 2, 4, 3],
                   [2, 1, 0, 1, 3, 2],
                   [3, 2, 1, 0, 2, 1],
                   [5, 4, 3, 2, 0, 1],
                   [4, 3, 2, 1, 1, 0]])
  np.testing.assert_array_equal(d, want)
  assert probe.sentence(tree(CAT)).distances.tolist() == want.tolist()


def test_untagged_tree_punctuation_and_rules():
  s = probe.sentence(tree("(S Cats (VP chase mice) .)"))
  assert s.words == ("Cats", "chase", "mice", ".") and s.kept.tolist() == [0, 1, 2]
  assert s.heads.tolist() == [1, -1, 1]
  np.testing.assert_array_equal(s.distances, [[0, 1, 2], [1, 0, 1], [2, 1, 0]])
  # A tagged "$" is a word (it heads "$ 100"); tagged "," is not.
  s = probe.sentence(tree("(S (NP (QP ($ $) (CD 100))) (, ,) (VP (VBZ is) (ADJP (JJ ok))))"))
  assert s.kept.tolist() == [0, 1, 3, 4]
  assert probe.head_child("NP", ["DT", "JJ", "NN"]) == 2
  assert probe.head_child("NP", ["NP", "POS"]) == 1
  assert probe.head_child("PP", ["IN", "NP"]) == 0
  assert probe.head_child("VP", ["MD", "VP"]) == 0
  assert probe.head_child("S", ["NP", "VP"]) == 1
  # A sentence of punctuation and one word has no edge: not probed.
  assert probe.sentences_from_trees([tree("(S (NP (NN Hi)) (. !))"), tree(CAT)])[0].n == 6


def test_bad_heads_are_errors():
  with pytest.raises(ValueError, match="exactly one root"):
    probe.tree_distances(np.array([1, 0]))
  with pytest.raises(ValueError, match="cycle"):
    probe.tree_distances(np.array([-1, 2, 1]))


def random_heads(n: int, rng: np.random.Generator) -> np.ndarray:
  """A random tree over n nodes (each node attached to an earlier one, then relabelled)."""
  parent = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
  perm = rng.permutation(n)  # node k is called perm[k]
  heads = np.empty(n, np.int64)
  heads[perm] = np.where(parent >= 0, perm[np.maximum(parent, 0)], -1)
  return heads


def test_mst_recovers_the_tree_from_its_own_distances():
  rng = np.random.default_rng(0)
  sentences = []
  for n in list(range(2, 30)) * 2:
    heads = random_heads(n, rng)
    d = probe.tree_distances(heads)
    assert probe.min_spanning_tree(d) == probe.tree_edges(heads)
    sentences.append(probe.Sentence(tuple(map(str, range(n))), np.arange(n), heads, d))
  assert probe.uuas([s.distances for s in sentences], sentences) == 1.0
  # Reversed distances do not.
  assert probe.uuas([-s.distances for s in sentences], sentences) < 0.5


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
    s = probe.Sentence(tuple(map(str, range(n))), np.arange(n), heads, probe.tree_distances(heads))
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
  B, loss = probe.train_probes(h_train, train, rank=16, steps=400, batch_size=16,
                               learning_rate=0.01)
  scores, rhos = probe.evaluate(B, h_test, test)
  assert scores[0] > 0.9 and rhos[0] > 0.8, (scores, rhos, loss)
  noise_train, h_noise = synthetic(200, 1, encode=False)
  noise_test, h_noise_test = synthetic(40, 2, encode=False)
  B, _ = probe.train_probes(h_noise, noise_train, rank=16, steps=400, batch_size=16,
                            learning_rate=0.01)
  assert probe.evaluate(B, h_noise_test, noise_test)[0][0] < 0.5


def tiny_model(words):
  tokenizer = make_tokenizer("word", words=words)
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=2, n_heads=4,
                       n_kv_heads=2, compute_dtype=jnp.float32, init_std=0.3,
                       attention_impl="xla")
  return Decoder(config, rngs=nnx.Rngs(0)), tokenizer


def test_word_vectors_layers_and_side_hooks():
  sentences = [probe.sentence(tree(CAT)), probe.sentence(tree("(S Cats (VP chase mice) .)"))]
  model, tokenizer = tiny_model([w for s in sentences for w in s.words])
  h = probe.word_vectors(model, sentences, tokenizer.encode_word, tokenizer.bos_id, batch_size=2)
  assert h.shape == (3, 9, 16) and np.isfinite(h).all()
  # Layer 0 is the embedding of each (single-piece) word.
  table = np.asarray(model.embed_tokens.embedding[...])
  ids = [tokenizer.encode_word(w)[0] for w in ("the", "cat", "sat", "on", "the", "mat")]
  np.testing.assert_allclose(h[0, :6], table[ids], rtol=1e-6)
  # A side hook changes the states after block 1 onwards, not the embeddings.
  side = lambda layer, x_BTD: jnp.ones_like(x_BTD) * (layer + 1)
  h_side = probe.word_vectors(model, sentences, tokenizer.encode_word, tokenizer.bos_id,
                              batch_size=2, side=side)
  np.testing.assert_array_equal(h_side[0], h[0])
  assert np.abs(h_side[1:] - h[1:]).max() > 1e-3
  seen = []

  def side_for(batch: probe.ProbeBatch):
    seen.append((batch.tokens_BT.shape[0], len(batch.sentences),
                 batch.word_index_BT[0, :3].tolist()))
    return side
  h_for = probe.word_vectors(model, sentences, tokenizer.encode_word, tokenizer.bos_id,
                             batch_size=1, side_for=side_for, layers=[0, 2])
  assert len(seen) == 2 and all(rows == 1 and n == 1 for rows, n, _ in seen)
  assert seen[0][2] == [-1, 0, 1]  # BOS, then word 0, word 1
  np.testing.assert_allclose(h_for, h_side[[0, 2]], rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="layers"):
    probe.word_vectors(model, sentences, tokenizer.encode_word, layers=[3])


def test_cli_end_to_end_on_ptb_sample(tmp_path, monkeypatch, capsys):
  folder = require_shared("ptb_sample") / "combined"
  files = [str(folder / f"wsj_000{i}.mrg") for i in (1, 2, 3, 4)]
  words = [w for t in probe.read_trees(files) for w in t.leaves()]
  model, tokenizer = tiny_model(words)
  monkeypatch.setattr(probe, "_load", lambda args: (model, tokenizer.encode_word,
                                                    tokenizer.bos_id, "tiny"))
  out = tmp_path / "a"
  code = probe.main(["--workdir=unused", f"--train={files[0]},{files[1]}", f"--train={files[2]}",
                     f"--test={files[3]}", f"--out={out}", "--rank=8", "--steps=30",
                     "--max_train=8"])
  assert code == 0
  result = json.loads((out / probe.RESULTS_FILE).read_text())
  assert result["layers"] == [0, 1, 2] and len(result["uuas"]) == 3
  assert all(0 <= u <= 1 for u in result["uuas"]) and result["train_sentences"] == 8
  assert (out / probe.PLOT_FILE).stat().st_size > 1000
  printed = capsys.readouterr().out
  assert "probe step 30/30" in printed and "layer 2: UUAS" in printed
  # Several results on one plot.
  second = dict(result, label="other", uuas=[0.1, 0.2, 0.3])
  (tmp_path / "b.json").write_text(json.dumps(second))
  cmp = tmp_path / "cmp.png"
  assert probe.main(["plot", str(out / probe.RESULTS_FILE), str(tmp_path / "b.json"),
                     f"--out={cmp}"]) == 0
  assert cmp.stat().st_size > 1000


def test_cli_errors(tmp_path, capsys):
  assert probe.main(["--workdir=x", "--split=0.5", "--train=a", f"--out={tmp_path}"]) == 2
  assert "not both" in capsys.readouterr().err
  assert probe.main(["--workdir=x", f"--out={tmp_path}"]) == 2
  assert probe.main(["plot", str(tmp_path / "missing.json"), f"--out={tmp_path / 'x.png'}"]) == 2
  assert "no such file" in capsys.readouterr().err
  bad = tmp_path / "bad.json"
  bad.write_text(json.dumps({"uuas": [1]}))
  assert probe.main(["plot", str(bad), f"--out={tmp_path / 'x.png'}"]) == 2
  assert "not a probe result" in capsys.readouterr().err


# ---- the GTCA switch: backbone vs a run with the branch active, trees from the cache ----------
def _restored(model, tokenizer, tmp_path, alpha=1.0):
  """What `train.restore_run` returns, for a fresh branch (its kernels are random, so with α = 1
  it changes every layer's states; restoring real checkpoints is tested in test_gtca_train)."""
  from slm_jax.gtca import backbone as gbackbone
  from slm_jax.gtca import train
  from slm_jax.gtca.branch import Gtca, GtcaConfig
  from slm_jax.gtca.forward import split_models
  # the model itself stands for the trained decoder (no LoRA: one Decoder less to build); its
  # prompt tokenizer is the one a run has, so the probed ids are the cache builder's
  text_tokenizer, added = gbackbone.word_prompt_tokenizer(tokenizer)
  backbone = gbackbone.Backbone(model, text_tokenizer, (), tokenizer.pad_id, added, "tiny")
  gtca = Gtca(GtcaConfig.from_model(model.config), rngs=nnx.Rngs(1))
  graphdefs, params = split_models(model, gtca)
  settings = train.Settings(str(tmp_path / "workdir"), str(tmp_path / "run"))
  return settings, backbone, gtca, graphdefs, params, alpha


def _gtca_setup(tmp_path, monkeypatch, capsys):
  """PTB files, a tiny word model, its cache of every sentence, and `restore_run` / `load_run`
  patched to give them (what a finished run would restore)."""
  import types
  from slm_jax import cli
  from slm_jax.gtca import cache as gcache
  from slm_jax.gtca import train
  import slm_jax.train.loading as loading
  folder = require_shared("ptb_sample") / "combined"
  files = [str(folder / f"wsj_000{i}.mrg") for i in (1, 2, 3)]
  model, tokenizer = tiny_model([w for t in probe.read_trees(files) for w in t.leaves()])
  tokenizer.save(tmp_path / "workdir")
  restored = _restored(model, tokenizer, tmp_path)
  monkeypatch.setattr(train, "restore_run", lambda run, log: restored)
  monkeypatch.setattr(loading, "load_run", lambda path: types.SimpleNamespace(
      model=model, tokenizer=tokenizer))
  build = lambda out, paths: cli.run(gcache.main, [  # noqa: E731
      f"--ptb={','.join(paths)}", f"--workdir={tmp_path / 'workdir'}", "--bos", f"--out={out}"])
  args = [f"--gtca={tmp_path / 'run'}", f"--train={files[0]},{files[1]}", f"--test={files[2]}",
          "--rank=4", "--steps=5", "--max_train=4", "--max_test=2"]
  return files, build, args


def test_gtca_switch_reads_every_tree_first_and_names_a_miss(tmp_path, monkeypatch, capsys):
  files, build, args = _gtca_setup(tmp_path, monkeypatch, capsys)
  assert build(tmp_path / "one.sqlite", files[:1]) == 0
  capsys.readouterr()
  out = tmp_path / "probe"
  assert probe.main([f"--cache={tmp_path / 'one.sqlite'}", f"--out={out}", *args]) != 0
  assert "no span tree for example probe sentence" in capsys.readouterr().err
  assert not out.exists()  # nothing was probed: the trees are read first
  assert probe.main([f"--out={out}", *args]) == 2
  assert "--gtca needs --cache" in capsys.readouterr().err


@pytest.mark.slow  # ~30 s on 2 busy cores: two models' features and probes, each compiled
def test_gtca_switch_probes_backbone_and_branch_from_the_cache(tmp_path, monkeypatch, capsys):
  files, build, args = _gtca_setup(tmp_path, monkeypatch, capsys)
  cache = tmp_path / "ptb.sqlite"
  assert build(cache, files) == 0
  assert "errors 0" in capsys.readouterr().out
  out = tmp_path / "probe"
  assert probe.main([f"--cache={cache}", f"--out={out}", *args]) == 0
  base, gtca = (json.loads((out / name / probe.RESULTS_FILE).read_text())
                for name in ("backbone", "gtca"))
  assert (base["label"], gtca["label"]) == ("backbone", "GTCA") and gtca["side"] == "branch"
  assert gtca["alpha"] == 1.0 and base["layers"] == gtca["layers"] == [0, 1, 2]
  assert base["train_loss"][0] == pytest.approx(gtca["train_loss"][0])  # embeddings: no branch
  assert base["train_loss"][2] != pytest.approx(gtca["train_loss"][2])  # the branch was read
  assert (out / probe.PLOT_FILE).stat().st_size > 1000  # both curves in one figure
  assert "UUAS GTCA − backbone per layer" in capsys.readouterr().out


def test_plot_draws_a_shared_linear_baseline_once(tmp_path, monkeypatch):
  """Results on the same test sentences share one linear baseline: one grey legend entry, not
  one per curve; different baselines keep one per curve."""
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  figures = []
  monkeypatch.setattr(plt, "close", figures.append)
  result = {"layers": [0, 1], "uuas": [0.2, 0.3], "linear_baseline_uuas": 0.4}
  probe.plot([("a", result), ("b", dict(result, uuas=[0.2, 0.1]))], tmp_path / "same.png")
  probe.plot([("a", result), ("b", dict(result, linear_baseline_uuas=0.5))], tmp_path / "diff.png")
  same, diff = ([t.get_text() for t in f.axes[0].get_legend().get_texts()] for f in figures)
  assert same == ["a", "b", "linear baseline (each word → its right neighbour)"]
  assert diff == ["a", "a: linear baseline", "b", "b: linear baseline"]
