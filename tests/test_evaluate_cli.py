"""`python -m slm_jax.evaluate` end to end on two tiny runs trained here: all tasks, the bootstrap
between the models, and the three output files; beam proposals built per run (and refused up front
for many-to-one linearizations)."""

from __future__ import annotations

import json

import pytest

from tests.shared_data import require_shared
from tests.test_train import small_config
from slm_jax import evaluate
from slm_jax.evaluation import inputs, sources, summary
from slm_jax.train import trainer


SIX_CIRCUITS = ("number_src", "center_embed", "mvrr", "subordination", "npi_src_any", "cleft")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  out = {}
  for name in ("terminal", "tree"):
    workdir = tmp_path_factory.mktemp(name)
    trainer.train(small_config(name, steps=4, **{"train.checkpoint_every": 4}), workdir)
    out[name] = workdir
  return out


def test_cli_writes_results_tables_and_chart(runs, tmp_path):
  blimp = require_shared("blimp")
  syntaxgym = require_shared("syntaxgym")
  out = tmp_path / "report"
  code = evaluate.main([
      f"--workdir={runs['terminal']}", f"--workdir={runs['tree']}", "--tasks=sg,blimp,docppl",
      f"--out={out}", "--max-items=1", "--proposals=20", f"--blimp-dir={blimp}",
      f"--syntaxgym-dir={syntaxgym}", f"--sg-suites={','.join(SIX_CIRCUITS)}", "--beam=4",
      "--fast-track=2", "--docppl-documents=2", "--bootstrap-resamples=200",
      "--bootstrap-seed=2026"])
  assert code == 0
  results = json.loads((out / "results.json").read_text())
  names = [m["name"] for m in results["models"]]
  assert names == ["Terminal", "Tree"]
  for model in results["models"]:
    sg = model["sg"]
    assert set(sg["suites"]) == set(SIX_CIRCUITS) and model["dtype"] == "float32"
    assert sg["score"] == pytest.approx(sum(sg["circuits"].values()) / 6)  # the headline
    assert sg["suite_mean"] == pytest.approx(sum(sg["suites"].values()) / 6)
    assert sg["item_rule"] == "first prediction"
    assert model["blimp"]["pairs"] == 67 and 0 <= model["blimp"]["overall"] <= 100
    assert model["docppl"]["ppl"] > 1 and model["docppl"]["documents"] == 2
  tree = results["models"][1]
  assert tree["docppl"]["proposals"] >= tree["docppl"]["sentences"] > 0
  assert tree["docppl"]["tokens"] == results["models"][0]["docppl"]["tokens"]  # same M
  source = tree["blimp"]["stats"]["proposal_source"]  # auto: real English gets parser trees
  assert source["parser"] == 2 * 67 and source.get("flat", 0) == 0
  for task in ("sg", "blimp", "docppl", "sg_macro", "blimp_macro", "macro"):
    boot = results["bootstrap"][task]
    assert boot["resamples"] == 200 and len(boot["pairs"]) == 1 and boot["seed"] == 2026
    assert 0.0 <= boot["pairs"][0]["p"] <= 1.0
    assert sum(m["rank_first"] for m in boot["models"].values()) == pytest.approx(1.0)
  assert results["bootstrap"]["sg_macro"]["unit"] == "tasks"
  assert results["bootstrap"]["sg_macro"]["examples"] == 6
  assert results["bootstrap"]["blimp_macro"]["examples"] == 67
  for model in results["models"]:  # the SG bootstrap estimates the headline
    assert results["bootstrap"]["sg"]["models"][model["name"]]["estimate"] == pytest.approx(
        model["sg"]["score"])
  tables = (out / "tables.md").read_text()
  assert "| Model | SG↑ | BLiMP↑ | Doc-PPL↓ |" in tables
  assert "| Terminal |" in tables and "| Tree |" in tables and "GrdnPath" in tables
  assert "| Model | Agr↑ | CtrEmb↑ | GrdnPath↑ | GrsSyn↑ | Lic↑ | LDD↑ | SG↑ | Suite mean↑ |" in (
      tables)
  assert "| Model | BLiMP↑ | SG↑ |" in tables and "BLiMP by phenomenon" in tables
  assert "| SG circuits AVG† |" in tables and "Ranks first" in tables and "p=" in tables
  assert tables.count("_Conventions:") >= 6 and "sg_item_rule=first prediction" in tables
  assert "dtype=float32" in tables and "beam_cnt2=scored where a target" in tables
  assert "seed=2026" in tables and "blimp_sources: Tree: grammar 0, parser 134, flat 0" in tables
  assert (out / "sg_circuits.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_rejects_unknown_tasks(tmp_path):
  with pytest.raises(SystemExit):
    evaluate.parse_args(["--workdir=x", "--out=y", "--tasks=sg,xsum"])


def test_cli_beam_proposals(runs, tmp_path):
  from tests.test_blimp import write_blimp
  write_blimp(tmp_path / "blimp", {"p_a": [("Cats chase mice.", "Mice cats chase."),
                                            ("Dogs sleep.", "Sleep dogs.")]})
  ptb = tmp_path / "doc.mrg"  # one short document: doc-PPL over beam proposals
  ptb.write_text("(S (NP Cats) (VP chase (NP mice)) .)\n(S (NP Dogs) (VP sleep) .)\n")
  out = tmp_path / "report"
  code = evaluate.main([
      f"--workdir={runs['terminal']}", f"--workdir={runs['tree']}", "--tasks=blimp,docppl",
      f"--out={out}", "--proposals=3", f"--blimp-dir={tmp_path / 'blimp'}",
      "--blimp-proposals=beam", f"--docppl-ptb={ptb}", "--docppl-proposals=beam", "--beam=4",
      "--fast-track=2", "--bootstrap-resamples=20"])
  assert code == 0
  results = json.loads((out / "results.json").read_text())
  assert results["settings"]["blimp_proposals"] == "beam" and results["settings"]["beam"] == 4
  terminal, tree = results["models"]
  assert "proposal_source" not in terminal["blimp"]["stats"]  # terminal models need no trees
  source = tree["blimp"]["stats"]["proposal_source"]
  assert source["sentences"] == 4 == source["primary"] + source.get("fallback", 0)
  assert 4 <= tree["blimp"]["stats"]["proposals"] <= 4 * 3  # K = 3 per sentence
  doc_source = tree["docppl"]["proposal_source"]
  assert doc_source["sentences"] == tree["docppl"]["sentences"] == 2
  assert tree["docppl"]["proposals"] == doc_source.get("proposals", 0) + doc_source.get(
      "fallback", 0)
  assert tree["docppl"]["tokens"] == terminal["docppl"]["tokens"] and tree["docppl"]["ppl"] > 1


def test_cli_parser_proposals(runs, tmp_path):
  """`parser` proposals: K distinct CRF samples of the shipped parser per sentence, sampled in
  one batched call per task; a sentence too long for it falls back to a flat tree, counted."""
  from tests.test_blimp import write_blimp
  write_blimp(tmp_path / "blimp", {"p_a": [("Cats chase mice.", "Mice cats chase."),
                                            ("Dogs sleep.", "Sleep dogs.")]})
  ptb = tmp_path / "doc.mrg"
  ptb.write_text("(S (NP Cats) (VP chase (NP mice)) .)\n(S (NP Dogs) (VP sleep) .)\n")
  out = tmp_path / "report"
  code = evaluate.main([
      f"--workdir={runs['tree']}", "--tasks=blimp,docppl", f"--out={out}", "--proposals=4",
      f"--blimp_dir={tmp_path / 'blimp'}", "--blimp_proposals=parser", f"--docppl_ptb={ptb}",
      "--docppl_proposals=parser", "--bootstrap_resamples=20"])
  assert code == 0
  results = json.loads((out / "results.json").read_text())
  tree = results["models"][0]
  source = tree["blimp"]["stats"]["proposal_source"]
  assert source["primary"] == 4 and source.get("fallback", 0) == 0
  assert source["sampled"] == 4  # every sentence sampled once, in the prefetch
  assert 4 < tree["blimp"]["stats"]["proposals"] <= 4 * 4  # several distinct trees, K = 4
  assert tree["docppl"]["sentences"] == 2 and tree["docppl"]["ppl"] > 1
  assert results["settings"]["docppl_proposals"] == "parser"


def test_cli_refuses_a_parser_folder_that_is_not_one(runs, tmp_path):
  from slm_jax import cli
  args = evaluate.parse_args([f"--workdir={runs['tree']}", "--tasks=blimp", f"--out={tmp_path}",
                              f"--blimp_proposals=parser:{tmp_path / 'nope'}"])
  with pytest.raises(cli.CliError, match="not a parser folder"):
    inputs.check_inputs(args)


def test_cli_refuses_beam_proposals_for_many_to_one_runs(tmp_path):
  from slm_jax.train.run_config import build, validate
  workdir = tmp_path / "noont"
  workdir.mkdir()
  (workdir / "config.json").write_text(validate(build("tree_noont", "tiny")).to_json())
  with pytest.raises(ValueError, match="tree_noont uses lin1_noont.*file of proposals"):
    evaluate.main([f"--workdir={workdir}", f"--out={tmp_path / 'out'}", "--tasks=blimp",
                   "--blimp-proposals=beam", f"--blimp-dir={tmp_path}"])


def test_cli_flag_spellings(tmp_path):
  """The canonical underscore flags and the older dashed spellings parse the same."""
  common = ["--workdir=x", "--out=y"]
  dashed = evaluate.parse_args(common + ["--max-items=3", "--blimp-proposals=flat",
                                         "--fast-track=5", "--batch-size=4", "--sg-suites=a"])
  underscored = evaluate.parse_args(common + ["--max_items=3", "--blimp_proposals=flat",
                                              "--fast_track=5", "--batch_size=4",
                                              "--sg_suites=a"])
  assert dashed == underscored
  assert (dashed.run.max_items, dashed.syntactic.blimp_proposals,
          dashed.syntactic.fast_track) == (3, "flat", 5)


def test_cli_help_shows_the_paper_defaults(capsys):
  with pytest.raises(SystemExit):
    evaluate.parse_args(["--help"])
  text = " ".join(capsys.readouterr().out.split())
  for flag, default in (("--beam", "300"), ("--fast_track", "30"), ("--proposals", "300"),
                        ("--max_len_factor", "6"), ("--min_len", "10"), ("--sg_suites", "hu31"),
                        ("--dtype", "float32"), ("--bootstrap_seed", "2027"),
                        ("--beam_score_cnt2", "True"), ("--tree_scoring", "joint")):
    assert flag in text and f"(default: {default})" in text, flag
  args = evaluate.parse_args(["--workdir=x", "--out=y", "--beam_score_cnt2=false", "--beam=8",
                              "--sub_beam=16", "--max_len_factor=4", "--min_len=7"])
  assert sources.beam_options(args.syntactic) == dict(beam=16, word_beam=8, fast_track=30,
                                             max_len_factor=4.0, min_len=7, score_cnt2=False)
  assert "never scored" in summary.conventions(args)["beam_cnt2"]
  with pytest.raises(SystemExit):
    evaluate.parse_args(["--workdir=x", "--out=y", "--beam_score_cnt2=maybe"])


def test_runs_load_in_float32_by_default(tmp_path):
  """A bf16-trained run is evaluated in float32 (paper: FP32) unless asked otherwise."""
  from slm_jax.train.loading import load_run
  import jax.numpy as jnp
  workdir = tmp_path / "bf16"
  trainer.train(small_config("terminal", steps=2, **{"model.compute_dtype": "bfloat16",
                                                     "train.checkpoint_every": 2}), workdir)
  assert load_run(workdir).model.config.compute_dtype == jnp.float32
  assert load_run(workdir, dtype="bfloat16").model.config.compute_dtype == jnp.bfloat16
  own = load_run(workdir, dtype=None)
  assert own.model.config.compute_dtype == jnp.bfloat16 == own.cfg.model.compute_dtype
