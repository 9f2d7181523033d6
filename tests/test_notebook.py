"""notebooks/quickstart.ipynb runs end to end on CPU (nbclient, a real Jupyter kernel): install
check, training, the mask picture, SG/BLiMP on a few items, the curves; a failing cell fails the
test. Smaller than in Colab: 12 steps of a smaller model on a smaller corpus."""

from __future__ import annotations

import os
import pathlib

import pytest

nbclient = pytest.importorskip("nbclient", reason="tests need nbclient (requirements.txt)")
nbformat = pytest.importorskip("nbformat", reason="tests need nbformat (requirements.txt)")

from tests.shared_data import require_shared  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"
SMALL = ("--config.data.embedded_train_documents=200 --config.data.embedded_eval_documents=10 "
         "--config.data.seq_len=128 --config.model.d_model=64 --config.model.n_layers=1 "
         "--config.train.global_batch=8 --config.eval.batch_size=8")


def test_the_quickstart_notebook_runs_end_to_end(tmp_path, monkeypatch):
  require_shared("syntaxgym")
  require_shared("blimp")
  monkeypatch.setenv("QUICKSTART_STEPS", "12")
  monkeypatch.setenv("QUICKSTART_DIR", str(tmp_path / "run"))
  monkeypatch.setenv("QUICKSTART_OVERRIDES", SMALL)
  monkeypatch.setenv("QUICKSTART_EVAL_ITEMS", "1")
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT),
                                                                 os.environ.get("PYTHONPATH")])))
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                          resources={"metadata": {"path": str(ROOT)}}).execute()
  run = tmp_path / "run"
  assert (run / "tgtree_tiny" / "summary.json").is_file()
  assert (run / "eval" / "results.json").is_file() and (run / "eval" / "tables.md").is_file()
  images = [o for cell in notebook.cells for o in cell.get("outputs", [])
            if "image/png" in o.get("data", {})]
  assert len(images) == 2  # the mask and the curves, shown in the notebook
  assert (run / "mask.png").stat().st_size > 10_000 and (run / "curves.png").is_file()
