"""Parser ensembles (`parser.ensemble.combine`, `model.Ensemble`): the members' mean span scores,
saved as one ordinary parser folder (float16 or float32), and clear errors for members that do
not fit or a config whose `members` is wrong."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from flax import nnx

from slm_jax.parser import api, ensemble
from slm_jax.parser.config import named_config
from slm_jax.parser.labels import LabelVocab
from slm_jax.parser.model import Ensemble, SpanScorer
from slm_jax.parser.vocab import Vocab
from slm_jax.parser.weights import ParserFileError, save_parser

WORDS = ["the", "cat", "sat", "on", "a", "mat", "."]
CFG = dataclasses.replace(named_config("tiny").model, max_words=12)
LABELS = LabelVocab(("∅", "NP", "VP", "S", "PP", "S+VP"))


def _member(folder, seed: int, words=WORDS):
  vocab = Vocab.from_sentences([words], min_count=1)
  model = SpanScorer(CFG, len(vocab.words), len(vocab.chars), len(LABELS), nnx.Rngs(seed))
  return save_parser(folder, model, vocab, LABELS, {"dev_f1": 50.0 + seed})


@pytest.fixture(scope="module")
def members(tmp_path_factory):
  root = tmp_path_factory.mktemp("members")
  return [_member(root / f"m{k}", seed=k + 1) for k in range(2)]


def _scores(parser: api.Parser, sentence):
  arrays = parser._encode([sentence], 8, 1)  # pylint: disable=protected-access
  return np.asarray(api._score(parser.model, *arrays))  # pylint: disable=protected-access


def test_the_ensemble_scores_the_members_mean(members, tmp_path):
  out = ensemble.combine(members, tmp_path / "ens", dtype="float32")
  config = json.loads((out / "config.json").read_text())
  assert config["members"] == 2 and config["member_dev_f1"] == [51.0, 52.0]
  parser = api.load_parser(out)
  assert isinstance(parser.model, Ensemble) and len(parser.model.members) == 2
  singles = [api.load_parser(m) for m in members]
  sentence = WORDS[:5]
  mean = (_scores(singles[0], sentence) + _scores(singles[1], sentence)) / 2
  np.testing.assert_allclose(_scores(parser, sentence), mean, rtol=1e-5, atol=1e-5)
  assert not np.allclose(_scores(singles[0], sentence), _scores(singles[1], sentence))
  tree = parser.parse([sentence])[0]
  assert tree.leaves() == sentence
  proposals = parser.proposals(sentence, k=6)
  assert 1 <= len(proposals) <= 6 and len(set(proposals)) == len(proposals)


def test_float16_halves_the_file_and_keeps_the_scores(members, tmp_path):
  full = ensemble.combine(members, tmp_path / "f32", dtype="float32")
  half = ensemble.combine(members, tmp_path / "f16")  # the default
  size_full = (full / "model.safetensors").stat().st_size
  size_half = (half / "model.safetensors").stat().st_size
  assert 0.45 < size_half / size_full < 0.55
  from safetensors.numpy import load_file
  assert {a.dtype for a in load_file(str(half / "model.safetensors")).values()} == {np.dtype(np.float16)}
  a = _scores(api.load_parser(full), WORDS)
  b = _scores(api.load_parser(half), WORDS)
  assert np.abs(a - b).max() < 1e-2 * max(1.0, np.abs(a).max())


def test_members_that_do_not_fit_are_refused(members, tmp_path):
  other = _member(tmp_path / "other_vocab", seed=5, words=["dogs", "bark"])
  with pytest.raises(ParserFileError, match=r"other_vocab: has another vocabulary"):
    ensemble.combine([members[0], other], tmp_path / "bad")
  nested = ensemble.combine(members, tmp_path / "nested")
  with pytest.raises(ParserFileError, match=r"nested: is itself an ensemble"):
    ensemble.combine([members[0], nested], tmp_path / "bad")
  with pytest.raises(ValueError, match="at least 2 member folders"):
    ensemble.combine(members[:1], tmp_path / "bad")
  with pytest.raises(ValueError, match="share one ParserModelConfig"):
    vocab = Vocab.from_sentences([WORDS], min_count=1)
    Ensemble([SpanScorer(cfg, len(vocab.words), len(vocab.chars), len(LABELS), nnx.Rngs(0))
              for cfg in (CFG, dataclasses.replace(CFG, hidden=8))])


@pytest.mark.parametrize("members_value, message", [
    (1, "members must be an integer ≥ 2, got 1"),
    ("two", "members must be an integer ≥ 2, got 'two'"),
    (3, "weights do not fit config.json .*missing: members/2/"),
])
def test_a_wrong_members_field_names_the_file(members, tmp_path, members_value, message):
  out = ensemble.combine(members, tmp_path / "ens")
  config = json.loads((out / "config.json").read_text())
  config["members"] = members_value
  (out / "config.json").write_text(json.dumps(config))
  with pytest.raises(ParserFileError, match=message):
    api.load_parser(out)


def test_save_refuses_an_unknown_dtype(members, tmp_path):
  vocab = Vocab.from_sentences([WORDS], min_count=1)
  model = SpanScorer(CFG, len(vocab.words), len(vocab.chars), len(LABELS), nnx.Rngs(0))
  with pytest.raises(ValueError, match="dtype must be one of float32, float16"):
    save_parser(tmp_path / "x", model, vocab, LABELS, dtype="int8")
