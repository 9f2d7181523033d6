"""The target a computation is compiled for: the devices of the mesh in force, not the host.

A TPU topology's devices (`jax.experimental.topologies.get_topology_desc`, made by libtpu without
a chip) put in force with `use_mesh` make every kernel traced inside lower for that chip — Mosaic
reads the chip generation from the abstract mesh's device kind — even when JAX's default backend
is the CPU of the host doing the compiling. Outside a mesh the target is JAX's default backend.

  with target.use_mesh(Mesh(np.array(topology_devices), ("x",))):
    jax.jit(f).trace(*shapes).lower(lowering_platforms=("tpu",)).compile()
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax


def abstract_mesh() -> Any | None:
  """The mesh in force (`use_mesh`, or a shard_map's inside), None outside any mesh."""
  get = getattr(jax.sharding, "get_abstract_mesh", None)
  mesh = get() if get is not None else None
  return None if mesh is None or mesh.empty else mesh


def platform() -> str:
  """"tpu", "cpu", "gpu", … of the devices the surrounding computation is compiled for."""
  mesh = abstract_mesh()
  device = getattr(mesh, "abstract_device", None) if mesh is not None else None
  if device is not None and device.platform:
    return str(device.platform).lower()
  return jax.default_backend().lower()


def device_kind() -> str:
  """The target's device kind ("TPU v5 lite", "cpu", …)."""
  mesh = abstract_mesh()
  device = getattr(mesh, "abstract_device", None) if mesh is not None else None
  return str(device.device_kind) if device is not None else jax.devices()[0].device_kind


def use_mesh(mesh: Any) -> contextlib.AbstractContextManager:
  """Puts `mesh` in force for tracing and lowering: `jax.set_mesh` where JAX has it (0.7+),
  else `jax.sharding.use_mesh`."""
  setter = getattr(jax, "set_mesh", None) or getattr(jax.sharding, "use_mesh", None)
  if setter is None:
    raise RuntimeError(f"jax {jax.__version__} has neither jax.set_mesh nor "
                       "jax.sharding.use_mesh: a mesh cannot be put in force")
  return setter(mesh)
