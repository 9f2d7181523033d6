"""Layers import downwards only: a module may import its own layer and the layers below it.

  0 utilities    kinds, trees, sections, config_files, buckets, cli (cli_errors, cli_flags,
                 cli_options), benchtools, tables, inputs, locks, identity, files
                 (no layered imports)
  1 structure    ptb, linearize, structure, tokenizer(_bases), configurations, splitting
  2 data         corpus, data
  3 kernels      kernels — and kernels read only kinds, structure and their own planner
  4 model        model, parser (its own chart model), hf, parse (the parse stage: readers,
                 backends, stage — it runs a parser)
  5 inference    inference (teacher-forced scoring, KV-cache decoding, beam search, generation:
                 a model run), pushdown (the Pushdown reference: its silver structure, model,
                 attachment beam, scorers and generation)
  6 train/config train (with run_config), config_builder (its old name), configs
  7 eval         eval, gtca, downstream, evaluation (the evaluation run over eval and downstream)
  8 CLIs         main, prepare, explain, evaluate, score, export, aot, plot, beam_pipelines,
                 parse/__main__, the parser's CLIs, gtca's CLIs (train, evaluate, probe,
                 cache), finetune

Every `import` / `from … import` is read with `ast`, also those inside functions (a lazy import
is still a dependency). `layer_violations(root)` is a function so it can be pointed at another
checkout: on the tree before the seams restructuring it lists data → prepare and kernels → model.

No import cycles either (`import_cycles(root)`), between modules nor between packages (a package
= the first two name parts: `slm_jax.data`, `slm_jax.ptb`; a CLI inside a package belongs to it).
A layer table alone allows a cycle inside one layer, and a per-module exception can hide one:
on the tree before the consolidation of issue #31 it lists data ↔ parse ↔ parser ↔ ptb and
config_builder ↔ downstream ↔ hf ↔ pushdown ↔ train, besides the gtca module cycles.
"""

