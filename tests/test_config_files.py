"""The one config loader (`slm_jax.config_files`): files and packaged names, precedence, text
parsed by the key's type, every problem at once in one line naming its file or flag; and how a
run's config (`slm_jax.train.run_config`, `python -m slm_jax.main`) and a GTCA-like sweep map
onto it. The finetune and parser CLIs have their own test files (test_finetune_config.py,
test_parser_config.py)."""

from __future__ import annotations

import dataclasses
import pathlib
import typing

import pytest

from slm_jax import cli, config_files, configs, sections
from slm_jax.config_files import ConfigError, ConfigLoader, find_config, parse_text
from slm_jax.sections import Rules, option
from slm_jax.train import run_config
from tests.test_layering import ROOT, imported_modules, module_name


@dataclasses.dataclass(frozen=True)
class Inner:
  width: int = 4
  names: tuple[str, ...] = ("a",)

  def __post_init__(self):
    rules = Rules("inner", self)
    if rules.typed:
      rules.need(self.width > 0, f"width must be positive, got {self.width}")
    rules.done()


@dataclasses.dataclass(frozen=True)
class Demo:
  """A tree: a root with values and a nested section."""
  name: str
  rate: float = 0.1
  steps: int = 10
  limit: int | None = None
  fast: bool = False
  seeds: tuple[int, ...] = (0,)
  inner: Inner = Inner()
  source: str = option("", config=False)

  def __post_init__(self):
    rules = Rules("", self)
    if rules.typed:
      rules.need(self.rate > 0, f"rate must be positive, got {self.rate}")
      rules.need(self.steps > 0, f"steps must be positive, got {self.steps}")
    rules.done()


def write(path: pathlib.Path, body: str) -> pathlib.Path:
  path.write_text(f"def get_config():\n  return {body}\n")
  return path


@pytest.fixture()
def loader(tmp_path):
  folder = tmp_path / "packaged"
  folder.mkdir()
  (folder / "__init__.py").write_text("")
  write(folder / "small.py", "{'name': 'small', 'steps': 3, 'inner': {'width': 2}}")
  return ConfigLoader(Demo, folder=folder, aliases={"name": "name", "width": "inner.width",
                                                    "learning_rate": "rate"})


@pytest.mark.parametrize("hint, text, value", [
    (int, "3", 3), (float, "1e-3", 1e-3), (float, "2", 2.0), (bool, "true", True),
    (bool, "0", False), (str, "a,b", "a,b"), (int | None, "None", None), (int | None, "5", 5),
    (tuple[int, ...], "1,2", (1, 2)), (tuple[int, ...], "7", (7,)), (tuple[str, ...], "", ()),
    (tuple[str, ...], "('a.mrg', 'trees/')", ("a.mrg", "trees/")),
    (tuple[int, int, int], "[1, 2, 3]", (1, 2, 3)), (typing.Any, "float32", "float32"),
])
def test_text_is_parsed_by_the_keys_type(hint, text, value):
  parsed = parse_text(hint, text)
  assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("hint, text, what", [
    (int, "1.5", "an int"), (float, "fast", "a float"), (bool, "maybe", "true or false"),
    (tuple[int, ...], "a,b", "a comma-separated list of int"), (tuple[str, ...], "(1,", "a tuple"),
])
def test_text_that_does_not_parse_says_what_was_expected(hint, text, what):
  with pytest.raises(ValueError, match=what):
    parse_text(hint, text)


def test_defaults_then_file_then_flags_then_overrides(loader, tmp_path):
  assert loader.load(flags={"name": "x"}) == Demo("x")
  assert loader.load("small") == Demo("small", steps=3, inner=Inner(2))  # a packaged NAME
  path = write(tmp_path / "c.py", "{'name': 'f', 'rate': 0.5, 'steps': 7, 'seeds': '3,4', "
               "'inner': {'names': ['p', 'q']}}")
  settings = loader.load(str(path), ["--config.steps=9", "--config.inner.width=6"],
                         {"learning_rate": "0.25", "width": 5, "name": "g"},
                         extra={"source": "here"})
  assert settings == Demo("g", rate=0.25, steps=9, seeds=(3, 4), inner=Inner(6, ("p", "q")),
                          source="here")
  assert loader.load(f"{path}", ["steps=2", "config.limit=None", "fast=yes"]).fast is True


