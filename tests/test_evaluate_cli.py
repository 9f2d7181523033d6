"""`python -m slm_jax.evaluate` end to end on two tiny runs trained here: all tasks, the bootstrap
between the models, and the three output files; beam proposals built per run (and refused up front
for many-to-one linearizations)."""

from __future__ import annotations

import json

import pytest

from tests.shared_data import require_shared
from tests.test_train import small_config
from slm_jax import evaluate
from slm_jax.train import trainer


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
      f"--syntaxgym-dir={syntaxgym}", "--sg-suites=number_src,center_embed", "--beam=4",
      "--fast-track=2", "--docppl-documents=2", "--bootstrap-resamples=200"])
  assert code == 0
  results = json.loads((out / "results.json").read_text())
  names = [m["name"] for m in results["models"]]
  assert names == ["Terminal", "Tree"]
  for model in results["models"]:
    assert 0 <= model["sg"]["score"] <= 100 and set(model["sg"]["suites"]) == {
        "number_src", "center_embed"}
    assert model["blimp"]["pairs"] == 67 and 0 <= model["blimp"]["overall"] <= 100
    assert model["docppl"]["ppl"] > 1 and model["docppl"]["documents"] == 2
  tree = results["models"][1]
  assert tree["docppl"]["proposals"] >= tree["docppl"]["sentences"] > 0
  assert tree["docppl"]["tokens"] == results["models"][0]["docppl"]["tokens"]  # same M
  assert tree["blimp"]["stats"]["proposal_source"]["fallback"] > 0  # real English: flat trees
  for task in ("sg", "blimp", "docppl"):
    boot = results["bootstrap"][task]
    assert boot["resamples"] == 200 and len(boot["pairs"]) == 1
    assert 0.0 <= boot["pairs"][0]["p"] <= 1.0
  tables = (out / "tables.md").read_text()
  assert "| Model | SG↑ | BLiMP↑ | Doc-PPL↓ |" in tables
  assert "| Terminal |" in tables and "| Tree |" in tables and "GrdnPath" in tables
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


def test_cli_refuses_beam_proposals_for_many_to_one_runs(tmp_path):
  workdir = tmp_path / "noont"
  workdir.mkdir()
  (workdir / "config.json").write_text(json.dumps({"configuration": {
      "name": "tree_noont", "linearization": "lin1_noont", "attention": "causal"}}))
  with pytest.raises(ValueError, match="tree_noont uses lin1_noont.*file of proposals"):
    evaluate.main([f"--workdir={workdir}", f"--out={tmp_path / 'out'}", "--tasks=blimp",
                   "--blimp-proposals=beam", f"--blimp-dir={tmp_path}"])
