"""Training from a TFDS build of GUM (data.source=tfds) resumes exactly from its checkpoint."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("tensorflow_datasets", reason="the tfds extra is not installed")

from slm_jax.data.tfds_corpus import build_corpus  # noqa: E402
from slm_jax.train import trainer  # noqa: E402
from tests.shared_data import require_shared  # noqa: E402
from tests.test_train import losses, small_config  # noqa: E402


def test_training_from_tfds_resumes_exactly(tmp_path):
  files = sorted((require_shared("gum") / "const").glob("*.ptb"))[:12]
  build_corpus({"train": files}, tmp_path / "tfds", name="gum12", beam=False)
  streamed = {"data.source": "tfds", "data.tfds_name": "slm_corpus/gum12",
              "data.tfds_dir": str(tmp_path / "tfds"), "data.seq_len": 128,
              "train.checkpoint_every": 2}
  cfg = small_config("tg", steps=4, **streamed)
  workdir = tmp_path / "run"
  first = trainer.train(cfg, workdir)  # checkpoints 2 and 4
  curve = losses(workdir)
  assert first.resumed_from == 0 and len(curve) == 4  # a fresh start
  shutil.rmtree(workdir / "checkpoints" / "4")  # as if the run had died after step 2's
  again = trainer.train(cfg, workdir)
  assert again.resumed_from == 2  # the Grain state of the tfds source came back
  assert losses(workdir) == curve  # bitwise
  saved = (workdir / "config.json").read_text()
  assert '"tfds_name": "slm_corpus/gum12"' in saved


def test_source_tfds_needs_a_dataset_name():
  from slm_jax.train.run_config import ConfigError  # pylint: disable=g-import-not-at-top
  with pytest.raises(ConfigError, match="source=tfds needs data.tfds_name"):
    small_config("tg", steps=1, **{"data.source": "tfds"})
  assert small_config("tg", steps=1, **{"data.source": "tfds",
                                        "data.tfds_name": "slm_corpus/gum"}).data.paths == ()
