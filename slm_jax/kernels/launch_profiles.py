"""Launch profiles of the Triton attention kernels (`triton_kernels`) and which one a call uses.

A profile names each kernel's tiles and launch (`TritonLaunch`: forward, dq, dk/dv). Which
profile `triton_attention` uses when not given one is set by the environment variable
SLM_TRITON_LAUNCH (`autotune.resolve`):

  table (default)  CHIP_PROFILES[chip]: the profile measured fastest on that chip (chips by CUDA
                   compute capability, e.g. `sm_90`); a chip without an entry gets
                   MEASURED_DEFAULT, with one notice line per process
  autotune         the fastest of CANDIDATES for the call's shape bucket (`Bucket`), timed at
                   first use and cached on disk per chip (`slm_jax.kernels.autotune`)
  NAME             that profile of PROFILES (a name not in the table: MEASURED_DEFAULT, with one
                   notice line)

Measurements behind the table: docs/DEVICE_H200.md (one H200, tg, T 2048, B 8, H 16, head dim
128, bfloat16: forward+backward `old` 2.92 ms, `lean` 5.68, `tall` 4.77, `dkdv32` 4.95,
`stages3` 5.67). Profiles whose name ends in `_split` visit full tiles in a loop of their own
(no mask, no metadata loads: `KernelLaunch.full_tiles`); they and the Hopper tilings (`wide*`)
are candidates not yet timed on a device. Registers, shared memory and spills of every profile
for sm_80 / sm_90: `python benchmarks/triton_aot.py`.

Pure Python (no triton import): the table is read by the wrapper, the autotuner and the benches.
"""

from __future__ import annotations

import logging
import os
from typing import Any, NamedTuple

_LOG = logging.getLogger(__name__)
ENV_MODE = "SLM_TRITON_LAUNCH"


class KernelLaunch(NamedTuple):
  """Tile shape and launch parameters of one kernel; `full_tiles`: visit the plan's full tiles
  (every pair attends) in a separate loop without the in-tile mask."""

  block_q: int
  block_k: int
  num_warps: int
  num_stages: int
  full_tiles: bool = False


class TritonLaunch(NamedTuple):
  """Launch of the forward, dq and dk/dv kernels (each may tile differently: the forward and dq
  kernels keep a query block resident and stream key blocks, dk/dv the reverse)."""

  fwd: KernelLaunch
  dq: KernelLaunch
  dkdv: KernelLaunch

  @classmethod
  def uniform(cls, block_q: int, block_k: int, num_warps: int = 4, num_stages: int = 2,
              full_tiles: bool = False) -> "TritonLaunch":
    """The same tiles and launch for all three kernels."""
    one = KernelLaunch(block_q, block_k, num_warps, num_stages, full_tiles)
    return cls(one, one, one)

  def split(self) -> "TritonLaunch":
    """This launch with full tiles in their own loop in all three kernels."""
    return TritonLaunch(*(one._replace(full_tiles=True) for one in self))

  def describe(self) -> str:
    return "; ".join(f"{name} {one.block_q}×{one.block_k} w{one.num_warps} s{one.num_stages}"
                     + (" full-tile loop" if one.full_tiles else "")
                     for name, one in zip(self._fields, self))


_L = KernelLaunch
_LEAN = TritonLaunch(_L(64, 64, 8, 2), _L(64, 32, 8, 2), _L(16, 64, 8, 2))
_OLD = TritonLaunch.uniform(64, 64, 4, 2)
_WIDE = TritonLaunch(_L(128, 64, 8, 2), _L(128, 32, 8, 2), _L(32, 64, 8, 2))
PROFILES: dict[str, TritonLaunch] = {
    # Per-kernel tiles that compile for sm_90 (head dim <= 128, bf16) to warpgroup MMAs without
    # register spills (`default` in docs/DEVICE_H200.md).
    "lean": _LEAN,
    "stages3": TritonLaunch(*(one._replace(num_stages=3) for one in _LEAN)),
    "tall": TritonLaunch(_L(128, 32, 8, 2), _L(128, 16, 8, 2), _L(16, 64, 8, 2)),
    "dkdv32": _LEAN._replace(dkdv=_L(32, 64, 8, 2)),
    # 64×64 tiles, 4 warps for all three: spills at sm_90, yet the fastest on the H200.
    "old": _OLD,
    # Not yet timed on a device: full tiles in a loop of their own (causal rows: most visited
    # tiles are full; TG rows: none, a CNT1 in every block), and 128-row query tiles in the
    # forward and dq kernels for Hopper.
    "old_split": _OLD.split(),
    "lean_split": _LEAN.split(),
    "wide": _WIDE,
    "wide_split": _WIDE.split(),
}
# The autotuner's candidates, the table's first (`stages3`, the slowest but one on the H200 and
# no faster forward, is left out to save device time).
CANDIDATES = ("old", "lean", "tall", "dkdv32", "old_split", "lean_split", "wide", "wide_split")


