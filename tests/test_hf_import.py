"""Importing Hugging Face checkpoints (SPEC §13): tiny random models built with transformers'
own classes, every weight randomized (norms and biases too), saved, imported, and compared with
transformers' float32 eager logits on sequences of 1 to 200 tokens; bf16; both config layouts;
the reserved-vocabulary rows; and the errors a broken folder gives."""

from __future__ import annotations

import json
import pathlib
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from slm_jax.hf import HfCheckpointError, HfConfigError, import_config, load_model  # noqa: E402
from slm_jax.hf.safetensors_io import write_checkpoint  # noqa: E402
from slm_jax.hf.scoring import logits  # noqa: E402

VOCAB = 97
LENGTHS = (1, 37, 200)
TOL = 1e-4  # SPEC §13: float32 logits, absolute
BF16_TOL = 0.1  # bf16 compute on both sides, logits of magnitude ~3: a few bf16 ulps
LLAMA3 = dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
              high_freq_factor=4.0, original_max_position_embeddings=64)
# name -> (architecture, config overrides); GQA everywhere (4 query heads, 2 KV heads).
MODELS = {
    "llama_gqa_llama3": ("llama", dict(rope_parameters=LLAMA3, attention_bias=True,
                                       mlp_bias=True)),
    "qwen2_tied": ("qwen2", dict(tie_word_embeddings=True)),
    "qwen2_untied": ("qwen2", dict(tie_word_embeddings=False)),
    "olmo2": ("olmo2", dict(rope_parameters=dict(rope_type="default", rope_theta=500000.0))),
}


def make_hf_model(arch: str, seed: int = 0, **overrides):
  """A tiny transformers model of `arch` with every parameter randomized, float32, eager."""
  config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
                  "olmo2": transformers.Olmo2Config}[arch]
  fields = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
                pad_token_id=0)
  config = config_class(**{**fields, **overrides})
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                        dtype=torch.float32)
  with torch.no_grad():
    for name, param in model.named_parameters():
      if "norm" in name:
        param.copy_(torch.rand_like(param) + 0.5)
      elif name.endswith("bias"):
        param.copy_(torch.randn_like(param) * 0.1)
      else:
        param.copy_(torch.randn_like(param) * 0.08)
  return model.eval()


ROOT_TEXT = ("the cats chase the mice", "a hungry cat meows at the door",
             "mice will go where cats are not", "the door is open")


def tiny_tokenizer():
  """A transformers fast tokenizer (BPE trained on ROOT_TEXT, < VOCAB ids) with a chat template."""
  tokenizers = pytest.importorskip("tokenizers")
  tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
  tok.decoder = tokenizers.decoders.Metaspace()
  trainer = tokenizers.trainers.BpeTrainer(vocab_size=VOCAB - 10,
                                           special_tokens=["<unk>", "<s>", "</s>"])
  tok.train_from_iterator(list(ROOT_TEXT) * 10, trainer)
  assert tok.get_vocab_size() < VOCAB
  fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>",
                                              eos_token="</s>", unk_token="<unk>")
  fast.chat_template = CHAT_TEMPLATE
  return fast


# Exercises what transformers' renderer adds to jinja2: trim/lstrip blocks, loop controls,
# tojson, raise_exception and the special tokens passed by name.
CHAT_TEMPLATE = """{{ bos_token }}
{% for message in messages %}
  {% if message['role'] not in ['system', 'user', 'assistant'] %}
    {{ raise_exception('unknown role ' + message['role']) }}
  {% endif %}
  {% if loop.index0 > 5 %}{% break %}{% endif %}
  <|{{ message['role'] }}|> {{ message['content'] | trim }}{{ eos_token }}
  {% if message.get('meta') %}{{ message['meta'] | tojson }}{% endif %}
{% endfor %}
{% if add_generation_prompt %}<|assistant|>{% endif %}"""


def hf_logits(model, ids: np.ndarray) -> np.ndarray:
  with torch.no_grad():
    return model(torch.tensor(ids)).logits.float().numpy()


