"""Our SG aggregation on Hu et al.'s released per-item verdicts (`../shared/data/syntaxgym/
reference_results`) reproduces the numbers their notebooks print, and gives the headline SG
(mean of the six circuits pooled over items) next to them.

Source values (cpllab/syntactic-generalization): `notebooks/final.ipynb` @ 03de5f9, GPT-2
(pretrained): SG score 0.784176 (the mean of the 31 suite accuracies) and circuit means of suite
accuracies Agreement 0.736842, Center Embedding 0.892857, Garden-Path Effects 0.880952, Gross
Syntactic State 0.891304, Licensing 0.657895; `notebooks/main.ipynb` @ 43f1f86, GPT-2 trained on
BLLIP-LG (GPT BPE): 0.750934 and 0.701754, 0.910714, 0.855159, 0.967391, 0.586842. The notebooks
print the first five circuits (a `head()`), so LDD is not compared.
"""

from __future__ import annotations

import pytest

from slm_jax.eval import sg_aggregate
from tests.shared_data import require_shared

SOURCE = {  # file -> (suite mean, {circuit: mean of its suites' accuracies})
    "syntaxgym_results_gpt-2-pretrained_.csv": (0.784176, {
        "Agreement": 0.736842, "Center Embedding": 0.892857, "Garden-Path Effects": 0.880952,
        "Gross Syntactic State": 0.891304, "Licensing": 0.657895}),
    "syntaxgym_results_gpt-2_bllip-lg-gptbpe.csv": (0.750934, {
        "Agreement": 0.701754, "Center Embedding": 0.910714, "Garden-Path Effects": 0.855159,
        "Gross Syntactic State": 0.967391, "Licensing": 0.586842}),
}


@pytest.mark.parametrize("name", sorted(SOURCE))
def test_reference_results_reproduce_the_source_and_give_the_headline(name):
  root = require_shared("syntaxgym")
  (model, verdicts), = sg_aggregate.read_reference_results(
      root / "reference_results" / name).items()
  tags = sg_aggregate.circuit_tags(root / "circuits.json")
  suites, label = sg_aggregate.select_suites(sorted(verdicts), "hu31")
  result = sg_aggregate.aggregate({s: verdicts[s] for s in suites}, tags, label)
  suite_mean, circuits = SOURCE[name]
  assert result["suite_count"] == 31 and result["suite_mean"] == pytest.approx(suite_mean,
                                                                                abs=1e-6)
  for circuit, value in circuits.items():
    assert result["circuits_by_suite"][circuit] == pytest.approx(value, abs=1e-6), circuit
  assert result["circuit_items"] == {
      "Licensing": 266, "Long-Distance Dependencies": 176, "Agreement": 57,
      "Garden-Path Effects": 152, "Gross Syntactic State": 92, "Center Embedding": 56}
  pooled = result["circuits"]
  assert result["sg"] == pytest.approx(sum(pooled.values()) / 6)
  # Where all suites of a circuit have the same size, pooling equals the mean of the suites.
  for circuit in ("Agreement", "Center Embedding", "Gross Syntactic State"):
    assert pooled[circuit] == pytest.approx(result["circuits_by_suite"][circuit])
  paper = sg_aggregate.aggregate(
      {s: verdicts[s] for s in sg_aggregate.select_suites(sorted(verdicts), "paper32")[0]}, tags)
  assert paper["circuit_items"]["Long-Distance Dependencies"] == 218  # Table 14's k/218
  print(f"{model}: headline SG {100 * result['sg']:.2f} (hu31), {100 * paper['sg']:.2f} "
        f"(paper32); suite mean {100 * result['suite_mean']:.2f} (source: {100 * suite_mean:.2f})")


def test_a_malformed_results_row_is_named(tmp_path):
  path = tmp_path / "r.csv"
  path.write_text("model,suite,item,correct\nm,number_src,0,True\nm,number_src,1,maybe\n")
  with pytest.raises(ValueError, match="r.csv:3"):
    sg_aggregate.read_reference_results(path)
