"""GTCA's real sets (CLOTH, MMLU, HellaSwag, WinoGrande, CoLA, BLiMP) from tiny files in their own
layouts (tests/gtca_fixtures.py): readers, bad input, and the real CLIs at tiny scale — the
parse cache builder, training, evaluation of a finished run (CoLA as MCC, BLiMP's pairs) and the
tables."""

from __future__ import annotations

import collections
import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from slm_jax import cli
from slm_jax.config_files import ConfigError
from slm_jax.data.rows import RowDataError
from slm_jax.downstream import tasks
from slm_jax.gtca import backbone as gbackbone
from slm_jax.gtca import cache as gcache
from slm_jax.gtca import ablations, evaluate, mcqa_data, metrics, probe, prompts, real_sets
from slm_jax.gtca import parse_cache, runs, spans, structural_probe, train
from slm_jax.gtca.branch import Gtca, GtcaConfig
from slm_jax.gtca.model import GtcaLM, params_of
from slm_jax.gtca.spans import chunk_batch
from slm_jax.hf.scoring import plain_rows
from slm_jax.model import Decoder, ModelConfig
from slm_jax.tokenizer import make_tokenizer
from tests.gtca_fixtures import BLIMP_PARADIGMS, write_blimp, write_gtca_fixtures

pytest.importorskip("tokenizers")

VOCAB = ("the a to on at so she went home was were is be closed shop early woke up . , Anna "
         "Brian Carla Dmitri Elena kettle bicycle market Monday carried painted borrowed "
         "cleaned dropped found lent ladder because painting fence").split()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  folder = tmp_path_factory.mktemp("gtca_sets")
  write_gtca_fixtures(folder)
  return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """A word-level backbone: its tokenizer saved as a workdir's, its model returned by a patched
  `load_run` (a trained workdir is the only thing the CLIs would read besides)."""
  tokenizer = make_tokenizer("word", words=VOCAB)
  workdir = tmp_path_factory.mktemp("workdir")
  tokenizer.save(workdir)
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                       mlp_ratio=2, attention_impl="xla")
  return workdir, Decoder(config, rngs=nnx.Rngs(0)), tokenizer


@pytest.fixture()
def patched(tiny, monkeypatch):
  workdir, model, tokenizer = tiny
  fake = lambda path, *a, **k: types.SimpleNamespace(model=model, tokenizer=tokenizer, step=0)  # noqa
  import slm_jax.train.loading as loading
  for module in (train, gbackbone, loading):
    monkeypatch.setattr(module, "load_run", fake)
  return workdir


def build_cache(capsys, root, workdir, name, out, *extra):
  code = cli.run(gcache.main, [f"--task={name}", f"--data_root={root}", f"--workdir={workdir}",
                               "--bos", "--parser=right_branching", f"--out={out}", *extra])
  stdout, stderr = capsys.readouterr()
  return code, stdout, stderr


# ---- readers --------------------------------------------------------------------------------
def test_cloth_question_layout_shuffles_options_deterministically(root):
  split = mcqa_data.load_set("cloth", root, "train")
  assert split.files == [root / "cloth" / "CLOTH_train_cleaned.json"]  # JSON lines
  assert mcqa_data.load_set("cloth", root, "test").counts["rows"] == 4  # a JSON array
  x = split.examples[0]
  assert x.question == "Anna ___ the kettle to the market on Monday ."
  assert x.options[x.answer] == "carried" and len(x.options) == 4
  assert len({e.answer for e in split.examples}) > 1  # the answer's place is drawn
  again = mcqa_data.load_set("cloth", root, "train")
  assert [e.options for e in again.examples] == [e.options for e in split.examples]
  assert mcqa_data.load_set("cloth", root, "validation").files[0].name == \
      "CLOTH_valid_cleaned.json"


def test_cloth_passage_becomes_one_example_per_blank(root):
  split = mcqa_data.load_set("cloth", root / "cloth_passages", "test")
  assert split.counts == {"rows": 4, "blanks": 12, "examples": 12, "unlabeled": 3}
  first, second, third = split.examples[:3]
  assert first.question.startswith("Anna woke up early . She ___ the kettle")
  assert "The shop _ closed" in first.question and first.question.endswith("went _ .")
  assert "She _ the kettle" in second.question and "The shop ___ closed" in second.question
  assert third.question.endswith("went ___ .") and third.options == ("home", "house", "away",
                                                                      "there")
  assert [x.source.rsplit(":", 2)[-2:] for x in split.examples[:3]] == [["0", "0"], ["0", "1"],
                                                                        ["0", "2"]]
  assert (first.answer, first.group) == (0, "middle")
  assert [x.answer for x in split.examples[-3:]] == [-1, -1, -1]  # a passage without answers
  assert len(split.labeled()) == 9
  assert len(mcqa_data.load_set("cloth", root / "cloth_passages", "test", limit=4).examples) == 4