def test_every_problem_in_one_line_naming_its_file_or_flag(loader, tmp_path):
  path = write(tmp_path / "bad.py", "{'name': 'n', 'rat': 1, 'steps': 0, 'seeds': 'x', "
               "'inner': {'width': -1}}")
  with pytest.raises(ConfigError) as error:
    loader.load(str(path), ["--config.fast=maybe", "--config.inner.widht=3"],
                {"learning_rate": "quick"})
  assert error.value.problems == [
      "--learning_rate=quick: rate='quick' is not a float",
      "--config.fast=maybe: fast='maybe' is not true or false",
      "unknown key inner.widht in --config.inner.widht=3; did you mean inner.width?",
      f"unknown key rat in {path}; did you mean rate?",
      f"{path}: seeds='x' is not a comma-separated list of int",
      f"inner.width must be positive, got -1 (in {path})",
  ]
  line = cli.describe_error(error.value)
  assert line.startswith("invalid config: --learning_rate=quick:") and "\n" not in line
  with pytest.raises(ConfigError) as error:  # once the nested section builds, the root's rules
    loader.load(str(path), ["seeds=1", "inner.width=1"])
  assert error.value.problems[-1] == f"steps must be positive, got 0 (in {path})"


def test_missing_keys_name_the_flag_that_gives_them(loader):
  with pytest.raises(ConfigError, match=r"missing key name \(--name=… or `name` in the --config "
                                        r"file\)"):
    loader.load()
  with pytest.raises(ConfigError, match="steps = '10' should be of type int, got str"):
    loader.validate({"name": "n", "steps": "10"})


def test_config_files_and_names(loader, tmp_path):
  assert find_config("small", loader.folder) == (loader.folder / "small.py", None)
  assert find_config("small.py", loader.folder)[0] == loader.folder / "small.py"
  assert find_config("elsewhere/small.py", loader.folder)[0] == loader.folder / "small.py"
  path = write(tmp_path / "own.py", "{}")
  assert find_config(f"{path}:arg") == (path, "arg")
  with pytest.raises(ConfigError, match=r"config file nope not found .*packaged name: small"):
    loader.load("nope")
  with pytest.raises(ConfigError, match="__init__ not found"):
    loader.load("__init__")
  (tmp_path / "none.py").write_text("x = 1\n")
  (tmp_path / "boom.py").write_text("def get_config():\n  raise RuntimeError('no')\n")
  write(tmp_path / "list.py", "[1]")
  for name, message in (("none", "defines no get_config()"), ("boom", "cannot run the config"),
                        ("list", "returned list, expected a ConfigDict or a dict")):
    with pytest.raises(ConfigError, match=message) as error:
      loader.load(str(tmp_path / f"{name}.py"), ["--config.stepz=1"])
    assert str(tmp_path / f"{name}.py") in str(error.value)
    assert "did you mean steps?" in str(error.value)  # the command line's problems too
  (tmp_path / "arg.py").write_text(
      "import ml_collections\n"
      "def get_config(name):\n  return ml_collections.ConfigDict({'name': name})\n")
  assert loader.load(f"{tmp_path / 'arg.py'}:from_arg").name == "from_arg"


def test_the_recorded_settings_round_trip(loader):
  settings = loader.load("small", ["seeds=5,6"])
  record = sections.to_dict(settings)
  assert record == {"name": "small", "rate": 0.1, "steps": 3, "limit": None, "fast": False,
                    "seeds": (5, 6), "inner": {"width": 2, "names": ("a",)}}
  assert loader.validate(record) == settings


# ------------------------------------------------------------------ python -m slm_jax.main


def test_a_runs_config_file_with_its_problems_named(tmp_path):
  path = tmp_path / "mine.py"
  path.write_text("from slm_jax.train import run_config\n\ndef get_config():\n"
                  "  cfg = run_config.build('tg', 'tiny')\n"
                  "  with cfg.unlocked(), cfg.ignore_type():\n"
                  "    cfg.train.stepz = 3\n    cfg.model.n_heads = 3\n"
                  "    cfg.optimizer.peak_lr = 'fast'\n"
                  "  return cfg\n")
  with pytest.raises(ConfigError) as error:
    run_config.load_config(str(path), ["--config.data.seq_len=8"])
  problems = error.value.problems
  assert f"unknown key train.stepz in {path}; did you mean train.steps?" in problems
  assert (f"optimizer.peak_lr = 'fast' should be of type float, got str (in {path})"
          in problems)
  assert any(p.startswith("model.head_dim: model.d_model=128 is not divisible by "
                          "model.n_heads=3") and p.endswith(f"(in {path})") for p in problems)
  assert "data.seq_len must be at least 16, got 8" in problems  # set by the override: no file
  with pytest.raises(ConfigError, match=r"^invalid config:\n  - --config.model.vocab_size=x: "
                                        r"model.vocab_size='x' is not an int$"):
    run_config.load_config("tg_tiny", ["model.vocab_size=x"], folder=configs.FOLDER)


