"""`python -m slm_jax.parser.train` end to end on a tiny treebank: training, checkpoint/resume,
export, summary; and the GUM split reader."""

from __future__ import annotations

import json

import pytest

from slm_jax import cli
from slm_jax.parser import corpus, train
from slm_jax.parser.api import load_parser
from slm_jax.parser.config import LOADER, named_config

TINY = named_config("tiny")

TREES = """(ROOT (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))
(S (NP the dog) (VP barked (PP at (NP the cat))) .)
(S (NP a bird) (VP sang))
(S (VP Go (ADVP home)) !)
(NP (NP dogs) and (NP cats))
(S (NP he) (VP saw (NP the bird) (PP in (NP trees))))
"""


@pytest.fixture()
def treebank(tmp_path):
  path = tmp_path / "tiny.ptb"
  path.write_text(TREES * 3)
  return path


def run(tmp_path, treebank, *extra):
  return cli.run(train.main, [f"--workdir={tmp_path / 'work'}", "--config=tiny",
                              f"--train={treebank}", f"--dev={treebank}", *extra])


@pytest.mark.slow  # about a minute on a loaded 2-core machine (compilation)
def test_train_resume_and_export(tmp_path, treebank, capsys):
  # A time limit far below one step: stops after the first step, checkpointed, exit 1.
  assert run(tmp_path, treebank, "--max_minutes=0.0001") == cli.EXIT_INCOMPLETE
  out = capsys.readouterr().out
  assert "minute limit" in out
  export = tmp_path / "export"
  assert run(tmp_path, treebank, "--max_epochs=2", f"--export={export}") == 0  # cache hit
  out = capsys.readouterr().out
  assert "resumed from step 1 (epoch 0, batch 1)" in out
  assert "loss" in out and "words/s" in out and "ETA" in out
  summary = json.loads((tmp_path / "work" / "summary.json").read_text())
  assert summary["stop"] == "reached 2 epochs"
  assert summary["data"]["train_sentences"] == 18
  # Only the first tree has a POS layer (3 copies); the skeletal ones are counted as untagged.
  assert summary["data"]["untagged_sentences"] == 15 and summary["data"]["pos_tags"] == 4
  assert "tag loss" in out
  assert [h["epoch"] for h in summary["history"]] == [0, 1]
  assert 0 <= summary["dev"]["f1"] <= 100
  parser = load_parser(export)
  tree = parser.parse([["the", "cat", "sat", "."]])[0]
  assert tree.leaves() == ["the", "cat", "sat", "."]
  assert (export / "train_log.txt").is_file() and (export / "summary.json").is_file()
  # Issue 32 case 8: the finished workdir is not continued on other data (nothing is written).
  other = tmp_path / "other.ptb"
  other.write_text(TREES * 2)
  before = (tmp_path / "work" / "train_log.txt").read_text()
  assert cli.run(train.main, [f"--workdir={tmp_path / 'work'}", "--config=tiny",
                              f"--train={other}", f"--dev={treebank}"]) == cli.EXIT_USAGE
  err = capsys.readouterr().err
  assert "holds another parser run (data.train:" in err and "data.train_sentences: 18" in err
  assert (tmp_path / "work" / "train_log.txt").read_text() == before


@pytest.mark.slow  # two tiny trainings (compilation)
def test_an_ensemble_trains_its_members_resumes_and_exports(tmp_path, treebank, capsys):
  export = tmp_path / "export"
  assert run(tmp_path, treebank, "--members=2", "--max_epochs=1", f"--export={export}") == 0
  out = capsys.readouterr().out
  assert "member 0 of 2: training" in out and "(seed 1)" in out
  work = tmp_path / "work"
  from safetensors.numpy import load_file
  a, b = (load_file(str(work / f"member{k}" / "best" / "model.safetensors")) for k in range(2))
  assert any(not (a[name] == b[name]).all() for name in a)
  summary = json.loads((work / "summary.json").read_text())
  assert summary["stop"] == "ensemble of 2 members" and len(summary["members"]) == 2
  assert 0 <= summary["dev"]["f1"] <= 100 and "empty_bias" in summary
  config = json.loads((export / "config.json").read_text())
  assert config["members"] == 2 and "empty_bias" in config
  for name in ("member0_train_log.txt", "member1_summary.json", "train_log.txt"):
    assert (export / name).is_file()
  assert load_parser(export).parse([["the", "cat", "sat", "."]])[0].leaves() == [
      "the", "cat", "sat", "."]
  # Run again: both members are finished, so nothing is trained; the ensemble is rebuilt.
  assert run(tmp_path, treebank, "--members=2", "--max_epochs=1") == 0
  out = capsys.readouterr().out
  assert out.count("finished earlier") == 2 and "loss" not in out.replace("tag loss", "")


