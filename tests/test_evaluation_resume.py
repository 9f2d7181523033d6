"""What a killed evaluation keeps, and never for another model (issue #47 items 1, 4, 6, 7):
finished BLiMP paradigms and finished checkpoints of a multi-checkpoint run are reused, with a
progress line; another model put at the same path (told by its content digest) is never reused;
two checkpoints of one file name are two models everywhere; a corrupt checkpoint fails the
command before anything is scored. On tiny GGUF files (`tests/gguf_fixtures.py`)."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from slm_jax import cli, evaluate  # noqa: E402
from slm_jax.eval import sg_partial  # noqa: E402
from slm_jax.evaluation import run as evaluation_run  # noqa: E402
from tests.gguf_fixtures import byte_level_vocab, write_model  # noqa: E402
from tests.test_hf_import import make_hf_model  # noqa: E402
from tests.test_syntaxgym import ITEMS, PREDICTIONS, write_suite  # noqa: E402

GOOD = ["The cat sat on the mat.", "A dog ran.", "The mice chase the cat.", "Cats meow."]
BAD = ["The cat sat the on mat.", "A ran dog.", "The mice chases the cat.", "Cats meows."]
SUITES = ["number_toy", "npi_toy", "reflexive_toy"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """(two GGUF models of one vocabulary (seeds 0 and 1), BLiMP folder, SyntaxGym folder)."""
  root = tmp_path_factory.mktemp("resume")
  vocab = byte_level_vocab()
  models = []
  for seed in (0, 1):
    model = make_hf_model("qwen2", seed=seed, vocab_size=len(vocab["tokens"]),
                          tie_word_embeddings=True)
    models.append(root / f"seed{seed}.gguf")
    write_model(models[-1], "qwen2", model, {}, tokenizer=vocab)
  blimp = root / "blimp"
  blimp.mkdir()
  for p in range(3):
    (blimp / f"p{p}.jsonl").write_text("".join(
        json.dumps({"sentence_good": g, "sentence_bad": b, "UID": f"p{p}", "field": "syntax",
                    "linguistics_term": "t", "pairID": str(i)}) + "\n"
        for i, (g, b) in enumerate(zip(GOOD[p:p + 2], BAD[p:p + 2]))))
  for i, name in enumerate(SUITES):
    write_suite(root / "sg", name, ITEMS[i % 2:], PREDICTIONS)
  return models, blimp, root / "sg"


class Killed(Exception):
  """The evaluation killed (raised from a kept unit)."""


def kill_after(monkeypatch, task: str, units: int, path=None) -> None:
  """Raise `Killed` once `units` units of `task` were kept (of the model at `path`, if given)."""
  kind = sg_partial.SuitesInFlight if task == "sg" else sg_partial.InFlight
  real = kind.keep

  def keep(self, name, result):
    real(self, name, result)
    if task == "blimp" and getattr(self, "record_key", "") != "blimp_in_flight":
      return
    mine = path is None or self.key["model"]["path"] == str(path.resolve())
    if mine and len(self.done) == units:
      raise Killed

  monkeypatch.setattr(kind, "keep", keep)


def flags(out, blimp, sg=None, tasks="blimp"):
  return [f"--tasks={tasks}", f"--blimp_dir={blimp}", f"--out={out}", "--bootstrap_resamples=10",
          *([f"--syntaxgym_dir={sg}", f"--sg_suites={','.join(SUITES)}"] if sg else [])]


def test_a_killed_blimp_keeps_its_finished_paradigms(data, tmp_path, monkeypatch, capsys):
  (model, _), blimp, _ = data
  whole = tmp_path / "whole"
  assert evaluate.main([f"--checkpoint={model}", *flags(whole, blimp)]) == 0
  out = tmp_path / "out"
  with monkeypatch.context() as patch:
    kill_after(patch, "blimp", 2)
    with pytest.raises(Killed):
      evaluate.main([f"--checkpoint={model}", *flags(out, blimp)])
  capsys.readouterr()
  assert evaluate.main([f"--checkpoint={model}", *flags(out, blimp)]) == 0
  err = capsys.readouterr().err
  assert "2 finished BLiMP paradigms reused" in err and "blimp: 3/3 paradigms" in err
  first, again = (json.loads((o / "results.json").read_text())["models"][0]["blimp"]
                  for o in (whole, out))
  assert again["paradigms"] == first["paradigms"] and again["overall"] == first["overall"]


def test_another_model_at_the_same_path_is_never_reused(data, tmp_path, monkeypatch, capsys):
  (first, second), blimp, sg = data
  path = tmp_path / "models" / "model.gguf"
  path.parent.mkdir()
  shutil.copy(first, path)
  out = tmp_path / "out"
  with monkeypatch.context() as patch:
    kill_after(patch, "sg", 2)  # two of three SG suites of the first model finished
    with pytest.raises(Killed):
      evaluate.main([f"--checkpoint={path}", *flags(out, blimp, sg, "sg,blimp")])
  shutil.copy(second, path)  # another model put at the same path
  capsys.readouterr()
  assert evaluate.main([f"--checkpoint={path}", *flags(out, blimp, sg, "sg,blimp")]) == 0
  err = capsys.readouterr().err
  assert "2 saved SG suites not reused (model.digest:" in err
  (entry,) = json.loads((out / "results.json").read_text())["models"]
  assert entry["sg"]["counts"]["reused_suites"] == 0  # was 2: the first model's suites
  fresh = tmp_path / "fresh"
  assert evaluate.main([f"--checkpoint={second}", *flags(fresh, blimp, sg, "sg,blimp")]) == 0
  (want,) = json.loads((fresh / "results.json").read_text())["models"]
  assert entry["sg"]["suites"] == want["sg"]["suites"]
  assert entry["identity"]["digest"] == want["identity"]["digest"]


def test_two_checkpoints_of_one_name_are_two_models_and_a_finished_one_is_kept(
    data, tmp_path, monkeypatch, capsys):
  (first, second), blimp, _ = data
  paths = [tmp_path / folder / "model.gguf" for folder in ("a", "b")]
  for source, path in zip((first, second), paths):
    path.parent.mkdir()
    shutil.copy(source, path)
  args = [f"--checkpoint={p}" for p in paths] + flags(tmp_path / "out", blimp)
  loaded = []
  real = evaluation_run.load_checkpoint_run
  monkeypatch.setattr(evaluation_run, "load_checkpoint_run",
                      lambda path, **kw: loaded.append(str(path)) or real(path, **kw))
  with monkeypatch.context() as patch:
    kill_after(patch, "blimp", 1, paths[1])  # killed in the second checkpoint
    with pytest.raises(Killed):
      evaluate.main(args)
  assert loaded == [str(p) for p in paths]
  capsys.readouterr()
  assert evaluate.main(args) == 0
  assert loaded[2:] == [str(paths[1])]  # the first checkpoint was not loaded again
  assert f"{paths[0]}: step 0 finished before" in capsys.readouterr().err
  results = json.loads((tmp_path / "out" / "results.json").read_text())
  names = [m["name"] for m in results["models"]]
  assert names == ["a/model.gguf", "b/model.gguf"]
  assert sorted(results["bootstrap"]["blimp"]["models"]) == sorted(names)
  assert "_arrays" not in results["models"][0]


def test_a_corrupt_checkpoint_fails_before_anything_is_scored(data, tmp_path, monkeypatch):
  (model, _), blimp, _ = data
  corrupt = tmp_path / "corrupt.gguf"
  corrupt.write_bytes(model.read_bytes()[:3000])  # cut inside its metadata
  monkeypatch.setattr(evaluation_run, "evaluate_run",
                      lambda *a, **k: pytest.fail("a run was scored before the check"))
  with pytest.raises(cli.CliError, match=rf"--checkpoint={corrupt}: .*not a readable GGUF"):
    evaluate.main([f"--checkpoint={model}", f"--checkpoint={corrupt}",
                   *flags(tmp_path / "out", blimp)])
  assert not (tmp_path / "out").exists()