def test_a_runs_config_by_name_and_overrides_as_config_flags_parsed_them():
  run = run_config.load_config("tgtree_tiny", [
      "--config.data.ptb_paths=('a.mrg','trees/')", "--config.model.n_kv_heads=2",
      "--config.optimizer.peak_lr=1e-3", "--config.checkpoint.resume=false",
      "--config.model.compute_dtype=bfloat16"], folder=configs.FOLDER)
  assert run.data.ptb_paths == ("a.mrg", "trees/") and run.model.n_kv_heads == 2
  assert run.optimizer.peak_lr == 1e-3 and run.checkpoint.resume is False
  assert run.model.compute_dtype.name == "bfloat16"
  assert run.to_dict()["model"]["compute_dtype"] == "bfloat16"
  assert run_config.validate(run.to_dict()) == run
  with pytest.raises(ConfigError, match="scale '2b' is not one of tiny, 100m, 500m, 1b"):
    run_config.validate({**run.to_dict(), "scale": "2b"})


@dataclasses.dataclass(frozen=True)
class Scaled:
  scale: str
  width: int
  tiny_only: int = option(3, scales=("tiny",))
  late: bool = option(False, required=False)


def test_a_complete_config_with_scale_only_keys():
  """`complete=True` (a run's config): every required key must be given; a key of another
  scale is refused; a key added later (`required=False`) may be left out."""
  loader = ConfigLoader(Scaled, complete=True, scales=("tiny", "1b"))
  assert loader.validate({"scale": "tiny", "width": 2, "tiny_only": 1}) == Scaled("tiny", 2, 1)
  assert loader.validate({"scale": "1b", "width": 2}) == Scaled("1b", 2)
  with pytest.raises(ConfigError) as error:
    loader.validate({"scale": "1b", "tiny_only": 1}, source="saved.json")
  assert error.value.problems == ["key tiny_only in saved.json exists only at scale tiny, not 1b",
                                  "missing key width in saved.json"]


def test_config_builder_is_only_an_alias_and_nothing_in_the_package_imports_it():
  from slm_jax import config_builder
  assert config_builder.build is run_config.build
  assert config_builder.RunConfig is run_config.RunConfig
  assert config_builder.ConfigError is ConfigError is run_config.ConfigError
  assert config_builder.did_you_mean is config_files.did_you_mean
  importers = [f"{path}:{line}" for path in sorted((ROOT / "slm_jax").rglob("*.py"))
               for line, target in imported_modules(path, module_name(path, ROOT))
               if target == "slm_jax.config_builder"]
  assert importers == []


# ------------------------------------------------------------------ how gtca.train maps onto it


@dataclasses.dataclass(frozen=True)
class Sweep:
  """gtca/run_config.py's keys as a section: sweep keys as tuples, required paths as rules."""
  backbone: str = ""
  out: str = ""
  methods: tuple[str, ...] = ("gtca",)
  seeds: tuple[int, ...] = (0,)
  stage_steps: tuple[int, int, int] = (200, 200, 200)
  lr: float = 1e-3
  blimp_pairs: bool = True

  def __post_init__(self):
    rules = Rules("", self)
    if rules.typed:
      for key in ("backbone", "out"):
        rules.need(bool(getattr(self, key)), f"{key} is required (--{key}=… or `{key}` in the "
                   "--config file)")
      rules.need(bool(self.seeds), "seeds is empty")
    rules.done()


def test_a_gtca_sweep_maps_onto_the_loader(tmp_path):
  loader = ConfigLoader(Sweep, aliases={k: k for k in ("backbone", "out", "methods", "seeds",
                                                       "stage_steps", "lr")})
  path = tmp_path / "c.py"
  path.write_text("import ml_collections\ndef get_config():\n  c = ml_collections.ConfigDict()\n"
                  "  c.backbone = 'runs/b'\n  c.out = 'o'\n  c.seeds = (0, 1)\n"
                  "  c.methods = 'gtca,lora_only'\n  c.lr = 3e-3\n  return c\n")
  sweep = loader.load(str(path), ["--config.seeds=3", "--config.blimp_pairs=false"],
                      {"lr": 5e-3, "stage_steps": "1,2,3"})
  assert sweep == Sweep("runs/b", "o", ("gtca", "lora_only"), (3,), (1, 2, 3), 5e-3, False)
  with pytest.raises(ConfigError) as error:
    loader.load(None, ["--config.stage_step=1,1,1", "--config.lr=fast"], {"out": "o"})
  assert error.value.problems == [
      "unknown key stage_step in --config.stage_step=1,1,1; did you mean stage_steps?",
      "--config.lr=fast: lr='fast' is not a float",
      "backbone is required (--backbone=… or `backbone` in the --config file)"]