def test_downstream_sets_are_converted_from_task_examples(root):
  for name in ("mmlu", "hellaswag", "winogrande"):
    spec = mcqa_data.SETS[name]
    for split in (spec.train_split, spec.eval_split):
      got = mcqa_data.load_set(name, root, split)
      want = tasks.load_split(name, root, split)
      assert [(x.question, x.options, x.answer, x.source, x.group) for x in got.examples] == [
          (x.question, x.options, x.answer, x.source, x.group) for x in want.examples]
      assert got.counts["rows"] == want.counts["rows"]
  mmlu = mcqa_data.load_set("mmlu", root)
  assert mmlu.examples[0].group == "astronomy" and len(mmlu.examples[0].options) == 4
  assert "shots" not in mmlu.examples[0].record() and "lead" not in mmlu.examples[0].record()
  # paper App. B: HellaSwag 10-shot, WinoGrande 5-shot evaluation, fixed demonstrations (the
  # first labeled training rows; the fixture has 4), counted; training questions are 0-shot
  for name, lead in (("hellaswag", prompts.HELLASWAG_LEAD), ("winogrande", "")):
    spec = mcqa_data.SETS[name]
    train_rows = [x for x in mcqa_data.load_set(name, root, spec.train_split).examples
                  if x.answer >= 0]
    evaluated = mcqa_data.load_set(name, root)
    want = min(spec.shots, len(train_rows))
    assert evaluated.counts["shots"] == want > 0
    record = evaluated.examples[0].record()
    assert record["shots"] == [{"question": x.question, "options": list(x.options),
                                "answer": x.answer} for x in train_rows[:want]]
    assert record.get("lead", "") == lead
    assert all(not x.shots for x in mcqa_data.load_set(name, root, spec.train_split).examples)
  assert (mcqa_data.SETS["hellaswag"].shots, mcqa_data.SETS["winogrande"].shots) == (10, 5)
  assert mcqa_data.load_set("hellaswag", root, "test").counts["unlabeled"] == 4  # the Hub's ""


def test_cola_reads_glue_parquet_and_counts_unlabeled_test_rows(root):
  validation = mcqa_data.load_set("cola", root)
  assert validation.split == "validation" and validation.counts["rows"] == 8
  assert [x.label for x in validation.examples[:2]] == [1, 0]
  assert validation.examples[0].record() == {"id": validation.examples[0].source,
                                             "sentence": "Anna carried the kettle home ."}
  test = mcqa_data.load_set("cola", root, "test")
  assert test.counts["unlabeled"] == 4 and test.labeled() == []
  assert "4 unlabeled (not used)" in test.summary()


def test_a_missing_split_names_every_pattern_tried(root):
  with pytest.raises(RowDataError, match=r"no 'dev' files of cola \(nyu-mll/glue.*looked for "
                                         r"cola/dev-\*\.parquet, cola/dev/\*\.parquet"):
    mcqa_data.load_set("cola", root, "dev")
  with pytest.raises(RowDataError, match=r"no 'validation' files of cloth.*looked for "
                                         r"CLOTH_valid_cleaned\.json, default/validation-"):
    mcqa_data.load_set("cloth", root / "cloth_passages", "validation")
  with pytest.raises(RowDataError, match=r"no 'train' files of mmlu.*all/train-\*\.parquet"):
    mcqa_data.load_set("mmlu", root, "train")
  with pytest.raises(RowDataError, match="unknown GTCA set 'squad'"):
    mcqa_data.load_set("squad", root)


