"""Raw-text scoring with a pretrained checkpoint (SPEC §13, `eval.raw_text`): a tiny random
Llama and a byte-level BPE tokenizer written with transformers' own classes; the sentence as
written, the checkpoint's tokenizer and BOS, log-probs equal to transformers'; SyntaxGym regions
→ tokens by character offsets; `evaluate --checkpoint` names the model by its folder and scores
BLiMP pairs as raw text (today's PTB-word encoding scores `Ġcan Ġn't Ġ.` instead)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from slm_jax.eval.raw_text import (RawTextScorer, evaluate_blimp_raw, prefix_id,  # noqa: E402
                                   region_units, token_regions)
from slm_jax.eval.blimp import Paradigm  # noqa: E402
from slm_jax.evaluation.checkpoints import check_checkpoints, load_checkpoint_run  # noqa: E402
from tests.test_hf_import import make_hf_model  # noqa: E402

VOCAB = 320
TEXTS = ("The cats didn't chase the mice.", "Don't go, she said.", "A hungry cat meows!",
         "Mice go where cats aren't.")
CORPUS = ("the cats chase the mice", "a hungry cat meows at the door", "don't go, she said.",
          "mice will go where cats are not!", "The door isn't open.")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """(transformers model, transformers tokenizer, folder) of a tiny byte-level BPE Llama."""
  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  tok.post_processor = tokenizers.processors.ByteLevel(trim_offsets=True)
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=VOCAB - 10, special_tokens=["<unk>", "<s>", "</s>"],
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(list(CORPUS) * 10, trainer)
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                              eos_token="</s>", unk_token="<unk>")
  model = make_hf_model("llama", vocab_size=VOCAB)
  folder = tmp_path_factory.mktemp("tiny_llama")
  model.save_pretrained(folder)
  fast.save_pretrained(folder)
  return model, fast, folder


@pytest.fixture(scope="module")
def scorer(checkpoint):
  run = load_checkpoint_run(checkpoint[2])
  return RawTextScorer(run.model, run.tokenizer, batch_size=3)


def hf_token_log_probs(model, fast, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
  """transformers: log p of each token of " " + `text` after BOS (lm-eval's convention), and its
  character offsets in `text`."""
  encoded = fast(" " + text, add_special_tokens=False, return_offsets_mapping=True)
  ids = [fast.bos_token_id, *encoded["input_ids"]]
  with torch.no_grad():
    logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
  picked = logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].numpy()
  return picked, [(start - 1, end - 1) for start, end in encoded["offset_mapping"]]


def test_text_log_probs_equal_transformers(checkpoint, scorer):
  model, fast, _ = checkpoint
  assert scorer.prefix_id == fast.bos_token_id
  for text in TEXTS:  # the sentence as written: no PTB split, no space before punctuation
    assert scorer.encode(text)[0].tolist() == fast(" " + text, add_special_tokens=False).input_ids
  total, counts = scorer.text_log_probs(TEXTS)
  want = [hf_token_log_probs(model, fast, t)[0] for t in TEXTS]
  np.testing.assert_allclose(total, [w.sum() for w in want], atol=1e-4)
  assert counts.tolist() == [len(w) for w in want]


def test_regions_map_to_tokens_by_character_offsets(checkpoint, scorer):
  model, fast, _ = checkpoint
  sentences = [["The cats", "didn't", "chase the mice."], ["Don't go,", "she said."]]
  got = scorer.region_log_probs(sentences)
  for regions, per_region in zip(sentences, got):
    text = " ".join(regions)
    logp, offsets = hf_token_log_probs(model, fast, text)
    ends = np.cumsum([len(r) + 1 for r in regions]) - 1
    want = np.zeros(len(regions))
    for lp, (start, end) in zip(logp, offsets):
      want[int(np.searchsorted(ends, end - 1, side="right"))] += lp  # its last character
    np.testing.assert_allclose(per_region, want, atol=1e-4)
    np.testing.assert_allclose(scorer.prefix_fn([regions])[0], np.cumsum(want), atol=1e-4)
  assert scorer.stats["straddling_tokens"] == 0


def test_token_regions_rule():
  # "ab cd" as regions ["ab", "cd"]: ends [2, 5]; " c" belongs to "cd" (its last character).
  offsets = np.array([[0, 2], [2, 4], [4, 5]])
  assert token_regions(offsets, np.array([2, 5])).tolist() == [0, 1, 1]
  assert token_regions(np.array([[1, 4]]), np.array([2, 5])).tolist() == [1]  # straddles
  assert region_units("  the cat ") == ["the cat"] and region_units(" ") == []


def test_prefix_token_is_bos_else_eos(checkpoint):
  class Tok:
    folder, bos_id, eos_id = "x", None, 7
  assert prefix_id(Tok()) == 7
  Tok.eos_id = None
  with pytest.raises(ValueError, match="neither a BOS nor an EOS"):
    prefix_id(Tok())


def test_blimp_pairs_scored_as_raw_text(checkpoint, scorer):
  model, fast, _ = checkpoint
  paradigm = Paradigm("p1", "syntax", "term", list(TEXTS[:2]), list(TEXTS[2:]))
  result = evaluate_blimp_raw(scorer, [paradigm])
  sums = [hf_token_log_probs(model, fast, t)[0].sum() for t in TEXTS]
  assert result.correct.tolist() == [sums[0] > sums[2], sums[1] > sums[3]]
  np.testing.assert_allclose(result.stats["pair_log_probs"]["good"], sums[:2], atol=1e-4)


def test_evaluate_cli_takes_a_checkpoint(checkpoint, tmp_path):
  from slm_jax import evaluate  # pylint: disable=g-import-not-at-top
  model, fast, folder = checkpoint
  blimp = tmp_path / "blimp"
  blimp.mkdir()
  (blimp / "p1.jsonl").write_text("".join(
      json.dumps({"sentence_good": g, "sentence_bad": b, "UID": "p1", "field": "syntax",
                  "linguistics_term": "t", "pairID": str(i)}) + "\n"
      for i, (g, b) in enumerate(zip(TEXTS[:2], TEXTS[2:]))))
  out = tmp_path / "out"
  assert evaluate.main([f"--checkpoint={folder}", "--tasks=blimp", f"--blimp_dir={blimp}",
                        f"--out={out}", "--bootstrap_resamples=10"]) == 0
  results = json.loads((out / "results.json").read_text())
  (entry,) = results["models"]
  assert entry["name"] == folder.name and entry["checkpoint"] == str(folder)
  sums = [hf_token_log_probs(model, fast, t)[0].sum() for t in TEXTS]
  assert entry["blimp"]["overall"] == 50.0 * ((sums[0] > sums[2]) + (sums[1] > sums[3]))
  assert "raw text" in (out / "tables.md").read_text()


def test_checkpoint_inputs_are_checked(checkpoint, tmp_path):
  problems = check_checkpoints([str(checkpoint[2]), str(tmp_path / "none.gguf"),
                                str(tmp_path)], ["blimp", "docppl", "mc", "xsum"])
  assert len(problems) == 3
  assert "no such GGUF file" in problems[0] and "not a model" in problems[1] and "config.json" in problems[1]
  assert "tasks xsum are not scored" in problems[2]  # doc-PPL and MC are (raw text)