def test_a_member_cut_by_the_time_limit_is_not_finished(tmp_path):
  meta = {"best_epoch": 0, "step": 3, "train_seconds": 1.0, "history": []}
  folder = tmp_path / "member0"
  (folder / "best").mkdir(parents=True)
  assert not train.member_finished(tmp_path / "absent")
  for resumable, finished in ((True, False), (False, True)):
    summary = train.run_summary({}, meta, "some reason", resumable=resumable)
    (folder / "summary.json").write_text(json.dumps(summary))
    assert train.member_finished(folder) is finished


def test_bad_flags_are_one_error_line(tmp_path, treebank, capsys):
  assert run(tmp_path, treebank, "--split=ptb") == cli.EXIT_USAGE
  assert "only named split is 'gum'" in capsys.readouterr().err
  assert cli.run(train.main, [f"--workdir={tmp_path}", "--config=huge"]) == cli.EXIT_USAGE
  assert "config file huge not found" in capsys.readouterr().err


def test_a_workdir_in_use_is_refused(tmp_path, treebank, capsys):
  work = tmp_path / "work"  # a trainer on another host holds it
  work.mkdir()
  (work / ".lock").write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": "T"}))
  assert run(tmp_path, treebank) == cli.EXIT_USAGE
  err = capsys.readouterr().err
  assert f"{work}: in use by pid 1 on elsewhere since T" in err and "delete" in err
  assert sorted(p.name for p in work.iterdir()) == [".lock"]  # nothing written


def test_configs_are_frozen():
  assert set(LOADER.names()) == {"tiny", "default", "gpu"}
  with pytest.raises(Exception):
    named_config("default").learning_rate = 1.0  # type: ignore[misc]


def test_gum_split_names_and_files(tmp_path):
  (tmp_path / "const").mkdir()
  (tmp_path / "splits.md").write_text("# Splits\n\n## dev\n\n  * GUM_a\n  * GUM_b\n\n"
                                      "## train\n\n  * GUM_c\n")
  (tmp_path / "const" / "GUM_a.ptb").write_text("(S a)\n")
  (tmp_path / "const" / "GUM_c.ptb").write_text("(S c)\n")
  assert corpus.gum_split_names((tmp_path / "splits.md").read_text()) == {
      "dev": ["GUM_a", "GUM_b"], "train": ["GUM_c"]}
  files, missing = corpus.gum_split_files("dev", tmp_path)
  assert [f.name for f in files] == ["GUM_a.ptb"] and missing == ["GUM_b"]
  with pytest.raises(ValueError, match="no documents listed under '## test'"):
    corpus.gum_split_files("test", tmp_path)
  with pytest.raises(ValueError, match="unknown GUM split"):
    corpus.gum_split_files("valid", tmp_path)


def test_real_gum_split_is_complete_apart_from_reddit():
  from tests.shared_data import require_shared
  gum = require_shared("gum")
  for split in ("train", "dev", "test"):
    files, missing = corpus.gum_split_files(split, gum)
    assert files and all(name.startswith("GUM_reddit_") for name in missing)


def test_pos_tags_come_from_the_raw_trees_preterminals(tmp_path, treebank):
  trees, tags = corpus.read_tagged_sentences([treebank])
  assert trees == corpus.read_sentences([treebank])  # the same normalized trees
  assert tags[0] == ["DT", "NN", "VBD", "."]
  assert tags[1:6] == [None] * 5  # skeletal trees: words under phrase labels, no POS layer
  # A tree whose POS layer does not cover every word has no tags either.
  mixed = tmp_path / "mixed.ptb"
  mixed.write_text("(S (NP (DT the) dog) (VP (VBD-X barked)))\n(S (NP-SBJ (PRP it)) (VP (VBZ is)))\n")
  assert corpus.read_tagged_sentences([mixed])[1] == [None, ["PRP", "VBZ"]]
  # Empty elements (-NONE-) are dropped by normalization, and their slots take no tag.
  traces = tmp_path / "traces.ptb"
  traces.write_text("(S (NP-SBJ (-NONE- *-1)) (VP (VBD left)) (. .))\n")
  assert corpus.read_tagged_sentences([traces])[1] == [["VBD", "."]]