def test_bad_rows_name_file_row_and_field(tmp_path):
  data = tmp_path / "data"
  data.mkdir()
  rows = [{"article": "One _ two _ .", "options": [["a", "b", "c", "d"]], "answers": ["A"]}]
  (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  with pytest.raises(RowDataError, match=r"test\.jsonl: row 1: field 'options': 1 option lists "
                                         "for 2 blanks"):
    mcqa_data.load_set("cloth", tmp_path)
  rows = [{"sentence": "No blank here .", "answer": "a", "distractors": ["b"]}]
  (data / "test.jsonl").write_text(json.dumps(rows[0]) + "\n")
  with pytest.raises(RowDataError, match=r"row 1: field 'sentence': expected one blank \[MASK\]"):
    mcqa_data.load_set("cloth", tmp_path)
  (tmp_path / "cola").mkdir()
  (tmp_path / "cola" / "validation.jsonl").write_text(json.dumps({"sentence": "s", "label": 3}))
  with pytest.raises(RowDataError, match="row 1: field 'label': expected 0, 1 or -1"):
    mcqa_data.load_set("cola", tmp_path)


# ---- CoLA's metric ---------------------------------------------------------------------------
def test_threshold_maximizes_mcc_on_the_fitting_scores():
  scores = np.array([-5.0, -4.0, -1.0, -0.5, -3.0])
  labels = np.array([0, 0, 1, 1, 1])
  threshold = real_sets.best_threshold(scores, labels)
  assert -4.0 < threshold < -3.0  # every acceptable sentence above, every other below
  assert metrics.matthews_corrcoef(labels, scores > threshold) == pytest.approx(1.0)
  assert real_sets.best_threshold(np.array([1.0, 1.0]), np.array([0, 1])) == 1.0


# ---- the parse cache CLI on every set ---------------------------------------------------------
def test_cache_cli_builds_every_set_from_its_hub_layout(root, tiny, tmp_path, capsys):
  workdir = tiny[0]
  for name, spec in mcqa_data.SETS.items():
    if name in mcqa_data.BLIMP_DERIVED:  # need ≥ 4 paradigms × 5 pairs: test_gtca_blimp_mcqa.py
      continue
    for split in filter(None, (spec.train_split, spec.eval_split)):  # BLiMP: no training split
      code, out, err = build_cache(capsys, root, workdir, name, tmp_path / f"{name}.sqlite",
                                   f"--split={split}")
      assert code == 0, err
      assert f"{name} {split}: " in out and "errors 0" in out, out
  with parse_cache.ParseCache(tmp_path / "cloth.sqlite", {}) as cache:
    assert cache.meta["parser"] == "right_branching" and len(cache) == 8  # test rows repeat train's
  # unlabeled rows are counted and reported, never cached silently
  code, out, _ = build_cache(capsys, root / "cloth_passages", workdir, "cloth",
                             tmp_path / "passages.sqlite")
  assert code == 0 and "cloth test: 4 rows, 12 examples, 3 unlabeled left out" in out
  assert "examples 9," in out
  code, out, err = build_cache(capsys, root, workdir, "mmlu", tmp_path / "x.sqlite",
                               "--split=dev_missing")
  assert code == 2 and "no 'dev_missing' files of mmlu" in err and "looked for" in err


def test_cache_cli_counts_truncation_and_empty_questions(root, tiny, tmp_path, capsys):
  workdir = tiny[0]
  code, out, _ = build_cache(capsys, root, workdir, "hellaswag", tmp_path / "h.sqlite",
                             "--max_len=12")
  assert code == 0 and "truncated 4" in out, out  # every prompt is longer than 12 tokens
  bad = tmp_path / "bad"
  bad.mkdir()
  rows = [{"question": "  ", "subject": "x", "choices": ["a", "b"], "answer": 0},
          {"question": "Which one ?", "subject": "x", "choices": ["a", "b"], "answer": 1}]
  (bad / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  code, out, err = build_cache(capsys, tmp_path / "bad", workdir, "mmlu", tmp_path / "m.sqlite")
  assert code == cli.EXIT_INCOMPLETE and "errors 1" in out
  assert "empty question" in err and "test.jsonl:0" in err


def test_a_workdir_backbone_truncates_to_its_seq_len_by_default(root, tiny, tmp_path, capsys,
                                                                 monkeypatch):
  """A workdir's data.seq_len is its context (the decoder has no position table): without
  --max_len the cache builder, and training through the cache, cut every too-long prompt from
  the left so prompt + answer letter ≤ seq_len, and count it; an explicit --max_len wins."""
  from slm_jax.train.run_config import build, validate  # pylint: disable=import-outside-toplevel
  from slm_jax.train import loading  # pylint: disable=import-outside-toplevel
  _, model, tokenizer = tiny
  workdir = tmp_path / "run"
  workdir.mkdir()
  tokenizer.save(workdir)
  config = build("terminal", "tiny")
  config.data.seq_len = 16
  (workdir / "config.json").write_text(validate(config).to_json())
  assert gbackbone.backbone_context(workdir) == 16
  assert gbackbone.backbone_context(tiny[0]) is None  # a tokenizer alone: no known context
  fake = lambda path, *a, **k: types.SimpleNamespace(  # noqa: E731
      model=model, tokenizer=tokenizer, cfg=loading.run_config(path)[0])
  monkeypatch.setattr(gbackbone, "load_run", fake)
  backbone = gbackbone.load_backbone(workdir, n_options=4)
  assert backbone.context == 16
  examples = mcqa_data.load_set("hellaswag", root).labeled()
  full = [len(prompts.PromptFormat(bos=True).prompt(x.record(), backbone.text_tokenizer))
          for x in examples]
  assert min(full) > 16  # every prompt is too long for the context
  for extra, limit in (((), 16), (("--max_len=12",), 12)):
    out = tmp_path / f"h{limit}.sqlite"
    code, stdout, _ = build_cache(capsys, root, workdir, "hellaswag", out, *extra)
    assert code == 0 and f"truncated {len(examples)}" in stdout, stdout
    cache, fmt = real_sets.open_cache(out, backbone.text_tokenizer)
    assert fmt.max_len == limit
    tally = collections.Counter()
    with cache:  # every row is a cache hit and fits
      rows = real_sets.encode_cached(examples, backbone, cache, fmt, counts=tally)
    assert tally["truncated"] == len(examples)
    for row, example in zip(rows, examples):
      uncut = prompts.PromptFormat(bos=True).prompt(example.record(), backbone.text_tokenizer)
      assert len(row.ids_T) == limit  # prompt + answer letter, not one more
      assert row.ids_T[:-1].tolist() == uncut.ids_T[-(limit - 1):].tolist()  # cut on the left
      assert row.ids_T[-1] == backbone.letter_ids[example.answer]
      assert row.tree.n_tokens == limit - 1
    assert real_sets.context_warning(fmt, backbone.context, out) is None
  # --max_len=0 (no limit) against a 16-token context: warned once, every long row counted
  out = tmp_path / "h0.sqlite"
  assert build_cache(capsys, root, workdir, "hellaswag", out, "--max_len=0")[0] == 0
  cache, fmt = real_sets.open_cache(out, backbone.text_tokenizer)
  warning = real_sets.context_warning(fmt, backbone.context, out)
  assert warning and "no row limit, above the backbone's context of 16 tokens" in warning
  tally = collections.Counter()
  with cache:
    rows = real_sets.encode_cached(examples, backbone, cache, fmt, counts=tally)
  assert tally["truncated"] == 0 and tally["over_context"] == len(examples)
  assert [len(r.ids_T) for r in rows] == [n + 1 for n in full]  # prompt + letter, uncut


def test_a_cache_of_another_prompt_tokenizer_is_refused_naming_the_fix(root, tiny, tmp_path,
                                                                      capsys):
  """A workdir's prompt tokenizer depends on its option letters: a CoLA cache built with the
  default 2 does not serve a run prepared with 4 (stale, refused before any lookup)."""
  workdir = tiny[0]
  assert build_cache(capsys, root, workdir, "cola", tmp_path / "cola.sqlite")[0] == 0
  two, four = (gbackbone.workdir_prompt_tokenizer(workdir, n) for n in (2, 4))
  cache, fmt = real_sets.open_cache(tmp_path / "cola.sqlite", two, 2)
  assert fmt.bos and cache.meta["parser"] == "right_branching"
  cache.close()
  with pytest.raises(parse_cache.StaleCacheError, match="built with tokenizer .*--options=4, the run's "
                                                   "option letters"):
    real_sets.open_cache(tmp_path / "cola.sqlite", four, 4)


def test_tree_sources_on_cached_trees(root, tiny, tmp_path, capsys):
  """gold = the cached tree; permuted = its leaves shuffled (same topology, options untouched);
  weak / random only from a cache of that parser."""
  workdir = tiny[0]
  assert build_cache(capsys, root, workdir, "cloth", tmp_path / "c.sqlite")[0] == 0
  text_tokenizer, added = gbackbone.word_prompt_tokenizer(tiny[2], 4)
  letters = tuple(int(text_tokenizer.encode(" " + x)[0][0]) for x in "ABCD")
  backbone = gbackbone.Backbone(None, text_tokenizer, letters, 0, added, "tiny")
  examples = mcqa_data.load_set("cloth", root).labeled()
  cache, fmt = real_sets.open_cache(tmp_path / "c.sqlite", text_tokenizer)
  with cache:
    gold = real_sets.encode_cached(examples, backbone, cache, fmt, "gold")
    permuted = real_sets.encode_cached(examples, backbone, cache, fmt, "permuted", seed=3)
    weak = real_sets.encode_cached(examples, backbone, cache, fmt, "right_branching")
    with pytest.raises(ValueError, match="weaker trained parser; .* holds 'right_branching'"):
      real_sets.encode_cached(examples, backbone, cache, fmt, "weak")  # not right-branching
    with pytest.raises(ValueError, match="--parser=random"):
      real_sets.encode_cached(examples, backbone, cache, fmt, "random")
  assert [e.tree for e in weak] == [e.tree for e in gold]
  assert any(p.tree != g.tree for p, g in zip(permuted, gold))
  for p, g in zip(permuted, gold):
    assert p.ids_T.tolist() == g.ids_T.tolist() and p.tree.masked == g.tree.masked
    assert sorted((n.end - n.start) for n in p.tree.nodes() if not n.children) == sorted(
        (n.end - n.start) for n in g.tree.nodes() if not n.children)
    assert p.ids_T[-1] == letters[p.answer] and p.letter_ids == letters


# ---- BLiMP -----------------------------------------------------------------------------------
def test_blimp_is_read_by_the_project_reader_as_pairs_of_two_sentences(root, tmp_path):
  from slm_jax.eval.blimp import load_blimp  # pylint: disable=import-outside-toplevel
  split = mcqa_data.load_set("blimp", root)  # the parent of blimp/ finds it too
  assert split.split == "all" and len(split.files) == 3
  assert split.counts == {"rows": 9, "examples": 9, "unlabeled": 0, "pairs": 9, "paradigms": 3}
  assert split.summary() == "blimp all: 9 pairs of 3 paradigms in 3 files"
  direct = load_blimp(root / "blimp")
  assert [p.uid for p in split.paradigms] == [p.uid for p in direct] == sorted(BLIMP_PARADIGMS)
  assert [(x.good, x.bad) for x in split.examples] == [
      pair for p in direct for pair in zip(p.good, p.bad)]
  first = split.examples[0]
  assert first.source == "adjunct_island:0" and split.labeled() == split.examples
  good, bad = first.sentences()
  assert (good.source, good.record()) == ("adjunct_island:0:good",
                                          {"id": "adjunct_island:0:good", "sentence": first.good})
  assert (bad.source, bad.sentence, bad.label) == ("adjunct_island:0:bad", first.bad, 0)
  assert mcqa_data.load_set("blimp", root / "blimp", limit=2).counts["pairs"] == 6  # per paradigm
  with pytest.raises(RowDataError, match="blimp has one split, 'all'.*not 'train'"):
    mcqa_data.load_set("blimp", root, "train")
  bad_folder = write_blimp(tmp_path / "bad")
  path = bad_folder / "adjunct_island.jsonl"
  path.write_text(path.read_text() + '{"sentence_good": "x", "UID": "adjunct_island"}\n')
  with pytest.raises(ValueError, match=r"adjunct_island\.jsonl:4: not a BLiMP record"):
    mcqa_data.load_set("blimp", bad_folder)
  with pytest.raises(FileNotFoundError, match="no BLiMP"):
    mcqa_data.load_set("blimp", tmp_path / "bad" / "none")
  with pytest.raises(ValueError, match="blimp is not a multiple-choice set.*--task=blimp"):
    real_sets.load_real("blimp", root, 4, 2, 4)


def test_cache_cli_builds_both_sentences_of_every_blimp_pair(root, tiny, tmp_path, capsys):
  workdir = tiny[0]
  code, out, err = build_cache(capsys, root / "blimp", workdir, "blimp", tmp_path / "b.sqlite")
  assert code == 0, err
  assert "blimp all: 3 paradigms, 9 pairs, 18 sentences (good and bad of every pair)" in out
  # adjunct_island's 3 good sentences are regular_plural…'s: counted, stored once
  assert ("examples 18, parsed 15, cached already 0, duplicates 3, truncated 0, errors 0"
          in out), out
  text_tokenizer = gbackbone.workdir_prompt_tokenizer(workdir, 2)
  cache, fmt = real_sets.open_cache(tmp_path / "b.sqlite", text_tokenizer, 2)
  with cache:
    assert len(cache) == 15 and cache.meta["parser"] == "right_branching" and fmt.bos
    for pair in mcqa_data.load_set("blimp", root).examples:
      for sentence in pair.sentences():
        prompt = fmt.prompt(sentence.record(), text_tokenizer)
        words = sentence.sentence.split()
        want = spans.span_tree(prompt, [ablations.right_branching(words)])
        assert cache.get(prompt.ids_T, sentence.source) == want
  code, out, _ = build_cache(capsys, root, workdir, "blimp", tmp_path / "blocks.sqlite",
                             "--block=4")  # a repeat in a later block is a duplicate too
  assert code == 0 and "parsed 15, cached already 0, duplicates 3," in out, out
  code, out, _ = build_cache(capsys, root, workdir, "blimp", tmp_path / "one.sqlite", "--limit=1",
                             "--max_len=5")
  assert code == 0 and "3 paradigms, 3 pairs, 6 sentences" in out, out
  # BOS + 4 words fit; determiner_noun_agreement_1's longer pair is cut from the left
  assert "examples 6, parsed 5, cached already 0, duplicates 1, truncated 2" in out, out
  code, _, err = build_cache(capsys, root, workdir, "blimp", tmp_path / "x.sqlite", "--split=test")
  assert code == cli.EXIT_USAGE and "blimp has one split, 'all'" in err
  bad = write_blimp(tmp_path / "bad")
  (bad / "determiner_noun_agreement_1.jsonl").write_text('{"sentence_good": "a"}\nnot json\n')
  code, _, err = build_cache(capsys, bad, workdir, "blimp", tmp_path / "x.sqlite")
  assert code == cli.EXIT_USAGE and "determiner_noun_agreement_1.jsonl:1: not a BLiMP" in err


@pytest.fixture(scope="module")
def branch_run(tiny) -> runs.RestoredRun:
  """What `runs.restore_run` returns for a finished GTCA run of the tiny backbone (α = 0.15): its
  branch's parameters drawn at random (scale 0.5), so that the branch moves every score."""
  _, model, tokenizer = tiny
  k = 8
  backbone = gbackbone.prepare_backbone(model, tokenizer, n_options=2)
  gtca = Gtca(GtcaConfig.from_model(backbone.decoder.config, k=k), rngs=nnx.Rngs(1))
  graphdef, params = params_of(GtcaLM(backbone.decoder, gtca))
  leaves, treedef = jax.tree.flatten(params["gtca"])
  keys = jax.random.split(jax.random.key(3), len(leaves))
  params["gtca"] = jax.tree.unflatten(treedef, [
      x + 0.5 * jax.random.normal(key, x.shape, x.dtype) for x, key in zip(leaves, keys)])
  settings = types.SimpleNamespace(k=k, n_options=2, name="gtca", seed=0)
  return runs.RestoredRun(settings, backbone, nnx.merge(graphdef, params), graphdef, params, 0.15)


def _direct_blimp(restored, root, cache_path) -> tuple[dict, np.ndarray]:
  """BLiMP's metrics computed without `real_sets`: every sentence (duplicates too) in one
  forward pass of the decoder + branch (`GtcaLM.logits`), summed log-probs after the first
  token, read off position by position, and the mean of per-paradigm accuracies."""
  settings, backbone, graphdef, params, alpha = (
      restored.settings, restored.backbone, restored.graphdef, restored.params, restored.alpha)
  n_layers = backbone.decoder.config.n_layers
  split = mcqa_data.load_set("blimp", root)
  sentences = [s for pair in split.examples for s in pair.sentences()]
  with parse_cache.ParseCache(cache_path, {}) as cache:
    fmt = prompts.PromptFormat.from_meta(cache.meta)
    ids = [fmt.prompt(s.record(), backbone.text_tokenizer).ids_T for s in sentences]
    trees = [cache.get(x) for x in ids]
  width = max(map(len, ids))
  tokens, meta = plain_rows(ids, width, len(ids))
  chunks = chunk_batch(trees, n_layers, width, settings.k)
  forward = jax.jit(lambda p, *x: nnx.merge(graphdef, p).logits(*x, alpha))
  logits = forward(params, tokens, meta, chunks)
  logp = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32)), np.float64)
  sums = [sum(logp[n, t - 1, x[t]] for t in range(1, len(x))) for n, x in enumerate(ids)]
  scores = np.asarray(sums).reshape(-1, 2)
  right = scores[:, 0] > scores[:, 1]
  per = collections.defaultdict(list)
  for pair, hit in zip(split.examples, right):
    per[split.paradigms[pair.paradigm].uid].append(hit)
  accuracy = {uid: 100 * np.mean(hits) for uid, hits in per.items()}
  fields = collections.defaultdict(list)
  for uid, acc in accuracy.items():
    fields[BLIMP_PARADIGMS[uid][0]].append(acc)
  metrics = {"blimp_real": np.mean(list(accuracy.values())),
             **{f"blimp_real_{f}": np.mean(v) for f, v in fields.items()}}
  return metrics, scores


