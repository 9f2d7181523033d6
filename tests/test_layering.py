"""Layers import downwards only: a module may import its own layer and the layers below it.

  0 utilities    kinds, trees, sections, buckets, cli, benchtools, data.inputs (no layered imports)
  1 structure    ptb, linearize, structure, tokenizer(_bases), configurations
  2 data         corpus, data, parse (readers, splitting, backends, stage)
  3 kernels      kernels — and kernels read only kinds, structure and their own planner
  4 model        model, parser (its own chart model), pushdown (structure and stack: layer 1;
                 scoring and generate: layer 6)
  5 train/config train, config_builder, configs
  6 eval         eval, gtca, downstream
  7 CLIs         main, prepare, explain, evaluate, score, aot, plot, beam_pipelines,
                 parse/__main__, the parser's CLIs, gtca's CLIs (train, evaluate, probe, cache),
                 finetune

Every `import` / `from … import` is read with `ast`, also those inside functions (a lazy import
is still a dependency). `layer_violations(root)` is a function so it can be pointed at another
checkout: on the tree before the seams restructuring it lists data → prepare and kernels → model.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (module prefix, layer); the longest matching prefix wins.
LAYERS = (
    ("slm_jax.kinds", 0), ("slm_jax.trees", 0), ("slm_jax.sections", 0), ("slm_jax.buckets", 0),
    ("slm_jax.cli", 0), ("slm_jax.benchtools", 0),
    ("slm_jax.data.inputs", 0),  # input discovery: imports nothing, so the PTB reader can use it
    ("slm_jax.ptb", 1), ("slm_jax.linearize", 1), ("slm_jax.structure", 1),
    ("slm_jax.tokenizer", 1), ("slm_jax.tokenizer_bases", 1), ("slm_jax.configurations", 1),
    ("slm_jax.corpus", 2), ("slm_jax.data", 2), ("slm_jax.parse", 2),
    ("slm_jax.kernels", 3),
    ("slm_jax.model", 4), ("slm_jax.parser", 4), ("slm_jax.hf", 4),
    ("slm_jax.pushdown", 4),  # the Pushdown reference: its model and inference
    ("slm_jax.pushdown.structure", 1), ("slm_jax.pushdown.stack", 1),  # silver structure
    ("slm_jax.pushdown.scoring", 6),  # the evaluators' scorers for Pushdown runs
    ("slm_jax.pushdown.generate", 6),  # its XSum search (reuses downstream.generate's helpers)
    ("slm_jax.train", 5), ("slm_jax.config_builder", 5), ("slm_jax.configs", 5),
    ("slm_jax.gtca", 6), ("slm_jax.eval", 6), ("slm_jax.downstream", 6),
    ("slm_jax.main", 7), ("slm_jax.prepare", 7), ("slm_jax.explain", 7), ("slm_jax.evaluate", 7),
    ("slm_jax.score", 7), ("slm_jax.aot", 7), ("slm_jax.plot", 7), ("slm_jax.beam_pipelines", 7),
    ("slm_jax.parse.__main__", 7),
    ("slm_jax.parser.train", 7), ("slm_jax.parser.parse", 7), ("slm_jax.parser.evalb", 7),
    ("slm_jax.hf.export", 7), ("slm_jax.tfds_build", 7),
    ("slm_jax.gtca.train", 7), ("slm_jax.gtca.evaluate", 7), ("slm_jax.gtca.probe", 7),
    ("slm_jax.gtca.cache", 7),
    ("slm_jax.finetune", 7),
    ("pallas_kernels", 3),  # where the kernels lived before they moved into the package
)
PACKAGES = ("slm_jax", "pallas_kernels")
NAMES = ("utilities", "structure", "data", "kernels", "model", "train/config", "eval", "CLIs")
# Kernels are compiled alone: besides each other they may read only these.
KERNEL_READS = ("slm_jax.kinds", "slm_jax.structure", "slm_jax.kernels", "pallas_kernels")


def layer_of(module: str) -> int | None:
  best = None
  for prefix, layer in LAYERS:
    if module == prefix or module.startswith(prefix + "."):
      if best is None or len(prefix) > len(best[0]):
        best = (prefix, layer)
  return None if best is None else best[1]


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
  parts = list(path.relative_to(root).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts)


def _is_module(root: pathlib.Path, name: str) -> bool:
  path = root.joinpath(*name.split("."))
  return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(path: pathlib.Path, module: str,
                     root: pathlib.Path = ROOT) -> list[tuple[int, str]]:
  """(line, module) of every slm_jax import in the file (relative imports resolved)."""
  tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
  package = module if path.name == "__init__.py" else module.rpartition(".")[0]
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.extend((node.lineno, alias.name) for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        anchor = package.split(".")
        anchor = anchor[:len(anchor) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
      # `from slm_jax import data` imports the module slm_jax.data, not just the package.
      for alias in node.names:
        candidate = f"{base}.{alias.name}"
        found.append((node.lineno, candidate if _is_module(root, candidate) else base))
  return sorted({(line, name) for line, name in found if name.startswith(PACKAGES)})


def layer_violations(root: pathlib.Path = ROOT) -> list[str]:
  problems = []
  files = [p for package in PACKAGES if (root / package).is_dir()
           for p in sorted((root / package).rglob("*.py"))]
  for path in files:
    module = module_name(path, root)
    own = layer_of(module)
    if own is None:
      if module != "slm_jax":
        problems.append(f"{module}: not in the layer table (tests/test_layering.py LAYERS)")
      continue
    for line, target in imported_modules(path, module, root):
      theirs = layer_of(target)
      if theirs is None:
        continue  # the package itself
      where = f"{path.relative_to(root)}:{line}"
      if theirs > own:
        problems.append(f"{where}: {module} ({NAMES[own]}) imports {target} ({NAMES[theirs]})")
      elif own == 3 and not target.startswith(KERNEL_READS):
        problems.append(f"{where}: kernel module {module} imports {target} (kernels read only "
                        f"{', '.join(KERNEL_READS)})")
  return problems


def test_layers_import_downwards_only():
  assert layer_violations() == []


def test_the_check_sees_upward_and_lazy_imports(tmp_path):
  """A data module importing a CLI lazily and a kernel importing the model are both caught."""
  package = tmp_path / "slm_jax"
  (package / "data").mkdir(parents=True)
  (package / "kernels").mkdir()
  (package / "__init__.py").write_text("")
  (package / "data" / "__init__.py").write_text("")
  (package / "kernels" / "__init__.py").write_text("")
  (package / "data" / "loader.py").write_text(
      "def f():\n  from slm_jax.prepare import DocumentSource\n")
  (package / "kernels" / "fast.py").write_text(
      "from slm_jax.model.attention import register_attention_kernel\n"
      "from ..data import loader\n")
  problems = layer_violations(tmp_path)
  assert any("slm_jax.data.loader (data) imports slm_jax.prepare (CLIs)" in p for p in problems)
  assert any("slm_jax.kernels.fast (kernels) imports slm_jax.model.attention" in p
             for p in problems)
  assert any("kernel module slm_jax.kernels.fast imports slm_jax.data.loader" in p
             for p in problems)