def test_learning_rate_schedules():
  import dataclasses
  cosine = dataclasses.replace(TINY, schedule="cosine", max_epochs=2, warmup_steps=4)
  steps_per_epoch = 10
  lr = [train.learning_rate(cosine, {"step": s, "lr_scale": 1.0}, steps_per_epoch)
        for s in range(2 * steps_per_epoch)]
  peak = cosine.learning_rate
  assert lr[:4] == pytest.approx([peak * k / 4 for k in (1, 2, 3, 4)])  # warmup
  assert all(a >= b for a, b in zip(lr[3:], lr[4:]))  # then never rising
  end = train.learning_rate(cosine, {"step": 2 * steps_per_epoch, "lr_scale": 1.0}, steps_per_epoch)
  assert end == pytest.approx(peak * cosine.final_lr_fraction)
  plateau = dataclasses.replace(TINY, schedule="plateau", warmup_steps=1)
  assert train.learning_rate(plateau, {"step": 50, "lr_scale": 0.25}, 10) == pytest.approx(
      plateau.learning_rate * 0.25)
  with pytest.raises(ValueError, match="schedule='linear' is not one of plateau, cosine"):
    dataclasses.replace(TINY, schedule="linear")


def _tiny_parser(tag_weight: float = 1.0):
  """A tiny `TrainedParser` (with its POS head), two tagged sentences and their batch."""
  import numpy as np
  from flax import nnx

  from slm_jax.parser.labels import LabelVocab, binarize
  from slm_jax.parser.model import PosTagger, SpanScorer, TrainedParser
  from slm_jax.parser.vocab import Vocab
  from slm_jax.trees import Tree
  sentences = [["the", "cat", "sat"], ["a", "dog", "ran"]]
  tags = [np.array([1, 2, 3], np.int32), np.array([1, 2, 3], np.int32)]
  gold = [Tree("S", (Tree("NP", tuple(w[:2])), Tree("VP", (w[2],)))) for w in sentences]
  vocab, labels = Vocab.from_sentences(sentences, 1), LabelVocab.from_trees(gold)
  examples = [train.Example(w, binarize(t, labels, "right"), g)
              for w, t, g in zip(sentences, gold, tags)]
  rngs = nnx.Rngs(params=0, dropout=0)
  scorer = SpanScorer(TINY.model, len(vocab.words), len(vocab.chars), len(labels), rngs)
  model = TrainedParser(scorer, PosTagger(TINY.model, 4, rngs), tag_weight)
  batch = train.encode_batch(examples, 8, [0, 1], 2, vocab, TINY, None, np.random.default_rng(0))
  return model, batch


def test_the_pos_head_learns_and_is_not_saved():
  from flax import nnx

  from slm_jax.parser.weights import model_arrays
  graphdef, rest, state = train.parser_state(_tiny_parser()[0], TINY, 30)
  step = state.step_fn(hyperparams=lambda step: {"learning_rate": 0.02})
  run_state, batch = state.state, _tiny_parser()[1]
  first = None
  for k in range(30):
    run_state, out = step(run_state, batch, k)
    first = float(out["tag_loss"]) if first is None else first
  assert float(out["tag_loss"]) < 0.5 * first
  assert out["learning_rate"] == 0.02
  saved = model_arrays(nnx.merge(graphdef, run_state["params"], rest).scorer)
  assert saved and not any("tagger" in name for name in saved)