def test_blimp_scores_of_a_run_equal_a_direct_computation(root, tiny, branch_run, tmp_path,
                                                          capsys):
  """score_run on BLiMP (the branch live at α = 0.15, trees from the cache) gives the accuracies
  an independent eager computation gives; α = 0 gives the backbone's, and they differ."""
  assert build_cache(capsys, root, tiny[0], "blimp", tmp_path / "b.sqlite")[0] == 0
  got = {}
  for alpha in (0.0, 0.15):
    restored = branch_run._replace(alpha=alpha)
    out = real_sets.score_run(restored, "blimp", root, tmp_path / "b.sqlite", log=lambda _: None)
    want, scores = _direct_blimp(restored, root, tmp_path / "b.sqlite")
    assert set(out["metrics"]) == set(want) == {"blimp_real", "blimp_real_morphology",
                                                 "blimp_real_syntax"}
    for name, value in want.items():
      assert out["metrics"][name] == pytest.approx(value), name
    assert out["counts"]["pairs"] == {"pairs": 9, "sentences": 18, "unique_sentences": 15,
                                      "ties": 0, "nonfinite_pairs": 0}
    assert out["counts"]["eval"]["paradigms"] == 3 and out["counts"]["truncated"] == 0
    paradigms = out["breakdown"]["paradigms"]
    assert sorted(paradigms) == sorted(BLIMP_PARADIGMS) and {
        v["pairs"] for v in paradigms.values()} == {3}
    got[alpha] = (out["metrics"], scores)
  assert np.abs(got[0.15][1] - got[0.0][1]).min() > 1e-3  # the branch moved every score
  assert (got[0.15][1][:, 0] > got[0.15][1][:, 1]).tolist() != (
      got[0.0][1][:, 0] > got[0.0][1][:, 1]).tolist()  # … and some verdicts: α is applied


