"""Autotuned Triton launch profiles: per shape bucket, the fastest candidate profile, timed at its
first use and cached on disk (SLM_TRITON_LAUNCH=autotune, see `launch_profiles`); and
`resolve`, the profile of a call under SLM_TRITON_LAUNCH (table, autotune or a name).

The cache file is SLM_TRITON_AUTOTUNE_CACHE if set, else
`$XDG_CACHE_HOME/slm_jax/triton_launch_<chip>.json` (XDG_CACHE_HOME defaults to ~/.cache):

  {"format": FORMAT, "chip": "sm_90", "kernel_version": "<16 hex>",
   "buckets": {"<Bucket.key>": {"profile": NAME,
                                "timings_ms": {NAME: [fwd, fwd+bwd] or null if it failed}}}}

`kernel_version` hashes the kernel source (`triton_kernels.py`), the profile table and the
Triton version. A file of another chip or kernel version, or one that does not parse, is
refused with one notice line and never trusted: its buckets are timed again and the file is
replaced. A file that cannot be written is one warning line; the choice still holds for this
process. Writes replace the file atomically after merging the buckets on disk (two processes
timing at once: the last writer's bucket set wins, both choices stay valid).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import pathlib
from typing import Callable, NamedTuple

from slm_jax.kernels import launch_profiles
from slm_jax.kernels.launch_profiles import Bucket, TritonLaunch

FORMAT = "slm_jax triton launch cache 1"
ENV_CACHE = "SLM_TRITON_AUTOTUNE_CACHE"
_KERNEL_SOURCE = pathlib.Path(__file__).with_name("triton_kernels.py")


class Timing(NamedTuple):
  """Median milliseconds of one candidate: forward, and forward + backward (the choice's key)."""

  fwd_ms: float
  fwd_bwd_ms: float


Measure = Callable[[TritonLaunch], Timing]
# Choices made in this process: (cache path, chip, kernel version, bucket key) -> profile.
_CHOSEN: dict[tuple[str, str, str, str], str] = {}


def cache_path(chip: str) -> pathlib.Path:
  """Where the cache of `chip` lives (module docstring)."""
  if os.environ.get(ENV_CACHE):
    return pathlib.Path(os.environ[ENV_CACHE])
  base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
  safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in chip)
  return pathlib.Path(base) / "slm_jax" / f"triton_launch_{safe}.json"


def kernel_version() -> str:
  """16 hex digits of sha256(kernel source, profile table, Triton version)."""
  try:
    triton_version = importlib.metadata.version("triton")
  except importlib.metadata.PackageNotFoundError:
    triton_version = "none"
  digest = hashlib.sha256(_KERNEL_SOURCE.read_bytes())
  digest.update(repr(sorted(launch_profiles.PROFILES.items())).encode())
  digest.update(triton_version.encode())
  return digest.hexdigest()[:16]


def _problem(data, chip: str, version: str) -> str | None:
  """Why a parsed cache must not be trusted (None: it may)."""
  if not isinstance(data, dict) or data.get("format") != FORMAT:
    return f"not a cache of format {FORMAT!r}"
  if data.get("chip") != chip:
    return f"it is for chip {data.get('chip')!r}, this is {chip!r}"
  if data.get("kernel_version") != version:
    return (f"it is for kernel version {data.get('kernel_version')!r}, this is {version!r} "
            "(the kernels, the profiles or Triton changed)")
  buckets = data.get("buckets")
  if not isinstance(buckets, dict):
    return "its 'buckets' is not an object"
  for key, entry in buckets.items():
    if not isinstance(entry, dict) or entry.get("profile") not in launch_profiles.PROFILES:
      return f"bucket {key!r} names no known profile"
  return None


