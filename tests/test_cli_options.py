"""`slm_jax.cli_options` (as every CLI reads it: `cli.option` / `cli.parse_options`): a CLI's flags
declared as a frozen dataclass, parsed into it — types from the annotations, bool flags, choices,
aliases and old spellings (with their notice), exclusive groups, subcommands, and the one-line
errors (exit 2)."""

from __future__ import annotations

import dataclasses

import pytest

from slm_jax import cli

SOURCE = cli.Exclusive("source", required=True)


@cli.options
class DemoOptions:
  inputs: tuple[str, ...] = cli.option((), positional=True, help="files")
  batch_size: int = cli.option(8, help="items per batch", aliases=("--bs",))
  rate: float | None = cli.option(None, help="a rate")
  force: bool = cli.option(False, help="replace")
  share: bool = cli.option(True, type=cli.boolean, help="true|false")
  dtype: str = cli.option("float32", choices=("float32", "bfloat16"), help="dtype")
  label: tuple[str, ...] | None = cli.option(None, help="repeat")
  shard: tuple[int, int] = cli.option((0, 1), type=cli.parse_shard, help="i/n")
  checkpoint: str | None = cli.option(None, exclusive=SOURCE, help="a model",
                                      renamed={"--workdir": "the old --checkpoint"},
                                      renamed_note="which names any model")
  text_file: str | None = cli.option(None, exclusive=SOURCE, help="texts")
  out: str = cli.option(help="where to write")  # required, after defaults: keyword-only

  def validate(self):
    if self.batch_size < 1:
      raise cli.CliError(f"--batch_size must be >= 1, got {self.batch_size}")


def parse(argv):
  return cli.parse_options(DemoOptions, argv, prog="demo", doc="A demo.")


def test_types_defaults_and_repeats():
  options = parse(["--out=o", "a", "b", "--batch_size=4", "--rate=0.5", "--label=x",
                   "--label=y", "--shard=1/2", "--text_file=t"])
  assert options == DemoOptions(out="o", inputs=("a", "b"), batch_size=4, rate=0.5,
                                label=("x", "y"), shard=(1, 2), text_file="t")
  assert isinstance(options.batch_size, int) and isinstance(options.rate, float)
  defaults = parse(["--out=o", "--text_file=t"])
  assert (defaults.inputs, defaults.batch_size, defaults.rate, defaults.label, defaults.shard,
          defaults.force, defaults.share, defaults.dtype) == ((), 8, None, None, (0, 1), False,
                                                              True, "float32")
  with pytest.raises(dataclasses.FrozenInstanceError):
    defaults.out = "other"  # pytype: disable=not-writable


def test_bools_dashes_and_aliases():
  options = parse(["--out=o", "--force", "--share=false", "--text-file=t", "--batch-size=3"])
  assert (options.force, options.share, options.text_file, options.batch_size) == (
      True, False, "t", 3)
  assert parse(["--out=o", "--text_file=t", "--bs=5"]).batch_size == 5


def test_an_old_spelling_gives_its_value_with_a_notice(capsys):
  options = parse(["--out=o", "--workdir=w"])
  assert options.checkpoint == "w"
  assert capsys.readouterr().err == ("note: --workdir is the old spelling of --checkpoint "
                                     "(which names any model)\n")
  assert parse(["--out=o", "--checkpoint=c"]).checkpoint == "c"
  assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv, message", [
    (["--out=o", "--text_file=t", "--dtype=float16"], "argument --dtype: invalid choice"),
    (["--out=o", "--text_file=t", "--batch_size=x"], "argument --batch_size/--batch-size/--bs:"
     " invalid int value: 'x'"),
    (["--out=o", "--text_file=t", "--nope=1"], "unrecognized arguments: --nope=1"),
    (["--text_file=t"], "the following arguments are required: --out"),
    (["--out=o"], "one of the arguments --checkpoint --workdir --text_file/--text-file is required"),
    (["--out=o", "--checkpoint=c", "--text-file=t"], "not allowed with argument"),
    (["--out=o", "--workdir=w", "--text_file=t"], "not allowed with argument"),
    (["--out=o", "--text_file=t", "--share=maybe"], "expected true or false, got 'maybe'"),
])
def test_a_bad_flag_is_one_line_and_exit_2(capsys, argv, message):
  with pytest.raises(SystemExit) as stopped:
    parse(argv)
  assert stopped.value.code == cli.EXIT_USAGE
  err = capsys.readouterr().err
  assert err.startswith("error: demo: ") and message in err and err.count("\n") == 1, err


def test_validate_errors_are_the_commands_one_line_error(capsys):
  def main(argv):
    parse(argv)
  assert cli.run(main, ["--out=o", "--text_file=t", "--batch_size=0"]) == cli.EXIT_USAGE
  assert capsys.readouterr().err == "error: --batch_size must be >= 1, got 0\n"


def test_help_lists_every_flag_and_debug(capsys):
  with pytest.raises(SystemExit) as stopped:
    parse(["--help"])
  assert stopped.value.code == 0
  text = capsys.readouterr().out
  assert text.startswith("usage: demo") and "A demo." in text
  for flag in ("--out", "--batch_size", "--rate", "--force", "--share", "--dtype", "--label",
               "--shard", "--checkpoint", "--workdir", "--text_file", "--debug", "inputs",
               "the old --checkpoint", "items per batch"):
    assert flag in text, flag
  assert parse(["--out=o", "--text_file=t", "--debug"]).out == "o"  # --debug: cli.run's


def test_options_are_a_frozen_dataclass_and_bool_flags_default_false():
  with pytest.raises(TypeError, match="frozen dataclass"):
    cli.parse_options(dataclasses.make_dataclass("Loose", [("out", str, "o")]), [])

  @dataclasses.dataclass(frozen=True)
  class On:
    verbose: bool = cli.option(True)
  with pytest.raises(TypeError, match="default is False"):
    cli.parse_options(On, [])


@cli.options
class FirstOptions:
  """The first command."""
  path: str = cli.option(positional=True)
  count: int = cli.option(1)


@dataclasses.dataclass(frozen=True)
class SecondOptions:
  """The second command."""
  redo: bool = cli.option(False)


def test_subcommands_and_unknown_arguments_passed_on():
  commands = {"first": (FirstOptions, "The first."), "second": (SecondOptions, None)}
  assert cli.parse_command(commands, ["first", "p", "--count=2"], prog="demo") == (
      "first", FirstOptions(path="p", count=2))
  assert cli.parse_command(commands, ["second", "--redo", "--runner=X"], prog="demo",
                           known=True) == ("second", SecondOptions(redo=True), ["--runner=X"])
  options, rest = cli.parse_known_options(FirstOptions, ["p", "--config.x=1"])
  assert options == FirstOptions(path="p") and rest == ["--config.x=1"]
