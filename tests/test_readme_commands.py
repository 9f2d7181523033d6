"""`.ci/run` runs the README's test command, step by step: every step of the README's second
command appears in `.ci/run` (with pip's `-q` added), in the same order."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
  blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
  return [b.strip() for b in blocks]


def _ci_steps() -> list[str]:
  steps = []
  for line in (ROOT / ".ci" / "run").read_text().splitlines():
    line = line.strip()
    if line.startswith((".venv/bin/", "python3 -m venv")) and "--upgrade pip" not in line:
      steps.append(re.sub(r" -q(?= )", "", line, count=1) if re.search(r"pip (install|download)",
                                                                      line) else line)
  return steps


def test_ci_runs_the_readme_test_command():
  main_job, tests = _readme_commands()[:2]
  assert "slm_jax.main" in main_job and "pytest" in tests
  assert tests.split(" && ") == _ci_steps()


def test_both_readme_commands_start_from_a_fresh_venv():
  for command in _readme_commands()[:2]:
    assert command.startswith("python3 -m venv .venv && .venv/bin/pip install -r "
                              "requirements.txt -e ")
