"""`slm_jax.cli`'s error contract for input files and missing extras: invalid UTF-8 names file,
line and byte; a module of an optional extra that is missing says which extra installs it (also
for `--help` of a CLI built on one)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slm_jax import cli

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_read_utf8_names_file_line_and_byte(tmp_path):
  path = tmp_path / "in.txt"
  path.write_bytes(b"\xef\xbb\xbfgood line\nbad \xff here\n")
  with pytest.raises(cli.CliError, match=rf"^{path}:2: invalid UTF-8 at byte 17 \(invalid "
                     r"start byte\); save the file as UTF-8$"):
    cli.read_utf8(path)
  path.write_bytes(b"\xef\xbb\xbfgood line\n")
  assert cli.read_utf8(path) == "good line\n"  # the BOM dropped


def test_a_missing_extra_says_how_to_install_it():
  error = ModuleNotFoundError("No module named 'apache_beam'", name="apache_beam")
  assert cli.describe_error(error) == ("No module named 'apache_beam': the 'beam' extra is not "
                                       "installed (pip install -e '.[beam]')")
  other = ModuleNotFoundError("No module named 'nowhere'", name="nowhere")
  assert cli.describe_error(other) == "No module named 'nowhere'"


@pytest.mark.parametrize("argv, code, expected", [
    (["--help"], 0, "usage: python -m slm_jax.beam_pipelines"),
    (["prepare", "--output=/tmp/x", "in"], 2, "the 'beam' extra is not installed"),
])
def test_beam_pipelines_without_apache_beam(argv, code, expected):
  script = ("import runpy, sys\nsys.modules['apache_beam'] = None\n"
            f"sys.argv = ['beam_pipelines', *{argv!r}]\n"
            "runpy.run_module('slm_jax.beam_pipelines', run_name='__main__')\n")
  done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                        timeout=120)
  assert done.returncode == code, done.stderr[-2000:]
  assert expected in done.stdout + done.stderr and "Traceback" not in done.stderr
