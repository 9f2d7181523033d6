"""The 60 config files (56 SLM + 4 Pushdown), the builder's scales and start-up validation."""

import pathlib
import subprocess
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from slm_jax import configurations
from slm_jax.train import run_config
from slm_jax.train.run_config import ConfigError, build, load_config, validate

CONFIG_DIR = pathlib.Path(__file__).resolve().parents[1] / "configs"
NAMES = list(configurations.CONFIGURATIONS)
pytestmark = pytest.mark.filterwarnings("ignore:the load_module:DeprecationWarning")  # config_flags


def config_file(name: str, scale: str) -> str:
  return str(CONFIG_DIR / f"{name}_{scale}.py")


def test_exactly_the_60_files_and_the_hf_presets():
  files = {p.stem for p in CONFIG_DIR.glob("*.py")} - {"__init__"}
  paper = {f for f in files if not f.startswith("hf")}
  assert paper == {f"{n}_{s}" for n in NAMES for s in run_config.SCALES}
  assert len(paper) == 60  # 14 configurations + the Pushdown reference, 4 scales each
  assert files - paper == {"hf_qwen2_5_7b", "hf_llama3_8b", "hf_olmo2_1b", "hf"}


@pytest.mark.parametrize("scale", run_config.SCALES)
@pytest.mark.parametrize("name", NAMES)
def test_config_file_loads_and_validates(name, scale):
  cfg = load_config(config_file(name, scale))
  table = configurations.CONFIGURATIONS[name]
  assert cfg.configuration.name == name
  assert cfg.configuration.linearization == table.linearization
  assert cfg.configuration.attention == table.attention.name
  assert cfg.scale == scale
  assert cfg.data.tokenizer == ("word" if scale == "tiny" else "gpt2")
  assert cfg.data.seq_len == (256 if scale == "tiny" else 2049 if name == "pause2" else 2048)
  assert cfg.data.source == "embedded"
  assert cfg.train.global_batch % cfg.optimizer.grad_accum_steps == 0


@pytest.mark.parametrize("scale,dims,weights,paper_n", [
    ("100m", (768, 4, 12, 12), 70.8e6, 70_900_224),
    ("500m", (1408, 8, 16, 16), 507.5e6, 507_896_576),
    ("1b", (2048, 8, 16, 16), 1.074e9, 1_074_302_976),
])
def test_scale_dims_match_spec(scale, dims, weights, paper_n):
  model = build("tgtree", scale).model
  assert (model.d_model, model.mlp_ratio, model.n_layers, model.n_heads) == dims
  assert model.n_kv_heads is None and model.tie_embeddings  # None = n_heads (no GQA)
  assert model.param_dtype == "float32" and model.compute_dtype == "bfloat16"
  bare = run_config.non_embedding_params(dims[0], dims[2], dims[1], dims[3], biases=False)
  assert bare == pytest.approx(weights, rel=1e-3)
  assert model.include_bias  # OLMo include_bias: the paper's N is the model's own count
  assert run_config.count_non_embedding(model) == paper_n


def test_count_matches_the_model():
  decoder = pytest.importorskip("slm_jax.model.decoder")
  for scale in ("tiny", "500m"):
    m = build("tgtree", scale).model
    model_config = decoder.ModelConfig(
        vocab_size=100, d_model=m.d_model, n_layers=m.n_layers, n_heads=m.n_heads,
        n_kv_heads=m.n_kv_heads or None, mlp_ratio=m.mlp_ratio, qkv_bias=m.qkv_bias,
        mlp_bias=m.mlp_bias, include_bias=m.include_bias)
    assert decoder.non_embedding_param_count(model_config) == run_config.count_non_embedding(m)


def test_100m_total_with_paper_vocab():
  n = run_config.count_non_embedding(build("tree", "100m").model)
  assert n + 50_320 * 768 == pytest.approx(109e6, rel=1e-2)  # SPEC §6: ≈ 109M