def to_old_layout(folder: pathlib.Path) -> None:
  """Rewrites config.json in the older hub layout: top-level rope_theta and rope_scaling."""
  path = folder / "config.json"
  config = json.loads(path.read_text())
  rope = config.pop("rope_parameters")
  config["rope_theta"] = rope.pop("rope_theta")
  config["rope_scaling"] = None if rope["rope_type"] == "default" else rope
  path.write_text(json.dumps(config))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  """name -> (transformers model, folder); llama sharded, qwen2_untied in the old layout."""
  out = {}
  for name, (arch, overrides) in MODELS.items():
    model = make_hf_model(arch, **overrides)
    folder = tmp_path_factory.mktemp(name)
    model.save_pretrained(folder, max_shard_size="40KB" if name.startswith("llama") else "5GB")
    if name == "qwen2_untied":
      to_old_layout(folder)
    out[name] = (model, folder)
  return out


def ids_of(length: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed + length).integers(0, VOCAB, (2, length))


@pytest.mark.parametrize("name", MODELS)
def test_float32_logits_match_transformers(checkpoints, name):
  model, folder = checkpoints[name]
  ours = load_model(folder, compute_dtype=jnp.float32)
  for length in LENGTHS:
    ids = ids_of(length)
    error = np.abs(logits(ours, ids) - hf_logits(model, ids)).max()
    assert error < TOL, (name, length, error)


def test_the_layouts_and_shards_are_what_the_tests_claim(checkpoints):
  llama = checkpoints["llama_gqa_llama3"][1]
  assert (llama / "model.safetensors.index.json").is_file()
  assert len(list(llama.glob("model-*.safetensors"))) > 2
  assert "rope_parameters" not in json.loads((checkpoints["qwen2_untied"][1] /
                                              "config.json").read_text())
  cfg = import_config(llama)
  assert (cfg.rope_scaling, cfg.n_kv_heads, cfg.o_bias, cfg.mlp_bias) == ("llama3", 2, True, True)
  assert import_config(checkpoints["olmo2"][1]).norm_position == "post"


def test_llama3_scaling_and_post_norm_matter(checkpoints):
  """The comparison can fail: without the llama3 scaling (or with pre-norm blocks) the logits
  of a 200-token sequence differ from transformers' by far more than the tolerance."""
  ids = ids_of(200)
  model, folder = checkpoints["llama_gqa_llama3"]
  plain = load_model(folder, compute_dtype=jnp.float32, strict=False, rope_scaling="none")
  assert np.abs(logits(plain, ids) - hf_logits(model, ids)).max() > 100 * TOL
  model, folder = checkpoints["olmo2"]
  pre = load_model(folder, compute_dtype=jnp.float32, strict=False, norm_position="pre")
  assert np.abs(logits(pre, ids) - hf_logits(model, ids)).max() > 100 * TOL


