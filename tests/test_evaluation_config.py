"""The evaluation's settings are one typed config (`evaluation.config.EvaluationConfig`) read by the
training CLIs' config loader: a config file loads, a wrong key is one error naming it, the
`--protocol` presets are packaged configs whose choices explicit flags override, and every rule is
checked at start-up naming its key."""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import pytest

from slm_jax import evaluate
from slm_jax.config_files import ConfigError
from slm_jax.evaluation import protocols
from slm_jax.evaluation.config import LOADER, EvaluationConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _write(path: pathlib.Path, body: str) -> pathlib.Path:
  path.write_text(f"def get_config():\n  return {body}\n")
  return path


def test_a_config_file_loads_and_flags_and_overrides_win(tmp_path):
  path = _write(tmp_path / "mine.py", '{"tasks": "blimp,docppl", "models": {"workdirs": ["w"]}, '
                '"syntactic": {"beam": 8, "min_len": 4}, "run": {"out": "o", "max_items": 5}}')
  config = LOADER.load(str(path))
  assert config.tasks == ("blimp", "docppl") and config.models.workdirs == ("w",)
  assert (config.syntactic.beam, config.syntactic.min_len, config.run.max_items) == (8, 4, 5)
  assert config.protocol is None and config.syntactic.fast_track == 30  # the defaults
  cli_config = evaluate.parse_args([f"--config={path}", "--out=elsewhere", "--beam=16",
                                    "--config.syntactic.min_len=3"])
  assert (cli_config.syntactic.beam, cli_config.syntactic.min_len) == (16, 3)
  assert cli_config.run.out == "elsewhere" and cli_config.run.max_items == 5


def test_the_output_folder_may_come_from_the_config_file_alone(tmp_path, capsys):
  path = _write(tmp_path / "out.py", '{"models": {"workdirs": ["w"]}, "run": {"out": "o"}}')
  assert evaluate.parse_args([f"--config={path}"]).run.out == "o"
  with pytest.raises(SystemExit) as stopped:
    evaluate.parse_args(["--workdir=w"])
  assert stopped.value.code == 2 and "run.out is required" in capsys.readouterr().err


def test_a_wrong_key_is_one_error_naming_it(tmp_path, capsys):
  path = _write(tmp_path / "typo.py", '{"models": {"workdirs": ["w"]}, "run": {"out": "o"}, '
                '"syntactic": {"beem": 8}}')
  with pytest.raises(ConfigError) as error:
    LOADER.load(str(path))
  assert error.value.problems == [f"unknown key syntactic.beem in {path}; did you mean "
                                  "syntactic.beam?"]
  with pytest.raises(SystemExit) as stopped:
    evaluate.parse_args(["--workdir=w", "--out=o", "--config.run.seeed=1"])
  assert stopped.value.code == 2 and "unknown key run.seeed" in capsys.readouterr().err


def test_every_rule_is_checked_at_start_up_naming_its_key():
  with pytest.raises(ConfigError) as error:
    LOADER.load(None, ["syntactic.beam=0", "generation.gen_beam=0", "run.dtype=float16"],
                {"workdir": ["w"], "out": "o"})
  assert error.value.problems == ["syntactic.beam=0: must be at least 1",
                                  "generation.gen_beam=0: must be at least 1",
                                  "run.dtype='float16': must be one of float32, bfloat16"]
  with pytest.raises(ConfigError, match="tasks=boolq needs one downstream.boolq_finetuned"):
    LOADER.load(None, ["tasks=boolq"], {"workdir": ["a", "b"], "boolq_finetuned": ["f"],
                                        "out": "o"})


def test_protocol_paper_sets_its_choices_and_an_explicit_flag_wins():
  paper = LOADER.load("paper", flags={"workdir": ["w"], "out": "o"})
  chosen = protocols.in_force(paper)
  assert chosen["protocol"] == "paper"
  assert (chosen["tree_scoring"], chosen["beam_score_cnt2"], chosen["sg_suites"]) == (
      "terminal", False, "paper32")
  flag_wins = evaluate.parse_args(["--workdir=w", "--out=o", "--protocol=paper",
                                   "--tree_scoring=joint"])
  assert flag_wins.syntactic.tree_scoring == "joint" and flag_wins.protocol == "paper"
  assert flag_wins.syntactic.sg_suites == "paper32"  # the rest of the preset stays
  # spec is the defaults, named
  spec = LOADER.load("spec", flags={"workdir": ["w"], "out": "o"})
  assert dataclasses.replace(spec, protocol=None) == LOADER.load(
      None, flags={"workdir": ["w"], "out": "o"})


def test_protocol_and_config_together_are_refused(tmp_path):
  path = _write(tmp_path / "c.py", "{}")
  with pytest.raises(SystemExit):
    evaluate.parse_args(["--workdir=w", "--out=o", "--protocol=paper", f"--config={path}"])


def test_the_config_is_typed_and_frozen():
  config = LOADER.load(None, flags={"workdir": ["w"], "out": "o", "mc_tasks": "arc_easy,piqa"})
  assert isinstance(config, EvaluationConfig)
  assert config.downstream.mc_tasks == ("arc_easy", "piqa")
  with pytest.raises(dataclasses.FrozenInstanceError):
    config.run.out = "x"  # type: ignore[misc]


def test_the_evaluation_library_reads_no_argparse_namespace():
  """No `args.x` in `slm_jax/evaluation/`: every function takes the config or a section."""
  reads = []
  for path in sorted((ROOT / "slm_jax" / "evaluation").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id == "args"):
        reads.append(f"{path.name}:{node.lineno} args.{node.attr}")
  assert reads == []


def test_every_flag_spelling_still_reaches_its_key():
  config = evaluate.parse_args(["--workdir=a", "--workdir=b", "--checkpoint=c.gguf",
                                "--checkpoint=d.gguf", "--out=o", "--downstream_data=data",
                                "--docppl_ptb=x.mrg", "--docppl-ptb=y.mrg", "--mc-tasks=piqa",
                                "--gen_beam=3", "--beam-score-cnt2=false"])
  assert config.models.workdirs == ("a", "b") and config.models.checkpoints == ("c.gguf", "d.gguf")
  assert config.downstream.dir == "data" and config.downstream.mc_tasks == ("piqa",)
  assert config.syntactic.docppl_ptb == ("x.mrg", "y.mrg")
  assert config.generation.gen_beam == 3 and config.syntactic.beam_score_cnt2 is False