def load(path: pathlib.Path, chip: str, version: str) -> dict[str, dict]:
  """The buckets of the cache at `path`; {} if there is none, or (one notice line) if it is
  stale or malformed."""
  try:
    text = path.read_text()
  except (FileNotFoundError, NotADirectoryError):  # no cache yet
    return {}
  except OSError as error:
    launch_profiles.notice_once(("cache", f"{path}:read"), f"Triton autotune: cannot read "
                                f"cache {path} ({error}); timing again")
    return {}
  try:
    data = json.loads(text)
  except ValueError as error:
    problem = f"malformed JSON ({error})"
  else:
    problem = _problem(data, chip, version)
  if problem:
    launch_profiles.notice_once(("cache", f"{path}:{problem}"), f"Triton autotune: refusing "
                                f"cache {path}: {problem}; timing again and replacing it")
    return {}
  return data["buckets"]


def store(path: pathlib.Path, chip: str, version: str, key: str, entry: dict) -> bool:
  """Adds bucket `key` to the cache at `path` (atomically); False, with one warning line, if the
  file cannot be written."""
  buckets = dict(load(path, chip, version))
  buckets[key] = entry
  data = {"format": FORMAT, "chip": chip, "kernel_version": version, "buckets": buckets}
  temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(temporary, path)
  except OSError as error:
    launch_profiles.notice_once(("cache", f"{path}:write"), f"Triton autotune: cannot write "
                                f"cache {path} ({error}); the choice holds for this process only")
    try:
      temporary.unlink(missing_ok=True)
    except OSError:
      pass
    return False
  return True


def tune(launches: dict[str, TritonLaunch], measure: Measure) -> dict:
  """Times every launch; the cache entry {"profile": fastest, "timings_ms": ...}. A candidate
  that fails (e.g. out of shared memory) is recorded as null; if all fail, raises the last error."""
  timings, best, last_error = {}, None, None
  for name, launch in launches.items():
    try:
      timing = Timing(*(float(x) for x in measure(launch)))
    except Exception as error:  # pylint: disable=broad-except  (a launch this chip rejects)
      timings[name], last_error = None, error
      continue
    timings[name] = list(timing)
    if best is None or timing.fwd_bwd_ms < timings[best][1]:
      best = name
  if best is None:
    raise RuntimeError(f"Triton autotune: every candidate failed; last error: {last_error}")
  return {"profile": best, "timings_ms": timings}


def choose(bucket: Bucket, chip: str, measure: Measure,
           candidates: tuple[str, ...] | None = None) -> str:
  """The profile of `bucket` on `chip`: from this process's choices, else the cache file, else
  timed now with `measure` (each of `candidates`, default `launch_profiles.CANDIDATES`) and
  written to the cache."""
  path, version = cache_path(chip), kernel_version()
  memo = (str(path), chip, version, bucket.key)
  if memo in _CHOSEN:
    return _CHOSEN[memo]
  entry = load(path, chip, version).get(bucket.key)
  if entry is None:
    names = candidates or launch_profiles.CANDIDATES
    entry = tune({name: launch_profiles.PROFILES[name] for name in names}, measure)
    store(path, chip, version, bucket.key, entry)
  _CHOSEN[memo] = entry["profile"]
  return entry["profile"]


def forget() -> None:
  """Drops this process's choices (the next call reads the cache file again)."""
  _CHOSEN.clear()


def resolve(bucket: Bucket, measure: Measure | None = None,
            chip: str | None = None) -> tuple[str, str]:
  """(profile name, how it was chosen) for a call in `bucket` under SLM_TRITON_LAUNCH (see
  `launch_profiles`): the chip's table entry, the autotuned one (`measure` times a candidate), or
  the named one."""
  chip = chip or launch_profiles.current_chip()
  how = launch_profiles.mode()
  if how == "table":
    return launch_profiles.table_profile(chip), f"table ({chip})"
  if how == "autotune":
    if measure is None:
      raise ValueError("autotune.resolve: mode autotune needs a measure function")
    return choose(bucket, chip, measure), f"autotune ({chip}, {bucket.key})"
  return (launch_profiles.named_profile(how, chip),
          f"{launch_profiles.ENV_MODE}={how}")
