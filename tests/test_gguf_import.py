"""GGUF import (`slm_jax.hf.gguf` through `slm_jax.hf.load`): tiny Llama (untied, SentencePiece
vocabulary) and Qwen2 (tied, byte-level vocabulary) models written as GGUF files with every
supported tensor type (tests/gguf_fixtures.py), compared with transformers' own GGUF loading
and with the same weights as a safetensors folder (float32 logits within 1e-4; our two imports
bit for bit); llama3 RoPE recovered from `rope_freqs`; and what is refused, by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers needs it to load a GGUF file

import jax.numpy as jnp  # noqa: E402

from slm_jax.hf import HfCheckpointError, HfConfigError, import_config  # noqa: E402
from slm_jax.hf.gguf import llama3_factors, open_gguf  # noqa: E402
from slm_jax.hf.gguf_quant import SUPPORTED  # noqa: E402
from slm_jax.hf.load import load_checkpoint, load_model  # noqa: E402
from slm_jax.hf.scoring import logits  # noqa: E402
from tests.gguf_fixtures import byte_level_vocab, gguf, sentencepiece_vocab, write_model  # noqa: E402
from tests.test_hf_import import hf_logits, make_hf_model  # noqa: E402

TOL = 1e-4  # SPEC §13: float32 logits, absolute
# K-quant rows need multiples of 256; GGUF stores eps in float32: one it represents exactly
SIZES = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, rms_norm_eps=2.0 ** -17)
CYCLE = ("Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K", "BF16", "F16", "F32")
MODELS = {"llama": ("llama", False, sentencepiece_vocab), "qwen2": ("qwen2", True,
                                                                   byte_level_vocab)}


def build(tmp_path, name: str, arch: str, tied: bool, vocab: dict, start: int = 0, **gguf_args):
  """(transformers model holding the file's weights, GGUF path, safetensors folder)."""
  model = make_hf_model(arch, vocab_size=len(vocab["tokens"]), tie_word_embeddings=tied,
                        **SIZES)
  weights = [n for n, p in model.state_dict().items() if p.ndim == 2]
  types = {n: CYCLE[(start + i) % len(CYCLE)] for i, n in enumerate(weights)}
  path = tmp_path / f"{name}.gguf"
  truth = write_model(path, arch, model, types, tokenizer=vocab, **gguf_args)
  model.load_state_dict({k: torch.from_numpy(v) for k, v in truth.items()}, strict=False)
  folder = tmp_path / f"{name}_safetensors"
  model.save_pretrained(folder)
  return model, path, folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  out = {}
  for start, (name, (arch, tied, vocab)) in enumerate(MODELS.items()):
    model, path, folder = build(tmp_path_factory.mktemp(name), name, arch, tied, vocab(),
                                start=start * 4)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager").eval()
    out[name] = (model, theirs, path, folder)
  return out


def ids_of(length: int, vocab: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed + length).integers(0, vocab, (2, length))


def test_the_files_hold_every_supported_type(models):
  types = set()
  for _, _, path, _ in models.values():
    types |= {t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
  assert types == set(SUPPORTED)
  assert "output.weight" not in {t.name for t in gguf.GGUFReader(models["qwen2"][2]).tensors}


@pytest.mark.parametrize("name", MODELS)
def test_logits_match_transformers_gguf_loading(models, name):
  model, theirs, path, _ = models[name]
  ours = load_model(path, compute_dtype=jnp.float32)
  for length in (1, 37, 100):
    ids = ids_of(length, model.config.vocab_size)
    assert np.abs(logits(ours, ids) - hf_logits(theirs, ids)).max() < TOL, (name, length)
    assert np.abs(logits(ours, ids) - hf_logits(model, ids)).max() < TOL, (name, length)


@pytest.mark.parametrize("name", MODELS)
def test_gguf_and_safetensors_imports_agree_bit_for_bit(models, name):
  model, _, path, folder = models[name]
  assert import_config(path) == import_config(folder)
  ids = ids_of(50, model.config.vocab_size)
  np.testing.assert_array_equal(logits(load_model(path, compute_dtype=jnp.float32), ids),
                                logits(load_model(folder, compute_dtype=jnp.float32), ids))


def test_llama_q_and_k_rows_are_unpermuted(models):
  model, _, path, _ = models["llama"]
  ours = load_model(path, compute_dtype=jnp.float32)
  stored = {t.name: t for t in gguf.GGUFReader(path).tensors}["blk.1.attn_k.weight"]
  for name, kernel in (("q_proj", ours.blocks[1].attn.q.kernel), ("k_proj",
                                                                  ours.blocks[1].attn.k.kernel)):
    want = model.state_dict()[f"model.layers.1.self_attn.{name}.weight"].numpy()
    np.testing.assert_array_equal(np.asarray(kernel[...]).T, want)
  as_stored = gguf.quants.dequantize(stored.data, stored.tensor_type)
  assert not np.array_equal(as_stored, model.state_dict()["model.layers.1.self_attn.k_proj.weight"]
                            .numpy())  # the file's order differs: the test can fail


def test_load_checkpoint_gives_config_model_and_tokenizer(models):
  model, _, path, _ = models["qwen2"]
  checkpoint = load_checkpoint(path, compute_dtype=jnp.float32)
  assert checkpoint.config == checkpoint.model.config
  assert (checkpoint.config.tie_embeddings, checkpoint.config.qkv_bias) == (True, True)
  assert checkpoint.config.vocab_size == model.config.vocab_size == checkpoint.tokenizer.size
  assert checkpoint.tokenizer.bos_id == 1 and not checkpoint.tokenizer.add_bos


def test_llama3_rope_from_rope_freqs(tmp_path):
  rope = dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
              high_freq_factor=4.0, original_max_position_embeddings=64)
  factors = llama3_factors(10000.0, 64, 8.0, 1.0, 4.0, 64)
  assert ((factors > 1) & (factors < 8)).sum() >= 2
  model, path, folder = build(tmp_path, "llama3", "llama", False, sentencepiece_vocab(),
                              rope_freqs=factors)
  reference = make_hf_model("llama", vocab_size=model.config.vocab_size, rope_parameters=rope,
                            **SIZES)
  reference.load_state_dict(model.state_dict())
  cfg = import_config(path)
  assert (cfg.rope_scaling, cfg.rope_factor, cfg.rope_high_freq_factor,
          cfg.rope_original_max_position) == ("llama3", 8.0, 4.0, 64)
  ids = ids_of(200, model.config.vocab_size)
  ours = logits(load_model(path, compute_dtype=jnp.float32), ids)
  assert np.abs(ours - hf_logits(reference, ids)).max() < TOL
  assert np.abs(ours - hf_logits(model.eval(), ids)).max() > 100 * TOL  # without the scaling


# ---------------------------------------------------------------- refused, by name


def tiny(tmp_path, arch="llama", types=None, extra=None, vocab=None, **gguf_args):
  model = make_hf_model(arch, vocab_size=len((vocab or sentencepiece_vocab())["tokens"]), **SIZES)
  path = tmp_path / "model.gguf"
  write_model(path, arch, model, types or {}, tokenizer=vocab or sentencepiece_vocab(),
              extra=extra, **gguf_args)
  return path


def test_unsupported_tensor_type(tmp_path):
  path = tiny(tmp_path, types={"model.layers.0.self_attn.q_proj.weight": "Q2_K"})
  with pytest.raises(ValueError, match=r"model\.gguf: tensor blk\.0\.attn_q\.weight has type "
                     "Q2_K, which the GGUF importer does not dequantize"):
    load_model(path)


@pytest.mark.parametrize("extra,message", [
    ({"llama.expert_count": (8, gguf.GGUFValueType.UINT32)}, "llama.expert_count=8: mixture"),
    ({"llama.rope.scaling.type": ("linear", gguf.GGUFValueType.STRING)},
     "llama.rope.scaling.type='linear' is not supported"),
    ({"llama.attention.key_length": (32, gguf.GGUFValueType.UINT32)},
     "llama.rope.dimension_count=64 differs from the head dimension 32"),
])
def test_metadata_the_decoder_cannot_reproduce(tmp_path, extra, message):
  with pytest.raises(HfConfigError, match=r"model\.gguf: " + message):
    import_config(tiny(tmp_path, extra=extra))


def test_other_architectures(tmp_path):
  path = tmp_path / "phi.gguf"
  writer = gguf.GGUFWriter(str(path), "phi3")
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  with pytest.raises(HfConfigError, match=r"phi\.gguf: general\.architecture='phi3' is not "
                     "supported; the GGUF importer reads llama, qwen2"):
    load_model(path)


def test_rope_freqs_that_are_not_llama3(tmp_path):
  factors = llama3_factors(10000.0, 64, 8.0, 1.0, 4.0, 64)
  factors[3] *= 1.5
  with pytest.raises(HfConfigError, match=r"rope_freqs\.weight is not llama3 RoPE scaling"):
    import_config(tiny(tmp_path, rope_freqs=factors))


def test_truncated_file(tmp_path):
  path = tiny(tmp_path)
  path.write_bytes(path.read_bytes()[:5000])
  with pytest.raises(HfCheckpointError, match=r"model\.gguf: not a readable GGUF file"):
    open_gguf(path)


def test_score_cli_reads_a_gguf_file(models, tmp_path, capsys):
  from slm_jax import score  # pylint: disable=import-outside-toplevel
  _, theirs, path, _ = models["qwen2"]
  text = tmp_path / "in.txt"
  text.write_text("the cats chase the mice\nNumbers: 1234567, 2024 and 42!\n")
  assert score.main([f"--checkpoint={path}", f"--text_file={text}", "--bos"]) == 0
  rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
  for line, row in zip(text.read_text().splitlines(), rows):
    assert row["ids"] == [tok.bos_token_id] + tok(line).input_ids
    with torch.no_grad():
      logp = torch.log_softmax(theirs(torch.tensor([row["ids"]])).logits[0], -1).numpy()
    want = logp[np.arange(len(row["ids"]) - 1), row["ids"][1:]]
    np.testing.assert_allclose(row["logprobs"][1:], want, atol=TOL)
