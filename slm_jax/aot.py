"""Ahead-of-time reports: does a configuration fit a TPU slice, and how many FLOPs is a step?

  python -m slm_jax.aot --config=configs/tgtree_1b.py --topology=v5p-64
  python -m slm_jax.aot --config=tgtree_1b --config=tg_1b --topology=v5e-256 --config.mesh.fsdp=16
  python -m slm_jax.aot --config=tgtree_100m --topology=local        # this machine's devices (GPU)

Compiles the run's real train step (`slm_jax.train.steps.make_train_step`, with the partition
table's shardings over the `(data, fsdp)` mesh and the run's `batch_layout`) for every chip of a
TPU topology on a CPU machine (`jax.experimental.topologies` with libtpu, as MaxText's
train_compile does), and prints XLA's own analysis per chip: arguments, outputs (less those
aliased to donated arguments), temporaries, generated code, their sum against the chip's HBM, and
the FLOPs of one step (XLA counts a loop body once, so its count of the micro-batch scan is
multiplied by the number of micro-batches; the optimizer update outside it is then counted A
times, a negligible excess). Nothing runs and nothing is allocated: parameters and optimizer state are
shapes only. `--topology=local` compiles for the devices of this machine (a GPU host gives the
GPU report; its memory limit is the device's own); cross-compiling for a GPU from a CPU machine is
not supported by the JAX toolchain here.

Attention: the step is traced and lowered with the topology's mesh in force, so the model's
`attention_impl` resolves for the target, not for this host: `auto` and `pallas_tpu` compile the
fused Pallas kernel through Mosaic (the real TPU compiler: tiling, layouts, VMEM / SMEM checks),
its rows split over the mesh by a shard_map; `xla` the `attends` mask materialized per
micro-batch. The "attention" column says which path each row compiled, read from the lowered
module (a Mosaic call, `tpu_custom_call`, or none). `--topology=local` compiles what the run
itself would use there.

libtpu: the `aot` extra (`pip install -e '.[aot]'`, the libtpu of jax 0.10.2), or
`--libtpu=/path/to/libtpu.so` (JAX's `TPU_LIBRARY_PATH`), e.g. a libtpu unpacked outside the
environment so that other JAX processes do not load it. The metadata server is never queried.

Exit codes: 0 every configuration fits, 2 one does not (`error: …` naming it, with what to
change) or bad input. `--config.a.b=v` overrides apply to every configuration.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import sys
import time
from typing import Any, Sequence

from slm_jax import benchtools, cli, config_files, configs

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Topology:
  """A TPU slice as libtpu names it (MaxText's accelerator table) and its chips' HBM."""

  topology_name: str
  chip_config_name: str
  chips_per_host_bounds: tuple[int, int, int]
  hbm_gib: float  # per chip


TOPOLOGIES = {
    "v4-8": Topology("v4:2x2x1", "megacore", (2, 2, 1), 32),
    "v4-32": Topology("v4:2x2x4", "megacore", (2, 2, 1), 32),
    "v4-128": Topology("v4:4x4x4", "megacore", (2, 2, 1), 32),
    "v5p-8": Topology("v5p:2x2x1", "megacore", (2, 2, 1), 95),
    "v5p-64": Topology("v5p:4x4x2", "megacore", (2, 2, 1), 95),
    "v5p-256": Topology("v5p:4x8x4", "megacore", (2, 2, 1), 95),
    "v5e-8": Topology("v5e:2x4", "default", (2, 4, 1), 16),
    "v5e-16": Topology("v5e:4x4", "default", (2, 2, 1), 16),
    "v5e-256": Topology("v5e:16x16", "default", (2, 2, 1), 16),
    "v6e-8": Topology("v6e:2x4", "default", (2, 4, 1), 32),
    "v6e-64": Topology("v6e:8x8", "default", (2, 2, 1), 32),
    "v6e-256": Topology("v6e:16x16", "default", (2, 2, 1), 32),
}
LOCAL = "local"


@dataclasses.dataclass(frozen=True)
class Report:
  """XLA's memory and cost analysis of one compiled train step, per chip (bytes, FLOPs)."""

  config: str
  topology: str
  chips: int
  mesh: str
  micro_batches: str  # "A × rows"
  attention_impl: str
  arguments: int
  outputs: int  # not aliased to a donated argument
  temporaries: int
  code: int
  limit: int | None  # the chip's memory (None: unknown, e.g. a CPU)
  flops: float  # one step, one chip: XLA's count of the scan body × the micro-batches
  model_flops: float  # (6·N + 12·L·H·K·T) · tokens per step, all chips (`train.mfu`)
  seconds: float  # compile time
  same_program_as: str = ""  # the configuration compiled for this one (`--share_programs`)

  @property
  def total(self) -> int:
    return self.arguments + self.outputs + self.temporaries + self.code

  @property
  def fits(self) -> bool:
    return self.limit is None or self.total <= self.limit


def _libtpu_path() -> str | None:
  """Where JAX finds libtpu: `TPU_LIBRARY_PATH`, else the installed `libtpu` package."""
  path = os.environ.get("TPU_LIBRARY_PATH", "")
  if path and pathlib.Path(path).is_file():
    return path
  try:
    import libtpu  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return libtpu.get_library_path()


def tpu_devices(name: str, libtpu: str | None = None) -> list[Any]:
  """The devices of TPU topology `name` (see `TOPOLOGIES`), made by libtpu without any chip."""
  if name not in TOPOLOGIES:
    raise cli.CliError(f"--topology={name}: unknown; expected {LOCAL} or one of "
                       f"{', '.join(TOPOLOGIES)}")
  if libtpu:
    if not pathlib.Path(libtpu).is_file():
      raise cli.CliError(f"--libtpu={libtpu}: no such file (give the path of libtpu.so)")
    os.environ["TPU_LIBRARY_PATH"] = str(libtpu)
  os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")  # never ask a metadata server
  if _libtpu_path() is None:
    raise cli.CliError(f"--topology={name} needs libtpu: pip install -e '.[aot]' (the libtpu of "
                       "jax 0.10.2; for another jax: pip install \"jax[tpu]==<its version>\"), or "
                       "pass --libtpu=/path/to/libtpu.so")
  # No chip is used: another libtpu process (a run on this TPU VM, a second report) may hold
  # libtpu's lockfile, and JAX's own backends stay on the CPU.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_platforms", "cpu")
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  spec = TOPOLOGIES[name]
  try:
    topology = topologies.get_topology_desc(
        platform="tpu", topology_name=spec.topology_name, chip_config_name=spec.chip_config_name,
        chips_per_host_bounds=spec.chips_per_host_bounds, num_slices=1)
  except Exception as error:  # pylint: disable=broad-except  # libtpu's refusal, as one line
    raise cli.CliError(f"--topology={name}: libtpu ({_libtpu_path()}) does not know "
                       f"{spec.topology_name!r} ({_first_line(error)}); pick another topology or "
                       "a libtpu of that generation (--libtpu=PATH)") from error
  return list(topology.devices)


def _first_line(error: BaseException) -> str:
  """An error's first line (compiler and libtpu messages run to many); imported late: jax must
  not be imported before `tpu_devices` has set libtpu's environment."""
  from slm_jax.kernels.mosaic_compile import first_line  # pylint: disable=g-import-not-at-top
  return first_line(error)


def _vocab_size(run: Any) -> int:
  """The run's vocabulary size without a workdir (a word vocabulary is built from its corpus)."""
  from slm_jax.data.sources import load_corpus, load_or_build_tokenizer  # pylint: disable=g-import-not-at-top
  if run.data.tokenizer == "word":
    tokenizer = load_or_build_tokenizer(run.data, load_corpus(run.data),
                                        pathlib.Path("/nonexistent-aot-workdir"), save=False)
  else:
    from slm_jax.tokenizer import make_tokenizer  # pylint: disable=g-import-not-at-top
    tokenizer = make_tokenizer(run.data.tokenizer, path=run.data.tokenizer_path or None) \
        if run.data.tokenizer == "hf" else make_tokenizer(run.data.tokenizer)
  return tokenizer.vocab_size


_CONSTANT_VALUE = re.compile(r"dense<[^>]*>")


@dataclasses.dataclass(frozen=True)
class LoweredStep:
  """A configuration's train step lowered for a mesh (StableHLO, nothing compiled yet)."""

  config: str
  mesh: str
  micro_batches: str
  attention_impl: str
  accumulation: int
  model_flops: float
  lowered: Any

  @property
  def program_key(self) -> str:
    """sha256 of the lowered module with the values of its constants blanked out.

    Configurations of one scale differ in their data (linearization, mask scheme), which reaches
    the train step only as constants (which token kinds a query may attend to); shapes,
    shardings and operations are the same. Two steps with one key are compiled once
    (`--share_programs`). XLA's memory analysis depends on shapes, shardings and operations;
    its FLOP count can differ by the elementwise mask operations that constant folding removes
    (tests/test_aot.py compiles both: memory identical, FLOPs 0.4% apart at tiny scale, where
    attention weighs most)."""
    import hashlib  # pylint: disable=g-import-not-at-top
    text = _CONSTANT_VALUE.sub("dense<_>", self.lowered.as_text())
    return hashlib.sha256(text.encode()).hexdigest()


def lower_step(run: Any, devices: Sequence[Any], vocab_size: int) -> LoweredStep:
  """Lowers `run`'s train step for `devices` (shapes only: nothing is allocated).

  The mesh of `devices` is in force while the step is traced and lowered
  (`kernels.target.use_mesh`), so attention_impl `auto` / `pallas_tpu` resolve for those devices'
  platform: a TPU topology gets the fused kernel through Mosaic, with its rows split over the mesh.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from slm_jax.kernels import target  # pylint: disable=g-import-not-at-top
  from slm_jax.model.attention import resolve_attention_impl  # pylint: disable=g-import-not-at-top
  from slm_jax.model.decoder import Decoder  # pylint: disable=g-import-not-at-top
  from slm_jax.train.mfu import model_flops_per_token  # pylint: disable=g-import-not-at-top
  from slm_jax.structure import RowMetadata  # pylint: disable=g-import-not-at-top
  from slm_jax.train import sharding  # pylint: disable=g-import-not-at-top
  from slm_jax.train.optimizer import make_optimizer  # pylint: disable=g-import-not-at-top
  from slm_jax.train.steps import make_train_step  # pylint: disable=g-import-not-at-top

  mesh = sharding.make_mesh(run.mesh.data, run.mesh.fsdp, devices=devices)
  layout = sharding.check_batch(run.train.global_batch, run.optimizer.grad_accum_steps, mesh)
  mconfig = run.model.replace(vocab_size=vocab_size)
  graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Decoder(mconfig, rngs=nnx.Rngs(0))),
                                 nnx.Param)
  params = nnx.to_pure_dict(abstract)
  tx = make_optimizer(run.optimizer, run.train.steps, accumulate=False)
  opt_state = jax.eval_shape(tx.init, params)
  param_sh, opt_sh = sharding.tree_shardings(params, mesh), sharding.tree_shardings(opt_state, mesh)
  placed = lambda tree, shardings: jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)
  rows, length = layout.padded_rows, run.data.seq_len
  batch_sh = sharding.batch_sharding(mesh)
  spec = lambda dtype: jax.ShapeDtypeStruct((rows, length), dtype, sharding=batch_sh)
  batch = {"tokens": spec(jnp.int32), "targets": spec(jnp.bool_),
           "meta": RowMetadata(spec(jnp.int8), *(spec(jnp.int32) for _ in RowMetadata._fields[1:]))}
  step = make_train_step(graphdef, tx, layout.accumulation,
                         (param_sh, opt_sh, sharding.batch_sharding(mesh, leading=1),
                          sharding.replicated(mesh)))
  platform = devices[0].platform
  with target.use_mesh(mesh):
    attention = resolve_attention_impl(mconfig.attention_impl)
    traced = step.trace(placed(params, param_sh), placed(opt_state, opt_sh), batch)
    lowered = traced.lower(lowering_platforms=(platform,))
  path = _attention_path(attention, lowered.as_text(), f"{run.configuration.name}_{run.scale}",
                         platform)
  tokens = run.train.global_batch * length
  return LoweredStep(
      config=f"{run.configuration.name}_{run.scale}",
      mesh="×".join(f"{k}{v}" for k, v in mesh.shape.items()),
      micro_batches=f"{layout.accumulation} × {layout.micro_rows}",
      attention_impl=path, accumulation=layout.accumulation,
      model_flops=float(model_flops_per_token(mconfig, length) * tokens), lowered=lowered)


def _attention_path(resolved: str, module_text: str, config: str, platform: str) -> str:
  """What the step's attention compiled to, read from the lowered module: "pallas_tpu (Mosaic)"
  when it holds Mosaic calls, else the resolved implementation; a fused kernel that did not reach
  Mosaic on a TPU (the interpreter, silently) is an error."""
  from slm_jax.kernels.mosaic_compile import MOSAIC_CALL  # pylint: disable=g-import-not-at-top
  if MOSAIC_CALL in module_text:
    return "pallas_tpu (Mosaic)"
  if resolved == "pallas_tpu" and platform == "tpu":
    raise cli.CliError(f"{config}: attention_impl=pallas_tpu lowered without a Mosaic call "
                       f"({MOSAIC_CALL}) for a TPU; the kernel fell back to the Pallas "
                       "interpreter: report this, or use --config.model.attention_impl=xla")
  return resolved


def compile_lowered(step: LoweredStep, limit: int | None, topology: str, chips: int) -> Report:
  """Compiles a lowered step and reads XLA's memory and cost analysis."""
  started = time.time()
  compiled = step.lowered.compile()
  seconds = time.time() - started
  memory = compiled.memory_analysis()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return Report(
      config=step.config, topology=topology, chips=chips, mesh=step.mesh,
      micro_batches=step.micro_batches, attention_impl=step.attention_impl,
      arguments=memory.argument_size_in_bytes,
      outputs=memory.output_size_in_bytes - memory.alias_size_in_bytes,
      temporaries=memory.temp_size_in_bytes, code=memory.generated_code_size_in_bytes,
      # XLA counts a loop body once: the micro-batch scan's body runs A times per step.
      limit=limit, flops=float(cost.get("flops", 0.0)) * step.accumulation,
      model_flops=step.model_flops, seconds=seconds)


def compile_step(run: Any, devices: Sequence[Any], vocab_size: int, limit: int | None,
                 topology: str) -> Report:
  """Compiles `run`'s train step for `devices` (shapes only) and reads XLA's analysis."""
  return compile_lowered(lower_step(run, devices, vocab_size), limit, topology, len(devices))


def _gib(value: int | None) -> str:
  return "?" if value is None else f"{value / GIB:.3g}"


def table(reports: Sequence[Report]) -> str:
  """The reports as one Markdown table (GiB per chip; FLOPs in TFLOP)."""
  headers = ["config", "topology", "mesh", "micro-batches", "attention", "args GiB", "outputs GiB",
             "temps GiB", "code GiB", "total GiB", "HBM GiB", "fits", "XLA TFLOP/step/chip",
             "6N+12LHKT TFLOP/step", "compile s"]
  shared = any(r.same_program_as for r in reports)
  if shared:
    headers.append("compiled as")
  rows = [[r.config, r.topology, r.mesh, r.micro_batches, r.attention_impl, _gib(r.arguments), _gib(r.outputs),
           _gib(r.temporaries), _gib(r.code), _gib(r.total), _gib(r.limit),
           "yes" if r.fits else "NO", f"{r.flops / 1e12:.4g}", f"{r.model_flops / 1e12:.4g}",
           f"{r.seconds:.0f}"] + ([r.same_program_as or "itself"] if shared else [])
          for r in reports]
  return benchtools.table(headers, rows)


@cli.options
class AotOptions:
  """The flags of `python -m slm_jax.aot` (the module docstring); `--config.KEY=VALUE`
  overrides go to every config."""

  config: tuple[str, ...] = cli.option(help="configs/<name>_<scale>.py or a packaged name; "
                                       "repeat for a table")
  topology: str = cli.option(help=f"{LOCAL} or a TPU slice: {', '.join(TOPOLOGIES)}")
  libtpu: str | None = cli.option(None, help="path of libtpu.so (default: the installed libtpu)")
  hbm_gib: float | None = cli.option(None, help="memory per chip to check against (default: "
                                     "the chip's own)")
  vocab_size: int | None = cli.option(None, help="default: the size of the config's tokenizer")
  share_programs: bool = cli.option(True, type=cli.boolean, help="compile once for "
                                    "configurations whose lowered steps are equal up to the "
                                    "values of constants (LoweredStep.program_key)")


def _limit(options: AotOptions, devices) -> int | None:
  if options.hbm_gib:
    return int(options.hbm_gib * GIB)
  if options.topology != LOCAL:
    return int(TOPOLOGIES[options.topology].hbm_gib * GIB)
  stats = devices[0].memory_stats() or {}
  return stats.get("bytes_limit")


def _checked(work, path: str, run: Any, topology: str, what: str):
  """`work()`; a failure to lower or compile becomes one error line naming the configuration,
  the attention path and what to change."""
  try:
    return work()
  except cli.CliError:
    raise
  except Exception as error:  # pylint: disable=broad-except  # JAX / XLA / Mosaic errors
    impl = run.model.attention_impl
    change = ("--config.model.attention_impl=xla (the XLA attention path)" if impl != "xla"
              else "--config.mesh.fsdp / --config.optimizer.grad_accum_steps")
    raise cli.CliError(f"{path} (attention_impl={impl}) does not {what} for --topology="
                       f"{topology}: {_first_line(error)}; try {change}, or --debug for the "
                       "traceback") from error


def compile_configs(options: AotOptions, overrides: Sequence[str] = ()) -> list[Report]:
  """Compiles the train step of each `--config` (with `overrides`) for `--topology`; one
  Report each (progress on stderr)."""
  from slm_jax.train import run_config  # pylint: disable=g-import-not-at-top
  runs = [run_config.load_config(configs.config_path(c), overrides) for c in options.config]
  if options.topology != LOCAL:
    gpu = sorted({r.model.attention_impl for r in runs} & {"triton_gpu"})
    if gpu:
      raise cli.CliError(f"model.attention_impl={gpu[0]}: --topology={options.topology} is a "
                         "TPU; use pallas_tpu, auto (the fused kernel there) or xla, or "
                         "--topology=local on the GPU itself")
  if options.topology == LOCAL:
    import jax  # pylint: disable=g-import-not-at-top
    devices = jax.devices()
  else:
    devices = tpu_devices(options.topology, options.libtpu)
  limit = _limit(options, devices)
  reports, compiled = [], {}
  for path, run in zip(options.config, runs):
    step = _checked(lambda: lower_step(run, devices, options.vocab_size or _vocab_size(run)),
                    path, run, options.topology, "lower")
    key = step.program_key if options.share_programs else path
    if key in compiled:
      first = compiled[key]
      print(f"{path}: same program as {first.config} (up to constants); not compiled again",
            file=sys.stderr, flush=True)
      reports.append(dataclasses.replace(
          first, config=step.config, model_flops=step.model_flops, seconds=0.0,
          same_program_as=first.config))
      continue
    print(f"compiling {path} for {options.topology} ({len(devices)} chips) …", file=sys.stderr,
          flush=True)
    compiled[key] = _checked(
        lambda: compile_lowered(step, limit, options.topology, len(devices)), path, run,
        options.topology, "compile")
    reports.append(compiled[key])
    print(table(reports[-1:]), file=sys.stderr, flush=True)
  return reports


def _main(argv: list[str] | None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  overrides, rest = config_files.split_overrides(argv)
  reports = compile_configs(cli.parse_options(AotOptions, rest, prog="python -m slm_jax.aot",
                                              doc=__doc__), overrides)
  print(table(reports))
  too_big = [r for r in reports if not r.fits]
  if too_big:
    r = too_big[0]
    raise cli.CliError(
        f"{r.config} does not fit {r.topology}: {_gib(r.total)} GiB per chip needed, "
        f"{_gib(r.limit)} GiB there ({len(too_big)} of {len(reports)} configs do not fit); "
        "shard parameters and optimizer state further (--config.mesh.fsdp=K), use more "
        "micro-batches (--config.optimizer.grad_accum_steps) or a larger slice")
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return cli.run(_main, argv)


if __name__ == "__main__":
  sys.exit(main())
