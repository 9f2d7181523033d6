"""Device mesh, THE partitioning table, and sharded placement of params, optimizer state, batches.

Mesh axes `('data', 'fsdp')` (config `mesh.data`, `mesh.fsdp`; `data = -1` takes every device
left). Batch rows are split over both axes; parameters and optimizer moments are split over
`fsdp` by `PARTITION_RULES` (ZeRO-3 style: XLA gathers a layer's weights where they are used and
reduce-scatters their gradients) and replicated over `data`. With `fsdp = 1` this is plain data
parallelism; on one device every placement is a no-op. `jax.jit` + `NamedSharding` only: the
step functions are the single-device ones, the compiler inserts the collectives.

Multi-host (TPU pods, multi-node GPU): `initialize_distributed` runs `jax.distributed.initialize()`
before anything touches a device; each host then feeds the rows of the global batch that its
devices hold (`place_batch`). Clusters JAX detects (TPU pods, Slurm, Open MPI, Kubernetes) need no
settings; elsewhere `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` name the
processes (e.g. several processes on one machine, whose CPU collectives use gloo).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from slm_jax.sections import Rules, SectionError

_LOG = logging.getLogger(__name__)

MESH_AXES = ("data", "fsdp")
BATCH_AXES = ("data", "fsdp")  # batch rows are split over every device

# (regex searched in the '/'-joined parameter path, partition of its dims). The first match wins.
# Optimizer moments have the parameter's path inside theirs (`…/mu/blocks/0/attn/q/kernel`) and get
# the same partition. A dim not divisible by its mesh axis stays replicated (logged, counted).
PARTITION_RULES: tuple[tuple[str, tuple[Any, ...] | None], ...] = (
    (r"embed_tokens/embedding$", ("fsdp", None)),  # [V, D]: vocabulary rows
    (r"lm_head/kernel$", (None, "fsdp")),  # [D, V]
    (r"attn/(q|k|v)/kernel$", ("fsdp", None)),  # [D, H·K]
    (r"attn/o/kernel$", (None, "fsdp")),  # [H·K, D]
    (r"mlp/up/kernel$", ("fsdp", None)),  # [D, 2F]
    (r"mlp/down/kernel$", (None, "fsdp")),  # [F, D]
    (r".", None),  # norms, biases, step counters: replicated
)

DISTRIBUTED_MODES = ("auto", "on", "off")
# Environment variables that mean "this process is one of several" (JAX's own cluster detection
# covers TPU pods, Slurm, Open MPI, Kubernetes once initialize() is called).
_CLUSTER_HINTS = ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS", "MEGASCALE_COORDINATOR_ADDRESS")


class MeshError(ValueError):
  """The mesh does not fit the devices, or the batch does not fit the mesh."""


@dataclasses.dataclass(frozen=True)
class MeshSection:
  """The `mesh` section of a run's config: axis sizes and multi-host start-up (its rules)."""

  data: int = -1  # -1: every device left after fsdp
  fsdp: int = 1
  distributed: str = "auto"  # auto | on | off (jax.distributed.initialize)

  def __post_init__(self):
    rules = Rules("mesh", self)
    if rules.typed:
      rules.need(self.data == -1 or self.data >= 1,
                 f"data={self.data} must be ≥ 1, or -1 (every device left after mesh.fsdp)")
      rules.need(self.fsdp >= 1, f"fsdp={self.fsdp} must be ≥ 1")
      rules.need(self.distributed in DISTRIBUTED_MODES, f"distributed={self.distributed!r} is "
                 f"not one of {', '.join(DISTRIBUTED_MODES)}")
    rules.done()


def _mesh_section(**values) -> MeshSection:
  try:
    return MeshSection(**values)
  except SectionError as error:
    raise MeshError(str(error)) from None


def _multi_process_environment() -> bool:
  if any(os.environ.get(k) for k in _CLUSTER_HINTS):
    return True
  hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
  if "," in hosts:
    return True
  for key in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
    if int(os.environ.get(key, "1") or 1) > 1:
      return True
  return False


def _explicit_processes() -> dict[str, int]:
  """`num_processes` / `process_id` from `JAX_NUM_PROCESSES` / `JAX_PROCESS_ID` when set: with
  `JAX_COORDINATOR_ADDRESS`, a cluster JAX does not detect (several processes on one machine,
  a hand-started job) names each process."""
  names = {"num_processes": "JAX_NUM_PROCESSES", "process_id": "JAX_PROCESS_ID"}
  out = {}
  for arg, env in names.items():
    value = os.environ.get(env, "")
    if value:
      try:
        out[arg] = int(value)
      except ValueError:
        raise MeshError(f"{env}={value!r} is not a whole number") from None
  return out


def initialize_distributed(mode: str = "auto") -> bool:
  """`jax.distributed.initialize()` for multi-host runs; call before any device query.

  mode: `on` always, `off` never, `auto` when the environment names several processes.
  Returns whether it initialized.
  """
  _mesh_section(distributed=mode)
  if mode == "off" or (mode == "auto" and not _multi_process_environment()):
    return False
  jax.distributed.initialize(**_explicit_processes())
  _LOG.warning("jax.distributed initialized: process %d of %d, %d devices",
               jax.process_index(), jax.process_count(), jax.device_count())
  return True