def test_tiny_is_small_and_explicit():
  cfg = build("tgtree_mix_tg", "tiny")
  assert cfg.model.d_model == 128 and cfg.model.compute_dtype == "float32"
  assert cfg.optimizer.peak_lr == 3e-3 and cfg.optimizer.warmup_steps < cfg.train.steps


def test_config_flags_path():
  """The lead's absl entry point: DEFINE_config_file plus dotted overrides, then validate."""
  argv = ["prog", f"--config={config_file('tgtree', 'tiny')}", "--config.train.steps=5",
          "--config.data.ptb_paths=('a.mrg','trees/')"]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)  # argv not sys.argv
  values(argv)
  cfg = validate(values.config)
  assert cfg.train.steps == 5 and cfg.data.ptb_paths == ("a.mrg", "trees/")


def test_config_flags_unknown_key_names_it():
  argv = ["prog", f"--config={config_file('tgtree', 'tiny')}", "--config.model.d_modle=3"]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
  with pytest.raises(Exception, match=r"(?s)d_modle.*d_model"):
    values(argv)


def test_load_config_overrides():
  cfg = load_config(config_file("tgtree", "tiny"), ["train.steps=5", "--config.model.d_model=64",
                                                    "config.optimizer.peak_lr=1e-3"])
  assert (cfg.train.steps, cfg.model.d_model, cfg.optimizer.peak_lr) == (5, 64, 1e-3)


def test_unknown_key_override_fails_clearly():
  with pytest.raises(ConfigError, match=r"unknown key model\.d_modle.*did you mean model\.d_model"):
    load_config(config_file("tgtree", "tiny"), ["model.d_modle=256"])


def test_unknown_key_in_config_fails_clearly():
  cfg = build("tree", "tiny")
  with cfg.unlocked():
    cfg.optimizer.warmup = 10
    del cfg.train["seed"]
  with pytest.raises(ConfigError) as err:
    validate(cfg)
  assert "unknown key optimizer.warmup; did you mean optimizer.warmup_steps?" in str(err.value)
  assert "missing key train.seed" in str(err.value)


def test_tg_attention_on_lin1_fails_clearly():
  with pytest.raises(ConfigError, match="attention tg needs linearization lin2.*lin1"):
    load_config(config_file("tree", "tiny"), ["configuration.attention=tg"])


def test_name_must_match_the_table():
  with pytest.raises(ConfigError, match="configuration.name=tg"):
    load_config(config_file("tgtree", "tiny"), ["configuration.attention=tg"])
  cfg = load_config(config_file("tgtree", "tiny"),
                    ["configuration.attention=tg", "configuration.name=tg"])
  assert cfg.configuration.attention == "tg"
  custom = load_config(config_file("tgtree", "tiny"),
                       ["configuration.attention=mix(tg,causal)", "configuration.name=custom"])
  assert custom.configuration.attention == "mix(tg,causal)"


def test_bad_values_are_all_listed():
  overrides = ["model.n_heads=3", "data.seq_len=8", "optimizer.min_lr=1.0", "data.source=ptb"]
  with pytest.raises(ConfigError) as err:
    load_config(config_file("tgnomask_mix_tg", "tiny"), overrides)
  message = str(err.value)
  for expected in ("d_model=128 is not divisible by model.n_heads=3",
                   "must be divisible by 2", "seq_len must be at least 16",
                   "min_lr=1.0 must be in [0, peak_lr]", "needs data.ptb_paths"):
    assert expected in message, message


def test_bad_type_from_file():
  cfg = build("tree", "tiny")
  with cfg.unlocked(), cfg.ignore_type():
    cfg.train.steps = 5.5
  with pytest.raises(ConfigError, match="train.steps = 5.5 should be of type int"):
    validate(cfg)