from __future__ import annotations

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (module prefix, layer); the longest matching prefix wins.
LAYERS = (
    ("slm_jax.kinds", 0), ("slm_jax.trees", 0), ("slm_jax.sections", 0), ("slm_jax.buckets", 0),
    ("slm_jax.cli", 0), ("slm_jax.cli_errors", 0), ("slm_jax.cli_flags", 0),
    ("slm_jax.cli_options", 0), ("slm_jax.benchtools", 0), ("slm_jax.tables", 0),
    ("slm_jax.inputs", 0), ("slm_jax.config_files", 0), ("slm_jax.locks", 0),
    ("slm_jax.identity", 0), ("slm_jax.files", 0),
    ("slm_jax.ptb", 1), ("slm_jax.linearize", 1), ("slm_jax.structure", 1),
    ("slm_jax.tokenizer", 1), ("slm_jax.tokenizer_bases", 1), ("slm_jax.configurations", 1),
    ("slm_jax.splitting", 1),
    ("slm_jax.corpus", 2), ("slm_jax.data", 2),
    ("slm_jax.kernels", 3),
    ("slm_jax.model", 4), ("slm_jax.parser", 4), ("slm_jax.hf", 4),
    ("slm_jax.parse", 4),  # the parse stage runs a parser (benepar, or ours: parse.slm_backend)
    ("slm_jax.inference", 5),  # scoring, KV-cache decoding, beam search, generation
    ("slm_jax.pushdown", 5),  # the Pushdown reference: its model and its inference
    ("slm_jax.train", 6), ("slm_jax.config_builder", 6), ("slm_jax.configs", 6),
    ("slm_jax.gtca", 7), ("slm_jax.eval", 7), ("slm_jax.downstream", 7),
    ("slm_jax.evaluation", 7),  # one evaluation run: above eval and downstream
    ("slm_jax.main", 8), ("slm_jax.prepare", 8), ("slm_jax.explain", 8), ("slm_jax.evaluate", 8),
    ("slm_jax.score", 8), ("slm_jax.aot", 8), ("slm_jax.plot", 8), ("slm_jax.beam_pipelines", 8),
    ("slm_jax.parse.__main__", 8),
    ("slm_jax.parser.train", 8), ("slm_jax.parser.parse", 8), ("slm_jax.parser.evalb", 8),
    ("slm_jax.export", 8), ("slm_jax.tfds_build", 8),
    ("slm_jax.gtca.train", 8), ("slm_jax.gtca.evaluate", 8), ("slm_jax.gtca.probe", 8),
    ("slm_jax.gtca.cache", 8),
    ("slm_jax.finetune", 8),
    ("pallas_kernels", 3),  # where the kernels lived before they moved into the package
)
PACKAGES = ("slm_jax", "pallas_kernels")
NAMES = ("utilities", "structure", "data", "kernels", "model", "inference", "train/config", "eval",
         "CLIs")
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


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
  """module → the slm_jax modules it imports (lazily or not), itself and the bare package left
  out."""
  graph: dict[str, set[str]] = collections.defaultdict(set)
  for package in PACKAGES:
    for path in sorted((root / package).rglob("*.py")) if (root / package).is_dir() else ():
      module = module_name(path, root)
      graph[module] |= {t for _, t in imported_modules(path, module, root)
                        if t != module and t not in PACKAGES}
  return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
  """The cycles of a directed graph: its strongly connected components of more than one node,
  each sorted (Tarjan's algorithm, iterative)."""
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  found = []
  for start in sorted(set(graph) | {t for ts in graph.values() for t in ts}):
    if start in index:
      continue
    work = [(start, iter(sorted(graph.get(start, ()))))]
    index[start] = low[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is not None:
        if child not in index:
          index[child] = low[child] = len(index)
          stack.append(child)
          on_stack.add(child)
          work.append((child, iter(sorted(graph.get(child, ())))))
        elif child in on_stack:
          low[node] = min(low[node], index[child])
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        component = []
        while True:
          member = stack.pop()
          on_stack.discard(member)
          component.append(member)
          if member == node:
            break
        if len(component) > 1:
          found.append(sorted(component))
  return sorted(found)


def package_of(module: str) -> str:
  return ".".join(module.split(".")[:2])


def import_cycles(root: pathlib.Path = ROOT) -> list[str]:
  """One line per module cycle and per package cycle (with the imports that close it)."""
  graph = import_graph(root)
  lines = [f"module cycle: {' ↔ '.join(c)}" for c in strongly_connected(graph)]
  packages: dict[str, set[str]] = collections.defaultdict(set)
  for module, targets in graph.items():
    packages[package_of(module)] |= {package_of(t) for t in targets} - {package_of(module)}
  for cycle in strongly_connected(packages):
    edges = [f"{m} → {t}" for m in sorted(graph) for t in sorted(graph[m])
             if package_of(m) in cycle and package_of(t) in cycle
             and package_of(m) != package_of(t)]
    lines.append(f"package cycle: {' ↔ '.join(cycle)} ({'; '.join(edges)})")
  return lines


def test_no_import_cycles():
  cycles = import_cycles()
  assert not cycles, "\n".join(cycles)


def test_the_cycle_check_sees_lazy_and_package_cycles(tmp_path):
  """A lazy import closing a module cycle, and two packages importing each other through
  different modules (no module cycle), are both reported."""
  package = tmp_path / "slm_jax"
  for folder in ("data", "parse"):
    (package / folder).mkdir(parents=True)
    (package / folder / "__init__.py").write_text("")
  (package / "__init__.py").write_text("")
  (package / "data" / "a.py").write_text("from slm_jax.data import b\n")
  (package / "data" / "b.py").write_text("def f():\n  from . import a\n")
  (package / "data" / "c.py").write_text("from slm_jax.parse import stage\n")
  (package / "parse" / "stage.py").write_text("from slm_jax.data.a import x\n")
  (package / "ptb.py").write_text("import slm_jax.kinds\n")
  assert import_cycles(tmp_path) == [
      "module cycle: slm_jax.data.a ↔ slm_jax.data.b",
      "package cycle: slm_jax.data ↔ slm_jax.parse (slm_jax.data.c → slm_jax.parse.stage; "
      "slm_jax.parse.stage → slm_jax.data.a)"]


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
