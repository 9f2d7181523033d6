"""GGUF → safetensors folder (`slm_jax.hf.gguf_export`, `python -m slm_jax.export
--checkpoint=FILE.gguf`): transformers loads the folder with the same logits as its own GGUF
loading of the file, the same tokenizer ids and chat template; slm_jax reads it back equal."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import jax.numpy as jnp  # noqa: E402

from slm_jax import cli  # noqa: E402
from slm_jax.export import main as export_main  # noqa: E402
from slm_jax.hf.gguf_export import export_gguf  # noqa: E402
from slm_jax.hf.load import load_model  # noqa: E402
from slm_jax.hf.scoring import logits  # noqa: E402
from slm_jax.hf.tokenizer import CheckpointTokenizer  # noqa: E402
from tests.gguf_fixtures import TEXTS, byte_level_vocab, sentencepiece_vocab  # noqa: E402
from tests.test_gguf_import import build, ids_of  # noqa: E402
from tests.test_hf_import import CHAT_TEMPLATE, hf_logits  # noqa: E402
from tests.test_hf_tokenizer import CONVERSATIONS  # noqa: E402


@pytest.mark.parametrize("arch,tied,vocab", [
    ("llama", False, lambda: sentencepiece_vocab(True, CHAT_TEMPLATE)),
    ("qwen2", True, lambda: byte_level_vocab("qwen2", CHAT_TEMPLATE))])
def test_transformers_loads_the_export_as_it_loads_the_gguf(tmp_path, arch, tied, vocab):
  _, path, _ = build(tmp_path, arch, arch, tied, vocab(), start=2)
  out = tmp_path / "exported"
  assert export_main(["--checkpoint", str(path), "--out", str(out)]) == 0
  from_gguf = transformers.AutoModelForCausalLM.from_pretrained(
      path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager").eval()
  from_folder = transformers.AutoModelForCausalLM.from_pretrained(
      out, dtype=torch.float32, attn_implementation="eager").eval()
  ids = ids_of(40, from_gguf.config.vocab_size)
  np.testing.assert_array_equal(hf_logits(from_folder, ids), hf_logits(from_gguf, ids))
  np.testing.assert_array_equal(logits(load_model(out, compute_dtype=jnp.float32), ids),
                                logits(load_model(path, compute_dtype=jnp.float32), ids))
  tok_gguf = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
  tok_folder = transformers.AutoTokenizer.from_pretrained(out)
  for text in TEXTS:
    assert tok_folder(text).input_ids == tok_gguf(text).input_ids, text
  for messages in CONVERSATIONS:
    assert (tok_folder.apply_chat_template(messages, tokenize=False)
            == tok_gguf.apply_chat_template(messages, tokenize=False)
            == CheckpointTokenizer(out).chat(messages))
  assert CheckpointTokenizer(out).add_bos == CheckpointTokenizer(path).add_bos == (arch == "llama")


def test_bfloat16_export_and_refusals(tmp_path):
  _, path, _ = build(tmp_path, "q", "qwen2", True, byte_level_vocab())
  out = export_gguf(path, tmp_path / "bf16", dtype="bfloat16")
  assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
  model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
  assert model.model.embed_tokens.weight.dtype == torch.bfloat16
  with pytest.raises(cli.CliError, match="exists and is not empty"):
    export_gguf(path, out)