def test_absl_subprocess():
  """End to end through absl.app, as a user's training script would run (through the old
  module name `config_builder`, kept for such scripts and users' config files)."""
  script = (
      "from absl import app, flags\n"
      "from ml_collections import config_flags\n"
      "from slm_jax import config_builder\n"
      "CONFIG = config_flags.DEFINE_config_file('config')\n"
      "def main(argv):\n"
      "  cfg = config_builder.validate(CONFIG.value)\n"
      "  print('steps', cfg.train.steps, cfg.configuration.attention)\n"
      "app.run(main)\n")
  out = subprocess.run([sys.executable, "-c", script, f"--config={config_file('tg', 'tiny')}",
                        "--config.train.steps=5"], capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  assert "steps 5 tg" in out.stdout


def test_packaged_config_names(tmp_path, monkeypatch):
  """`--config=tgtree_1b` works without a checkout; a path that exists is kept as given."""
  from slm_jax import configs
  packaged = configs.FOLDER / "tgtree_1b.py"
  assert configs.config_path("tgtree_1b") == str(packaged)
  assert configs.config_path("tgtree_1b.py") == str(packaged)
  assert configs.config_path(config_file("tg", "tiny")) == config_file("tg", "tiny")
  monkeypatch.chdir(tmp_path)  # no configs/ here: the packaged copy answers
  assert configs.config_path("configs/tg_tiny.py") == str(configs.FOLDER / "tg_tiny.py")
  assert configs.config_path("no_such_config") == "no_such_config"  # the loader reports it
  assert load_config("tg_tiny", folder=configs.FOLDER) == load_config(config_file("tg", "tiny"))
  assert load_config("configs/tg_tiny.py", folder=configs.FOLDER).configuration.name == "tg"
  assert len(configs.names()) == 64  # 56 paper configs + 4 Pushdown + 4 Hugging Face presets


def test_schema_expresses_optional_values_and_scale_only_keys():
  """The typed-section machinery: `X | None` values, keys that exist at one scale only, keys a
  saved config may lack (a default), and every problem of a section at once."""
  import dataclasses
  from slm_jax import sections

  @dataclasses.dataclass(frozen=True)
  class Demo:
    width: int
    limit: int | None = None
    tiny_only: int = sections.option(3, scales=("tiny",))
    late: bool = sections.option(False, required=False)

    def __post_init__(self):
      rules = sections.Rules("demo", self)
      if rules.typed:
        rules.need(self.width > 0, f"width={self.width} must be positive")
        rules.need(self.limit is None or self.limit > self.width, "limit must exceed width")
      rules.done()

  assert Demo(2).limit is None and Demo(2, 5).limit == 5
  with pytest.raises(sections.SectionError) as err:
    Demo(width="2", limit=1.5)
  assert err.value.problems == ["demo.width = '2' should be of type int, got str",
                                "demo.limit = 1.5 should be of type int, got float"]
  with pytest.raises(sections.SectionError) as err:
    Demo(width=-1, limit=-3)
  assert len(err.value.problems) == 2
  assert [f.name for f in sections.config_fields(Demo, "1b")] == ["width", "limit", "late"]
  assert [f.name for f in sections.config_fields(Demo, "tiny")] == [
      "width", "limit", "tiny_only", "late"]
  # In a real config: optional model values are typed placeholders a command line can set.
  cfg = build("tgtree", "tiny")
  assert cfg.model.head_dim is None and cfg.model.n_kv_heads is None
  run = load_config(config_file("tgtree", "tiny"), ["model.n_kv_heads=2"])
  assert run.model.n_kv_heads == 2 and run.model.head_dim == 32


def test_saved_configs_validate_and_old_ones_load():
  """config.json round-trips; a key added later (model.qk_norm) may be missing from an older
  saved config; a misspelt or wrongly typed one is named."""
  import json
  run = validate(build("tg", "tiny"))
  saved = json.loads(run.to_json())
  assert validate(saved) == run
  del saved["model"]["qk_norm"]
  assert validate(saved).model.qk_norm is False
  saved["model"]["d_modle"] = 3
  saved["train"]["steps"] = "many"
  with pytest.raises(ConfigError, match=r"unknown key model\.d_modle; did you mean model\.d_model"):
    validate(saved)
  del saved["model"]["d_modle"]
  with pytest.raises(ConfigError, match="train.steps = 'many' should be of type int"):
    validate(saved)