class ChipEntry(NamedTuple):
  profile: str
  measured: str  # where the choice comes from


CHIP_PROFILES: dict[str, ChipEntry] = {
    "sm_90": ChipEntry("old", "H200, tg T 2048 B 8: forward+backward 2.92 ms vs 5.68 ms for "
                       "`lean` (1.9×), docs/DEVICE_H200.md"),
}
# For a chip without an entry: the profile measured fastest on the one chip measured so far.
MEASURED_DEFAULT = "old"

_NOTICED: set[tuple[str, str]] = set()


def notice_once(key: tuple[str, str], message: str) -> None:
  """Logs `message` as one warning line, once per process for `key`."""
  if key not in _NOTICED:
    _NOTICED.add(key)
    _LOG.warning("%s", message)


def chip_of(device: Any) -> str:
  """The table key of a jax device: `sm_XY` from a CUDA device's compute capability ("9.0" →
  sm_90), else `<platform>:<device kind>`."""
  capability = getattr(device, "compute_capability", None)
  if capability:
    major, _, minor = str(capability).partition(".")
    return f"sm_{int(major)}{int(minor or 0)}"
  kind = str(getattr(device, "device_kind", "unknown")).replace(" ", "_")
  return f"{getattr(device, 'platform', 'unknown')}:{kind}"


def current_chip() -> str:
  """`chip_of` the first jax device."""
  import jax  # pylint: disable=g-import-not-at-top
  return chip_of(jax.devices()[0])


def table_profile(chip: str) -> str:
  """The table's profile for `chip`; MEASURED_DEFAULT (one notice line) when it has none."""
  entry = CHIP_PROFILES.get(chip)
  if entry is not None:
    return entry.profile
  notice_once(("chip", chip), f"Triton launch: no profile measured for chip {chip}; using "
              f"'{MEASURED_DEFAULT}' (set {ENV_MODE}=autotune to time the candidates)")
  return MEASURED_DEFAULT


def named_profile(name: str, chip: str) -> str:
  """`name` if PROFILES has it, else the chip's table profile (one notice line)."""
  if name in PROFILES:
    return name
  fallback = CHIP_PROFILES[chip].profile if chip in CHIP_PROFILES else MEASURED_DEFAULT
  notice_once(("profile", name), f"Triton launch: {ENV_MODE}={name} is not a profile (one of "
              f"table, autotune, {', '.join(PROFILES)}); using '{fallback}'")
  return fallback


def mode() -> str:
  """SLM_TRITON_LAUNCH: 'table' (default), 'autotune' or a profile name."""
  return os.environ.get(ENV_MODE, "").strip() or "table"


class Bucket(NamedTuple):
  """The calls one autotuned choice covers: the attention (its name: the mask, and whether it is
  folded into the kernel, differ by type), length and B·T rounded up to powers of two, heads,
  head dim and dtype."""

  attention: str
  dtype: str
  head_dim: int
  heads: int
  kv_heads: int
  length: int
  tokens: int

  @classmethod
  def of(cls, attention: str, batch: int, length: int, heads: int, kv_heads: int,
         head_dim: int, dtype: str) -> "Bucket":
    up = lambda n: 1 << max(int(n) - 1, 0).bit_length()
    return cls(attention, dtype, head_dim, heads, kv_heads, up(length), up(batch * length))

  @property
  def key(self) -> str:
    return (f"{self.attention}/{self.dtype}/K{self.head_dim}/H{self.heads}/G{self.kv_heads}/"
            f"T{self.length}/BT{self.tokens}")
