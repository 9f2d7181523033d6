"""Pictures: `python -m slm_jax.plot` draws the loss by token kind, held-out perplexity and live
SG/BLiMP curves of several workdirs, and `python -m slm_jax.explain --format=png` draws a
configuration's attention mask, one panel per head group for hybrids."""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib import image

from slm_jax import configurations, explain, ptb, plot
from slm_jax.structure import dense_mask, row_metadata
from slm_jax.linearize import linearize

SENTENCE = "(S (NP Cats) (VP chase (NP mice)))"


def _workdir(tmp_path, name, records):
  workdir = tmp_path / name
  workdir.mkdir()
  (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  return workdir


def test_plot_draws_every_run_in_every_panel(tmp_path, capsys):
  tree = _workdir(tmp_path, "tree_tiny", [
      {"step": s, "loss": 5.0 - s, "loss_terminal": 6.0 - s, "loss_structural": 3.0 - s / 2,
       "lr": 0.01} for s in (1, 2, 3)] + [{"step": 3, "eval_terminal_ppl": 40.0,
                                           "eval_loss": 3.1},
                                          {"step": 2, "live_sg": 50.0, "live_blimp": 62.5}])
  terminal = _workdir(tmp_path, "terminal_tiny", [
      {"step": s, "loss": 4.0 - s, "loss_terminal": 4.0 - s} for s in (1, 2)] + [
          {"step": 2, "eval_terminal_ppl": 55.0, "eval_loss": None}])
  out = tmp_path / "curves.png"
  assert plot.main([f"--workdir={tree}", f"--workdir={terminal}", f"--out={out}"]) == 0
  assert "wrote" in capsys.readouterr().out
  assert image.imread(out).shape[:2] == (495, 1980)
  figure = plot.draw([("tree", plot.load_curves(tree)), ("terminal", plot.load_curves(terminal))],
                     tmp_path / "again.png")
  losses, held_out, syntax = figure.axes
  lines = {line.get_label(): line.get_xydata().tolist() for line in losses.lines}
  assert lines == {"tree: terminal": [[1, 5], [2, 4], [3, 3]],
                   "tree: structural": [[1, 2.5], [2, 2], [3, 1.5]],
                   "terminal: terminal": [[1, 3], [2, 2]]}
  assert [l.get_xydata().tolist() for l in held_out.lines] == [[[3, 40]], [[2, 55]]]
  assert {l.get_label(): l.get_xydata().tolist() for l in syntax.lines} == {
      "tree: SG": [[2, 50]], "tree: BLiMP": [[2, 62.5]]}


def test_two_runs_of_one_name_are_two_labels(tmp_path, capsys):
  """Issue #47 item 4: runs/a/tiny and runs/b/tiny were both "tiny" in the legend."""
  runs = []
  for folder in ("a", "b"):
    (tmp_path / folder).mkdir()
    runs.append(_workdir(tmp_path / folder, "tiny", [{"step": 1, "loss_terminal": 3.0}]))
  assert plot.main([f"--workdir={runs[0]}", f"--workdir={runs[1]}",
                    f"--out={tmp_path / 'c.png'}"]) == 0
  assert capsys.readouterr().out.strip().endswith(": a/tiny, b/tiny")


def test_plot_errors_name_the_workdir(tmp_path, capsys):
  assert plot.main([f"--workdir={tmp_path}", "--out=x.png"]) == 2
  assert f"error: {tmp_path}/metrics.jsonl: no such file" in capsys.readouterr().err
  (tmp_path / "metrics.jsonl").write_text('{"step": 1}\nnot json\n')
  assert plot.main([f"--workdir={tmp_path}", "--out=x.png"]) == 2
  assert "metrics.jsonl:2: not a metrics record" in capsys.readouterr().err


@pytest.mark.parametrize("name, panels", [("tgtree", 1), ("tgnomask_mix_tg", 2)])
def test_explain_png_draws_the_mask_of_each_head_group(name, panels, tmp_path, monkeypatch,
                                                       capsys):
  trees = tmp_path / "s.mrg"
  trees.write_text(SENTENCE + "\n")
  out = tmp_path / "mask.png"
  figures = []
  draw = explain.draw_masks
  monkeypatch.setattr(explain, "draw_masks", lambda *a: figures.append(draw(*a)))
  assert explain.main([f"--configuration={name}", "--format=png", f"--out={out}",
                       str(trees)]) == 0
  assert image.imread(out).ndim == 3 and "wrote" in capsys.readouterr().out
  (figure,) = figures
  assert len(figure.axes) == panels
  configuration = configurations.resolve(name, None, None)
  sequence = linearize(ptb.parse_trees(SENTENCE), configuration.linearization)
  want = dense_mask(row_metadata(sequence.kinds, np.ones(len(sequence), np.int32)),
                    configuration.attention)
  for axis, mask in zip(figure.axes, want):
    np.testing.assert_array_equal(axis.images[0].get_array(), mask.astype(float))
    assert [t.get_text() for t in axis.get_xticklabels()] == sequence.symbols()


def test_explain_png_needs_an_output(capsys):
  assert explain.main(["--configuration=tg", "--format=png", "--embedded=1"]) == 2
  assert "error: --format=png needs --out" in capsys.readouterr().err