def test_cola_by_the_prompted_judgment_equals_a_direct_computation(root, tmp_path, capsys):
  """CoLA (paper, reference): each sentence in the judgment prompt, acceptable iff the next
  token after `Answer:` is likelier "1" than "0"; MCC of those verdicts, the branch live. The
  direct computation reads the logits of one forward pass."""
  tokenizer = make_tokenizer("word", words=VOCAB + ["0", "1"])
  workdir = tmp_path / "digits"
  workdir.mkdir()
  tokenizer.save(workdir)
  config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                       mlp_ratio=2, attention_impl="xla")
  restored = branch_run.__wrapped__((workdir, Decoder(config, rngs=nnx.Rngs(0)), tokenizer))
  assert build_cache(capsys, root, workdir, "cola", tmp_path / "c.sqlite")[0] == 0
  out = real_sets.score_run(restored, "cola", root, tmp_path / "c.sqlite", log=lambda _: None)
  assert set(out["metrics"]) == {"cola", "cola_accuracy"}
  assert out["counts"]["cola_digit_form"] == "' d'"  # words split at spaces: " 1" is one token
  backbone, graphdef, params = restored.backbone, restored.graphdef, restored.params
  (zero, one), _ = gbackbone.digit_ids(backbone.text_tokenizer)
  examples = mcqa_data.load_set("cola", root).labeled()
  with parse_cache.ParseCache(tmp_path / "c.sqlite", {}) as cache:
    fmt = prompts.PromptFormat.from_meta(cache.meta)
    ids = [fmt.prompt(x.judged_record(), backbone.text_tokenizer).ids_T for x in examples]
    trees = [cache.get(x) for x in ids]
  assert all(spans.ANSWER in [c.label for c in t.root.children] for t in trees)
  width = max(map(len, ids))
  tokens, meta = plain_rows(ids, width, len(ids))
  chunks = chunk_batch(trees, 1, width, restored.settings.k)
  logits = np.asarray(nnx.merge(graphdef, params).logits(tokens, meta, chunks, 0.15))
  last = np.asarray([len(x) - 1 for x in ids])
  verdicts = logits[np.arange(len(ids)), last, one] > logits[np.arange(len(ids)), last, zero]
  labels = np.asarray([x.label for x in examples])
  assert out["metrics"]["cola"] == pytest.approx(100 * metrics.matthews_corrcoef(labels,
                                                                                  verdicts))
  assert out["metrics"]["cola_accuracy"] == pytest.approx(100 * np.mean(verdicts == labels))
  # the threshold variant scores the sentences alone (fitted on train), from the same cache
  assert build_cache(capsys, root, workdir, "cola", tmp_path / "c.sqlite", "--split=train")[0] == 0
  alone = real_sets.score_run(restored, "cola", root, tmp_path / "c.sqlite", cola="threshold",
                              log=lambda _: None)
  assert set(alone["metrics"]) == {"cola", "cola_threshold"}