def test_the_shared_step_is_the_parsers_own_step():
  """`parser_state`'s step (the shared `make_train_step` over `TrainedParser.loss_sums`, the
  learning rate injected into optax) against the parser's step before it moved there, written
  out here as the oracle: clip → AdamW(1.0) → × lr, dropout reseeded with (seed, step). Equal
  bit for bit after three steps at three learning rates; a learning rate of 0 changes nothing."""
  import jax
  import numpy as np
  import optax
  from flax import nnx
  model, batch = _tiny_parser(tag_weight=0.5)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  tx = optax.chain(optax.clip_by_global_norm(TINY.clip_norm),
                   optax.adamw(1.0, weight_decay=TINY.weight_decay))

  @jax.jit
  def oracle(params, rest, opt_state, lr, key):
    net = nnx.merge(graphdef, params, rest)
    nnx.reseed(net, dropout=key)
    (_, sums), grads = nnx.value_and_grad(lambda m: m.loss_sums(batch), has_aux=True)(net)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, jax.tree.map(lambda u: lr * u, updates)), opt_state, sums

  _, _, state = train.parser_state(_tiny_parser(tag_weight=0.5)[0], TINY, 3)
  rates = [0.01, 0.0, 0.003]
  step = state.step_fn(hyperparams=lambda k: {"learning_rate": rates[k]})
  run_state, opt_state = state.state, tx.init(params)
  for k, lr in enumerate(rates):
    before = [np.asarray(a) for a in jax.tree.leaves(run_state["params"])]
    params, opt_state, want = oracle(params, rest, opt_state, lr,
                                     jax.random.fold_in(jax.random.key(TINY.seed), k))
    run_state, got = step(run_state, batch, k)
    assert got["learning_rate"] == lr
    assert float(got["loss_sum"]) == float(want["loss_sum"])
    after = [np.asarray(a) for a in jax.tree.leaves(run_state["params"])]
    for a, b in zip(jax.tree.leaves(params), after):
      np.testing.assert_array_equal(np.asarray(a), b)
    if lr == 0.0:
      assert all(np.array_equal(a, b) for a, b in zip(before, after))
    else:
      assert not all(np.array_equal(a, b) for a, b in zip(before, after))


def test_checkpoints_keep_the_layout_of_earlier_parser_runs():
  """A checkpoint holds (clipping, AdamW) as parser runs always saved it, so a workdir from
  before the shared step resumes; restoring puts AdamW's update count back into the injected
  state (the step's dropout key and the next update read it)."""
  import jax
  import optax
  from flax import nnx
  model, batch = _tiny_parser()
  _, params, _ = nnx.split(model, nnx.Param, ...)
  earlier = optax.chain(optax.clip_by_global_norm(TINY.clip_norm),
                        optax.adamw(1.0, weight_decay=TINY.weight_decay)).init(params)
  _, _, state = train.parser_state(_tiny_parser()[0], TINY, 3)
  run_state, _ = state.step_fn(hyperparams=lambda k: {"learning_rate": 0.01})(
      state.state, batch, 0)
  saved = train.saved_state(run_state)
  assert (jax.tree.structure(saved["opt_state"]) == jax.tree.structure(earlier))
  live = train.live_opt_state(state.state["opt_state"], saved["opt_state"])
  assert jax.tree.structure(live) == jax.tree.structure(run_state["opt_state"])
  assert int(optax.tree_utils.tree_get_all_with_path(live, "count")[0][1]) == 1
  # The restored state steps on (the step donates it: no buffer may appear twice in it).
  _, out = state.step_fn(hyperparams=lambda k: {"learning_rate": 0.01})(
      {"params": run_state["params"], "opt_state": live}, batch, 1)
  assert jax.numpy.isfinite(out["loss_sum"])


def test_a_workdir_holding_another_run_is_refused_naming_the_keys(tmp_path):
  """The parser workdir's identity.json (config + data) is compared before anything is written;
  the epoch and time budgets and the cadences may change."""
  data = train.ParserData([], [], [], [], {"train": "a.ptb", "dev": "d.ptb", "train_sentences": 3,
                                           "train_words": 9, "skipped_long": 0,
                                           "dev_sentences": 1})
  record = train.run_identity(TINY, data)
  (tmp_path / train.IDENTITY_FILE).write_text(json.dumps(record))
  import dataclasses
  train.check_run(tmp_path, train.run_identity(
      dataclasses.replace(TINY, max_epochs=9, max_minutes=1.0, log_every=5), data))
  with pytest.raises(cli.CliError, match=r"holds another parser run \(config.learning_rate: "
                     r"0.005 in the workdir, 0.1 now; config.model.hidden: 16 in the workdir, 8 "
                     r"now\)"):
    train.check_run(tmp_path, train.run_identity(dataclasses.replace(
        TINY, learning_rate=0.1, model=dataclasses.replace(TINY.model, hidden=8)), data))
  (tmp_path / train.IDENTITY_FILE).unlink()
  (tmp_path / "checkpoints").mkdir()
  with pytest.raises(cli.CliError, match="cannot tell which run it belongs to"):
    train.check_run(tmp_path, record)