def test_bfloat16_checkpoint(tmp_path):
  make_hf_model("llama", rope_parameters=LLAMA3).to(torch.bfloat16).save_pretrained(tmp_path)
  assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"
  load = lambda dtype: transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path, dtype=dtype, attn_implementation="eager").eval()
  ids = ids_of(200)
  # fp32 import of bf16 weights equals transformers' fp32 forward of the same weights ...
  upcast = hf_logits(load(torch.float32), ids)
  ours32 = load_model(tmp_path, compute_dtype=jnp.float32)
  assert ours32.embed_tokens.embedding[...].dtype == jnp.float32
  assert np.abs(logits(ours32, ids) - upcast).max() < TOL
  # ... and bf16 compute stays within BF16_TOL of transformers' bf16 eager forward
  ours16 = load_model(tmp_path, compute_dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
  error = np.abs(logits(ours16, ids) - hf_logits(load(torch.bfloat16), ids)).max()
  assert error < BF16_TOL, error


def test_our_sharded_writer_round_trips(checkpoints, tmp_path):
  model, folder = checkpoints["olmo2"]
  tensors = ((name, value.detach().numpy()) for name, value in model.state_dict().items())
  paths = write_checkpoint(tmp_path, tensors, max_shard_bytes=30_000)
  assert len(paths) > 3 and (tmp_path / "model.safetensors.index.json").is_file()
  shutil.copy(folder / "config.json", tmp_path / "config.json")
  ids = ids_of(30)
  ours = load_model(tmp_path, compute_dtype=jnp.float32)
  assert np.abs(logits(ours, ids) - hf_logits(model, ids)).max() < TOL


def test_reserved_rows_appended_after_the_vocabulary(checkpoints):
  model, folder = checkpoints["qwen2_untied"]
  grown = load_model(folder, compute_dtype=jnp.float32, vocab_size=VOCAB + 57)
  table = np.asarray(grown.embed_tokens.embedding[...])
  np.testing.assert_array_equal(table[:VOCAB], model.model.embed_tokens.weight.detach().numpy())
  np.testing.assert_allclose(table[VOCAB:], np.broadcast_to(table[:VOCAB].mean(0),
                                                            (57, table.shape[1])), atol=1e-6)
  head = np.asarray(grown.lm_head.kernel[...])
  assert head.shape == (64, VOCAB + 57)
  ids = ids_of(20)
  np.testing.assert_allclose(logits(grown, ids)[..., :VOCAB], hf_logits(model, ids), atol=TOL)


# ---------------------------------------------------------------- bad input


def _copy(checkpoints, name: str, tmp_path: pathlib.Path, **config_changes) -> pathlib.Path:
  """A copy of checkpoint `name` whose config.json has `config_changes`."""
  target = tmp_path / name
  shutil.copytree(checkpoints[name][1], target)
  if config_changes:
    config = json.loads((target / "config.json").read_text())
    config.update(config_changes)
    (target / "config.json").write_text(json.dumps(config))
  return target


def test_missing_shard_names_the_file(checkpoints, tmp_path):
  folder = _copy(checkpoints, "llama_gqa_llama3", tmp_path)
  shard = sorted(folder.glob("model-*.safetensors"))[1]
  shard.unlink()
  with pytest.raises(HfCheckpointError, match=f"shard {shard.name} is missing"):
    load_model(folder)


def test_wrong_shape_names_file_and_tensor(checkpoints, tmp_path):
  folder = _copy(checkpoints, "qwen2_tied", tmp_path, intermediate_size=128)
  with pytest.raises(HfCheckpointError, match=r"model\.safetensors: tensor "
                     r"model\.layers\.0\.mlp\.\w+_proj\.weight has shape"):
    load_model(folder)


def test_unknown_architecture(checkpoints, tmp_path):
  folder = _copy(checkpoints, "olmo2", tmp_path, architectures=["GPTNeoXForCausalLM"])
  with pytest.raises(HfConfigError, match=r"config\.json: architectures=\['GPTNeoXForCausalLM'\] "
                     "is not supported"):
    load_model(folder)


def test_untied_config_without_lm_head(checkpoints, tmp_path):
  folder = _copy(checkpoints, "qwen2_tied", tmp_path, tie_word_embeddings=False)
  with pytest.raises(HfCheckpointError, match="tie_word_embeddings=false .* no checkpoint file in "
                     ".* holds lm_head.weight"):
    load_model(folder)


def test_truncated_file_names_the_file(checkpoints, tmp_path):
  folder = _copy(checkpoints, "olmo2", tmp_path)
  path = folder / "model.safetensors"
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 2])
  with pytest.raises(HfCheckpointError, match=r"model\.safetensors: not a readable safetensors "
                     "file .*truncated"):
    load_model(folder)


def test_sliding_window_on_is_refused(checkpoints, tmp_path):
  folder = _copy(checkpoints, "qwen2_tied", tmp_path, use_sliding_window=True,
                 sliding_window=16, layer_types=None)
  with pytest.raises(HfConfigError, match="use_sliding_window"):
    load_model(folder)


@pytest.mark.parametrize("name,heads,hidden", [("hf_qwen2_5_7b", (28, 4), 18944),
                                               ("hf_llama3_8b", (32, 8), 14336),
                                               ("hf_olmo2_1b", (16, 16), 8192)])
def test_presets_point_at_their_checkpoints(name, heads, hidden):
  from slm_jax import configs  # pylint: disable=import-outside-toplevel
  from slm_jax.train.run_config import load_config  # pylint: disable=import-outside-toplevel
  cfg = load_config(configs.config_path(name))
  assert cfg.model.init_from.startswith("checkpoints/")
  assert cfg.data.tokenizer_path == cfg.model.init_from + "/tokenizer.json"
  assert (cfg.model.n_heads, cfg.model.n_kv_heads, cfg.model.mlp_hidden) == (*heads, hidden)
  assert (cfg.mesh.data, cfg.mesh.fsdp, cfg.optimizer.trainable) == (1, 8, "lora")
  assert cfg.model.lora_rank > 0 and str(cfg.model.param_dtype) == "bfloat16"