def test_blimp_cache_miss_names_the_pair(root, tiny, branch_run, tmp_path, capsys):
  assert build_cache(capsys, root, tiny[0], "blimp", tmp_path / "b.sqlite", "--limit=1")[0] == 0
  restored = branch_run
  out = real_sets.score_run(restored, "blimp", root, tmp_path / "b.sqlite", limit=1,
                            log=lambda _: None)
  assert out["counts"]["pairs"]["pairs"] == 3
  with pytest.raises(parse_cache.CacheMissError, match=r"no span tree for example "
                                                  r"adjunct_island:1:good \(5 tokens"):
    real_sets.score_run(restored, "blimp", root, tmp_path / "b.sqlite", limit=2,
                        log=lambda _: None)


def test_evaluate_cli_adds_real_blimp_to_an_old_result_file(root, tiny, branch_run, tmp_path,
                                                            capsys, monkeypatch):
  """`--run --task=blimp` merges `blimp_real` (+ fields) into a result.json that has the toy's
  `blimp` (left as it was), writes eval_blimp.json, and the tables show both, labelled apart."""
  assert build_cache(capsys, root, tiny[0], "blimp", tmp_path / "b.sqlite")[0] == 0
  restored = branch_run
  monkeypatch.setattr(runs, "restore_run", lambda run, log: restored)
  run = tmp_path / "run"
  run.mkdir()
  (run / "result.json").write_text(json.dumps({"method": "gtca", "metrics": {"blimp": 61.0,
                                                                              "toy": 70.0}}))
  assert evaluate.main([f"--run={run}", "--task=blimp", f"--data_root={root / 'blimp'}",
                        f"--cache={tmp_path / 'b.sqlite'}"]) == 0
  result = json.loads((run / "result.json").read_text())
  want, _ = _direct_blimp(restored, root, tmp_path / "b.sqlite")
  assert result["metrics"]["blimp"] == 61.0 and result["metrics"]["toy"] == 70.0
  assert result["metrics"]["blimp_real"] == pytest.approx(want["blimp_real"])
  assert "blimp_real_syntax" in result["metrics"]
  assert result["eval_counts"]["blimp"]["pairs"]["pairs"] == 9
  saved = json.loads((run / "eval_blimp.json").read_text())
  assert set(saved["breakdown"]["paradigms"]) == set(BLIMP_PARADIGMS)
  assert "blimp_real " in capsys.readouterr().out
  assert evaluate.main([f"--runs={run}"]) == 0
  table = capsys.readouterr().out
  assert "| Method | Toy MCQA↑ | BLiMP(-style pairs)↑ | BLiMP (67 paradigms)↑ | n |" in table