def make_mesh(data: int = -1, fsdp: int = 1, devices=None) -> Mesh:
  """A ('data', 'fsdp') mesh over `devices` (default: all); data = -1 fills the rest."""
  devices = list(jax.devices() if devices is None else devices)
  count = len(devices)
  _mesh_section(data=data, fsdp=fsdp)
  if data == -1:
    if count % fsdp:
      raise MeshError(f"mesh.fsdp={fsdp} does not divide the {count} devices")
    data = count // fsdp
  if data * fsdp != count:
    raise MeshError(f"mesh data×fsdp = {data}×{fsdp} = {data * fsdp} but there are {count} "
                    f"devices ({jax.default_backend()}); set --config.mesh.data=-1 to fill")
  grid = np.asarray(devices, dtype=object).reshape(data, fsdp)
  return Mesh(grid, MESH_AXES)


def path_string(path) -> str:
  """'/'-joined keys of a pytree path: `blocks/0/attn/q/kernel`."""
  return jax.tree_util.keystr(path, simple=True, separator="/")


def partition_spec(path: str, shape: tuple[int, ...], mesh: Mesh,
                   dropped: list[str] | None = None) -> PartitionSpec:
  """The PartitionSpec `PARTITION_RULES` gives a leaf (replicated where a dim does not divide)."""
  for pattern, axes in PARTITION_RULES:
    if re.search(pattern, path):
      break
  if axes is None or len(shape) != len(axes):
    return PartitionSpec()
  spec = []
  for size, axis in zip(shape, axes):
    if axis is not None and size % mesh.shape[axis]:
      if dropped is not None:
        dropped.append(f"{path} dim {size} % {axis}={mesh.shape[axis]}")
      axis = None
    spec.append(axis)
  return PartitionSpec(*spec)


def tree_shardings(tree: Any, mesh: Mesh) -> Any:
  """NamedSharding of every leaf (arrays or ShapeDtypeStructs) by the table."""
  dropped: list[str] = []
  out = jax.tree_util.tree_map_with_path(
      lambda p, x: NamedSharding(mesh, partition_spec(path_string(p), tuple(np.shape(x)), mesh,
                                                      dropped)), tree)
  if dropped:
    _LOG.warning("%d parameter dims left replicated (not divisible by the mesh): %s",
                 len(dropped), "; ".join(dropped[:5]))
  return out


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def batch_sharding(mesh: Mesh, leading: int = 0) -> NamedSharding:
  """Rows (axis `leading`) split over every device."""
  return NamedSharding(mesh, PartitionSpec(*([None] * leading), BATCH_AXES))


def batch_divisor(mesh: Mesh) -> int:
  return int(np.prod([mesh.shape[a] for a in BATCH_AXES]))


class BatchLayout(NamedTuple):
  """How a global batch of `rows` runs on a mesh: `accumulation` micro-batches of `micro_rows`
  (a multiple of the devices), the global batch padded with target-free rows to `padded_rows`."""

  rows: int
  accumulation: int
  micro_rows: int
  padded_rows: int


def batch_layout(rows: int, accumulation: int, divisor: int,
                 what: str = "train.global_batch") -> BatchLayout:
  """The layout of `rows` rows in `accumulation` micro-batches on `divisor` devices.

  When rows / accumulation splits over the devices it is used as is. Otherwise the micro-batch
  is rounded up to a multiple of the devices and the accumulation reduced to the fewest
  micro-batches that hold every row; the last rows are padding. Padding rows hold no targets and
  the gradient is normalized by the target count, so the update equals the unpadded one.
  """
  accumulation = max(accumulation, 1)
  if rows % accumulation:
    raise MeshError(f"{what}={rows} with optimizer.grad_accum_steps={accumulation} gives "
                    f"micro-batches of {rows / accumulation:g} rows; the global batch must be "
                    "a multiple of the accumulation steps")
  micro = rows // accumulation
  if micro % divisor == 0:
    return BatchLayout(rows, accumulation, micro, rows)
  micro = -(-micro // divisor) * divisor
  accumulation = -(-rows // micro)
  return BatchLayout(rows, accumulation, micro, accumulation * micro)


def check_batch(rows: int, accumulation: int, mesh: Mesh, what: str = "train.global_batch"
                ) -> BatchLayout:
  """`batch_layout` on `mesh`'s devices."""
  return batch_layout(rows, accumulation, batch_divisor(mesh), what)


def place_batch(batch: dict[str, Any], mesh: Mesh, host_local: bool) -> dict[str, Any]:
  """Device arrays of the global batch, rows split over the mesh.

  host_local: `batch` holds only this host's rows (the Grain pipeline: process i of n reads
  `[i::n]`); otherwise every host holds the whole global batch (in-memory corpora) and each
  device takes its slice.
  """
  sharding = batch_sharding(mesh)
  if host_local:
    return jax.tree.map(
        lambda v: jax.make_array_from_process_local_data(sharding, np.asarray(v)), batch)
  return jax.tree.map(lambda v: jax.make_array_from_callback(
      np.shape(v), sharding, lambda index: np.asarray(v[index])), batch)


def describe(mesh: Mesh) -> str:
  return (f"mesh {dict(mesh.shape)} over {mesh.devices.size} {jax.default_backend()} device(s), "
          f"{jax.process_count()} process(es)")
