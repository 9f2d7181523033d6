"""slm_jax/parser imports only the layers below it (kinds, trees, ptb, linearize, cli, tables,
splitting, the config machinery sections and config_files, the writer lock) and third-party libraries — never the
model or evaluation stacks, nor the parse stage (which runs the parser: `parse.slm_backend`). The
one exception is `parser/train.py`, the parser's training CLI (layer 8): it trains on the project's
one training set-up and loop (`slm_jax.train.state`, `loop`, `sweep`, `identity`)."""

from __future__ import annotations

import ast
import pathlib

PARSER = pathlib.Path(__file__).resolve().parents[1] / "slm_jax" / "parser"
ALLOWED = ("slm_jax.kinds", "slm_jax.trees", "slm_jax.ptb", "slm_jax.linearize", "slm_jax.cli",
           "slm_jax.tables", "slm_jax.splitting", "slm_jax.sections", "slm_jax.config_files",
           "slm_jax.locks", "slm_jax.identity", "slm_jax.parser")
# The training CLI runs on the one training loop (it sits at layer 8 in tests/test_layering.py).
ALLOWED_IN = {"train.py": ("slm_jax.train.loop", "slm_jax.train.sweep",
                           "slm_jax.train.state", "slm_jax.train")}


def imported_modules(path: pathlib.Path) -> set[str]:
  names = set()
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      base = node.module
      names.add(base)
      if base == "slm_jax":  # from slm_jax import cli, ptb
        names.update(f"slm_jax.{alias.name}" for alias in node.names)
  return names


def test_parser_imports_only_lower_layers():
  files = sorted(PARSER.rglob("*.py"))
  assert len(files) >= 10
  bad = {}
  for path in files:
    for name in imported_modules(path):
      if name == "slm_jax" or not name.startswith("slm_jax"):
        continue
      if name in ALLOWED_IN.get(path.name, ()):  # exact names only
        continue
      if not any(name == a or name.startswith(a + ".") for a in ALLOWED):
        bad.setdefault(path.name, []).append(name)
  assert not bad, bad


def test_the_scan_sees_a_forbidden_import(tmp_path):
  sample = tmp_path / "x.py"
  sample.write_text("from slm_jax import model, ptb\nimport slm_jax.eval.proposals\n")
  assert {"slm_jax.model", "slm_jax.ptb", "slm_jax.eval.proposals"} <= imported_modules(sample)