# ---- training, evaluation and the tables through the CLIs -------------------------------------
def _train(out, root, cache, *extra):
  return train.main([f"--out={out}", f"--data_root={root}", f"--cache={cache}",
                     "--train_items=4", "--dev_items=2", "--test_items=0", *extra])


@pytest.mark.slow  # ~22 s: four decoders built and three scorers compiled on 2 cores
def test_train_evaluate_and_tables_on_real_sets(root, patched, tmp_path, capsys):
  """The backbone method (no training: the stages are tested in test_gtca_train.py) on
  WinoGrande, scored from the cache; then the run scored on CoLA (MCC) and BLiMP and
  tabulated."""
  workdir = patched
  for split in ("train", "validation"):
    assert build_cache(capsys, root, workdir, "winogrande", tmp_path / "wino.sqlite",
                       f"--split={split}", "--max_len=14")[0] == 0
  run = tmp_path / "run"
  assert _train(run, root, tmp_path / "wino.sqlite", f"--backbone={workdir}",
                "--task=winogrande", "--methods=backbone") == 0
  printed = capsys.readouterr().out
  assert "winogrande train: 3 examples used" in printed and "truncated from the left" in printed
  result = json.loads((run / "result.json").read_text())
  assert set(result["metrics"]) >= {"winogrande", "dev"}
  assert result["counts"]["test"]["used"] == 4 and result["counts"]["test"]["unlabeled"] == 0
  assert result["counts"]["train"]["truncated"] == 3  # every prompt cut to 14 tokens, counted
  assert result["settings"]["n_options"] == 2
  # CoLA: a cache with the run's prompt tokenizer (2 letters), the MCC added to result.json
  for split in ("train", "validation"):
    assert build_cache(capsys, root, workdir, "cola", tmp_path / "cola.sqlite",
                       f"--split={split}")[0] == 0
  with pytest.raises(ValueError, match="--cola=threshold"):  # no 0/1 words: no judgment
    evaluate.main([f"--run={run}", "--task=cola", f"--data_root={root}",
                   f"--cache={tmp_path / 'cola.sqlite'}"])
  assert evaluate.main([f"--run={run}", "--task=cola", f"--data_root={root}",
                        f"--cache={tmp_path / 'cola.sqlite'}", "--cola=threshold"]) == 0
  metrics = json.loads((run / "result.json").read_text())["metrics"]
  assert -100 <= metrics["cola"] <= 100 and "cola_threshold" in metrics
  saved = json.loads((run / "eval_cola.json").read_text())
  assert saved["counts"]["eval"]["rows"] == 8 and saved["counts"]["fit"]["rows"] == 12
  # BLiMP: the restored run's accuracy is the direct computation's
  assert build_cache(capsys, root, workdir, "blimp", tmp_path / "blimp.sqlite")[0] == 0
  assert evaluate.main([f"--run={run}", "--task=blimp", f"--data_root={root}",
                        f"--cache={tmp_path / 'blimp.sqlite'}"]) == 0
  metrics = json.loads((run / "result.json").read_text())["metrics"]
  want, _ = _direct_blimp(runs.restore_run(run, lambda _: None), root, tmp_path / "blimp.sqlite")
  assert metrics["blimp_real"] == pytest.approx(want["blimp_real"]) and "cola" in metrics
  capsys.readouterr()
  assert evaluate.main([f"--runs={run}"]) == 0
  table = capsys.readouterr().out
  assert "| Method | WinoGrande↑ | BLiMP (67 paradigms)↑ | CoLA (MCC)↑ | n |" in table
  assert "| Backbone |" in table
  # a cache built with another prompt tokenizer (4 letters) is refused, with the fix named
  assert build_cache(capsys, root, workdir, "cola", tmp_path / "cola4.sqlite",
                     "--options=4")[0] == 0
  with pytest.raises(parse_cache.StaleCacheError, match="--options=2, the run's option letters"):
    evaluate.main([f"--run={run}", "--task=cola", f"--data_root={root}",  # eval_cola.json exists
                   f"--cache={tmp_path / 'cola4.sqlite'}", "--force"])


