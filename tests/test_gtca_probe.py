"""`python -m slm_jax.gtca.probe`: the CLI end to end on a tiny Decoder, its errors, and the GTCA
switch (`slm_jax.gtca.probe_gtca`: backbone vs a run with the branch active, trees from the
parse cache)."""

from __future__ import annotations

import json

import pytest
from flax import nnx

from slm_jax.gtca import probe, probe_trees, structural_probe
from tests.shared_data import require_shared
from tests.test_gtca_structural_probe import tiny_model


def test_cli_end_to_end_on_ptb_sample(tmp_path, monkeypatch, capsys):
  folder = require_shared("ptb_sample") / "combined"
  files = [str(folder / f"wsj_000{i}.mrg") for i in (1, 2, 3, 4)]
  words = [w for t in probe_trees.read_trees(files) for w in t.leaves()]
  model, tokenizer = tiny_model(words)
  monkeypatch.setattr(probe, "_load", lambda args: (model, tokenizer.encode_word,
                                                    tokenizer.bos_id, "tiny"))
  out = tmp_path / "a"
  code = probe.main(["--workdir=unused", f"--train={files[0]},{files[1]}", f"--train={files[2]}",
                     f"--test={files[3]}", f"--out={out}", "--rank=8", "--steps=30",
                     "--max_train=8"])
  assert code == 0
  result = json.loads((out / structural_probe.RESULTS_FILE).read_text())
  assert result["layers"] == [0, 1, 2] and len(result["uuas"]) == 3
  assert all(0 <= u <= 1 for u in result["uuas"]) and result["train_sentences"] == 8
  assert (out / structural_probe.PLOT_FILE).stat().st_size > 1000
  printed = capsys.readouterr().out
  assert "probe step 30/30" in printed and "layer 2: UUAS" in printed
  # Several results on one plot.
  second = dict(result, label="other", uuas=[0.1, 0.2, 0.3])
  (tmp_path / "b.json").write_text(json.dumps(second))
  cmp = tmp_path / "cmp.png"
  assert probe.main(["plot", str(out / structural_probe.RESULTS_FILE), str(tmp_path / "b.json"),
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
  """What `runs.restore_run` returns, for a fresh branch (its kernels are random, so with α = 1
  it changes every layer's states; restoring real checkpoints is tested in test_gtca_train)."""
  from slm_jax.gtca import backbone as gbackbone
  from slm_jax.gtca import plans, runs
  from slm_jax.gtca.branch import Gtca, GtcaConfig
  from slm_jax.gtca.model import GtcaLM, params_of
  # the model itself stands for the trained decoder (no LoRA: one Decoder less to build); its
  # prompt tokenizer is the one a run has, so the probed ids are the cache builder's
  text_tokenizer, added = gbackbone.word_prompt_tokenizer(tokenizer)
  backbone = gbackbone.Backbone(model, text_tokenizer, (), tokenizer.pad_id, added, "tiny")
  gtca_model = GtcaLM(model, Gtca(GtcaConfig.from_model(model.config), rngs=nnx.Rngs(1)))
  graphdef, params = params_of(gtca_model)
  settings = plans.Settings(str(tmp_path / "workdir"), str(tmp_path / "run"))
  return runs.RestoredRun(settings, backbone, gtca_model, graphdef, params, alpha)


def _gtca_setup(tmp_path, monkeypatch, capsys):
  """PTB files, a tiny word model, its cache of every sentence, and `restore_run` / `load_run`
  patched to give them (what a finished run would restore)."""
  import types
  from slm_jax import cli
  from slm_jax.gtca import backbone as gbackbone
  from slm_jax.gtca import cache as gcache
  from slm_jax.gtca import probe_gtca
  folder = require_shared("ptb_sample") / "combined"
  files = [str(folder / f"wsj_000{i}.mrg") for i in (1, 2, 3)]
  model, tokenizer = tiny_model([w for t in probe_trees.read_trees(files) for w in t.leaves()])
  tokenizer.save(tmp_path / "workdir")
  restored = _restored(model, tokenizer, tmp_path)
  monkeypatch.setattr(probe_gtca, "restore_run", lambda run, log: restored)
  monkeypatch.setattr(gbackbone, "load_run", lambda path: types.SimpleNamespace(
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
  base, gtca = (json.loads((out / name / structural_probe.RESULTS_FILE).read_text())
                for name in ("backbone", "gtca"))
  assert (base["label"], gtca["label"]) == ("backbone", "GTCA") and gtca["side"] == "branch"
  assert gtca["alpha"] == 1.0 and base["layers"] == gtca["layers"] == [0, 1, 2]
  assert base["train_loss"][0] == pytest.approx(gtca["train_loss"][0])  # embeddings: no branch
  assert base["train_loss"][2] != pytest.approx(gtca["train_loss"][2])  # the branch was read
  assert (out / structural_probe.PLOT_FILE).stat().st_size > 1000  # both curves in one figure
  assert "UUAS GTCA − backbone per layer" in capsys.readouterr().out


def test_a_subword_backbone_finds_every_ptb_tree_the_cache_builder_stored(tmp_path):
  """#34: `gtca.probe --gtca` over a BPE backbone (SmolLM2's GGUF) stopped at its first sentence
  ("no span tree for example probe sentence …"): it keyed the cache on word-by-word pieces
  ("There" without its space), the cache builder on the text tokenized whole. The probe's
  sentence encoder is the builder's encoding, and each token's word is the one holding it."""
  import numpy as np
  from slm_jax.gtca import cache_builder, cache_records, parse_cache, probe_gtca, prompts
  from tests.test_gtca_spans import tiny_tokenizer
  folder = require_shared("ptb_sample") / "combined"
  files = [str(folder / "wsj_0001.mrg"), str(folder / "wsj_0003.mrg")]
  tok = prompts.TextTokenizer(tiny_tokenizer(), bos_id=0, name="tiny")
  encode_sentence = probe_gtca.sentence_encoder(tok)
  sentences = probe_trees.sentences_from_trees(probe_trees.read_trees(files),
                                               probe.PUNCT_WORDS)
  identity = {"tokenizer": tok.identity, "parser": "given"}
  with parse_cache.ParseCache(tmp_path / "c.sqlite", identity, writable=True) as cache:
    report = cache_builder.build_cache(cache_records.ptb_records(files), tok, cache,
                                       prompts.PromptFormat(bos=True), None)
    assert report.errors == 0, report.messages
    trees = probe_gtca.cached_trees(cache, sentences, encode_sentence)
  assert len(trees) == len({s.words for s in sentences}) > 10
  for s in sentences[:8]:
    ids_T, word_T = encode_sentence(s)
    assert ids_T[0] == 0 and word_T[0] == -1 and trees[s.words].n_tokens == len(ids_T)
    text = " ".join(s.words)
    assert np.array_equal(np.unique(word_T[1:]), np.arange(len(s.words)))  # every word, in order
    assert (np.diff(word_T[1:]) >= 0).all()
    pieces = [tok.tokenizer.decode([int(i)]) for i in ids_T[1:]]
    for w, word in enumerate(s.words):  # a word's tokens spell it (leading space aside)
      assert "".join(p for p, at in zip(pieces, word_T[1:]) if at == w).strip() == word, text