def test_a_cache_miss_stops_training_naming_the_example(root, patched, tmp_path, capsys):
  workdir = patched
  # only the evaluation split is cached: the first training example misses
  assert build_cache(capsys, root, workdir, "winogrande", tmp_path / "w.sqlite")[0] == 0
  with pytest.raises(parse_cache.CacheMissError, match=r"no span tree for example .*winogrande_xl/"
                                                  r"train-00000-of-00001\.parquet:\d"):
    _train(tmp_path / "run", root, tmp_path / "w.sqlite", f"--backbone={workdir}",
           "--task=winogrande", "--methods=backbone")
  with pytest.raises(ConfigError, match="needs data_root"):  # the config loader says it
    train.main([f"--backbone={workdir}", f"--out={tmp_path}", "--task=mmlu"])
  with pytest.raises(ValueError, match="needs a cache built with --parser=random"):
    real_sets.check_tree_source(parse_cache.ParseCache(tmp_path / "w.sqlite", {}), "random")
  with pytest.raises(ValueError, match="cola is not a multiple-choice set"):
    real_sets.load_real("cola", root, 4, 2, 4)


def test_letters_must_cover_the_options(root, tiny):
  workdir, model, tokenizer = tiny
  two = gbackbone.prepare_backbone(model, tokenizer, n_options=2)
  examples = mcqa_data.load_set("mmlu", root).labeled()[:1]
  with pytest.raises(ValueError, match="4 options, the backbone was prepared with 2"):
    real_sets.encode_cached(examples, two, None, None, counts=collections.Counter())


@pytest.mark.slow  # ~80 s on 2 busy cores: a training stage, three scorers, two probes compiled
def test_a_trained_run_restores_for_evaluation_and_the_probe(root, patched, tmp_path, capsys):
  """Direct-Joint (LoRA + GTCA, one stage) trained on CLOTH through the CLI; re-scoring its own
  test split from the restored checkpoint gives the numbers training wrote, MMLU is scored by
  the same run, and the probe's GTCA switch restores it too."""
  from tests.shared_data import require_shared
  workdir = patched
  cache = tmp_path / "cloth.sqlite"
  for split in ("train", "test"):
    assert build_cache(capsys, root, workdir, "cloth", cache, f"--split={split}")[0] == 0
  run = tmp_path / "run"
  assert _train(run, root, cache, f"--backbone={workdir}", "--task=cloth",
                "--methods=direct_joint", "--stage_steps=1,1,1", "--batch_size=2") == 0
  trained = json.loads((run / "result.json").read_text())["metrics"]
  assert evaluate.main([f"--run={run}", "--task=cloth", f"--data_root={root}",
                        f"--cache={cache}"]) == 0
  again = json.loads((run / "eval_cloth.json").read_text())["metrics"]
  assert again["cloth"] == trained["cloth"]
  assert again["cloth_drift"] == pytest.approx(trained["drift"])
  mmlu = tmp_path / "mmlu.sqlite"
  assert build_cache(capsys, root, workdir, "mmlu", mmlu)[0] == 0
  assert evaluate.main([f"--run={run}", "--task=mmlu", f"--data_root={root}",
                        f"--cache={mmlu}"]) == 0
  assert "mmlu_astronomy" in json.loads((run / "result.json").read_text())["metrics"]
  files = [str(require_shared("ptb_sample") / "combined" / f"wsj_000{i}.mrg") for i in (1, 2)]
  ptb_cache = tmp_path / "ptb.sqlite"
  assert cli.run(gcache.main, [f"--ptb={','.join(files)}", f"--workdir={workdir}", "--bos",
                               "--options=4", f"--out={ptb_cache}"]) == 0
  out = tmp_path / "probe"
  assert probe.main([f"--gtca={run}", f"--cache={ptb_cache}", f"--train={files[0]}",
                     f"--test={files[1]}", f"--out={out}", "--rank=4", "--steps=3"]) == 0
  probed = json.loads((out / "gtca" / structural_probe.RESULTS_FILE).read_text())
  assert probed["method"] == "direct_joint"
  assert (out / structural_probe.PLOT_FILE).is_file()
