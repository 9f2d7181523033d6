"""Launch profiles of the Triton kernels (`slm_jax.kernels.launch_profiles`) and the autotuner's
disk cache (`slm_jax.kernels.autotune`): the mechanism, with a fake timer (speed is measured on a
GPU by benchmarks/launch_profiles_bench.py). The kernels through the autotuner, under Triton's
interpreter: tests/test_triton_kernels.py."""

from __future__ import annotations

import json
import logging
import types

import pytest

from slm_jax.kernels import autotune, launch_profiles
from slm_jax.kernels.autotune import Timing
from slm_jax.kernels.launch_profiles import (CHIP_PROFILES, MEASURED_DEFAULT, PROFILES, Bucket,
                                             TritonLaunch)

BUCKET = Bucket.of("tg", 8, 2048, 16, 16, 128, "bfloat16")
LOGGER = "slm_jax.kernels.launch_profiles"


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
  """No notices given, no choices remembered, the cache in tmp_path, mode from each test."""
  monkeypatch.setattr(launch_profiles, "_NOTICED", set())
  monkeypatch.setattr(autotune, "_CHOSEN", {})
  monkeypatch.setenv(autotune.ENV_CACHE, str(tmp_path / "cache.json"))
  monkeypatch.delenv(launch_profiles.ENV_MODE, raising=False)


def notices(caplog) -> list[str]:
  return [r.getMessage() for r in caplog.records if r.name == LOGGER]


class FakeTimer:
  """Times a launch by table lookup (ms of forward+backward by profile name); counts calls."""

  def __init__(self, fwd_bwd_ms: dict[str, float], failing=()):
    self.fwd_bwd_ms, self.failing, self.calls = fwd_bwd_ms, set(failing), []

  def __call__(self, launch: TritonLaunch) -> Timing:
    name = next(n for n, p in PROFILES.items() if p == launch)
    self.calls.append(name)
    if name in self.failing:
      raise RuntimeError(f"{name}: out of shared memory")
    return Timing(self.fwd_bwd_ms[name] / 3, self.fwd_bwd_ms[name])


def timings(fastest: str) -> dict[str, float]:
  return {name: (1.0 if name == fastest else 2.0 + i) for i, name in enumerate(PROFILES)}


def test_chip_of_reads_the_compute_capability():
  cuda = lambda cc: types.SimpleNamespace(compute_capability=cc, platform="gpu",
                                          device_kind="NVIDIA H200")
  assert launch_profiles.chip_of(cuda("9.0")) == "sm_90"
  assert launch_profiles.chip_of(cuda("8.6")) == "sm_86"
  cpu = types.SimpleNamespace(platform="cpu", device_kind="cpu")
  assert launch_profiles.chip_of(cpu) == "cpu:cpu"


def test_every_table_entry_and_candidate_is_a_profile():
  assert MEASURED_DEFAULT in PROFILES
  assert all(entry.profile in PROFILES for entry in CHIP_PROFILES.values())
  assert set(launch_profiles.CANDIDATES) <= set(PROFILES)
  assert CHIP_PROFILES["sm_90"].profile == "old"  # docs/DEVICE_H200.md: 1.9× the old default


def test_a_measured_chip_gets_its_entry_without_a_notice(caplog):
  with caplog.at_level(logging.WARNING, LOGGER):
    assert autotune.resolve(BUCKET, chip="sm_90") == ("old", "table (sm_90)")
  assert not notices(caplog)


def test_a_chip_without_an_entry_falls_back_with_one_notice_line(caplog):
  with caplog.at_level(logging.WARNING, LOGGER):
    for _ in range(3):
      assert autotune.resolve(BUCKET, chip="sm_75")[0] == MEASURED_DEFAULT
  (line,) = notices(caplog)
  assert "sm_75" in line and MEASURED_DEFAULT in line and "\n" not in line


def test_a_profile_name_is_used_and_an_unknown_one_falls_back_with_one_notice(monkeypatch,
                                                                              caplog):
  monkeypatch.setenv(launch_profiles.ENV_MODE, "tall")
  assert autotune.resolve(BUCKET, chip="sm_75")[0] == "tall"
  monkeypatch.setenv(launch_profiles.ENV_MODE, "fastest_please")
  with caplog.at_level(logging.WARNING, LOGGER):
    assert autotune.resolve(BUCKET, chip="sm_90")[0] == "old"  # the chip's table entry
    assert autotune.resolve(BUCKET, chip="sm_75")[0] == MEASURED_DEFAULT
  (line,) = notices(caplog)
  assert "fastest_please" in line and "not a profile" in line


def test_buckets_round_up_to_powers_of_two():
  assert Bucket.of("tg", 3, 1500, 16, 4, 64, "bfloat16") == Bucket(
      "tg", "bfloat16", 64, 16, 4, 2048, 8192)
  assert BUCKET.key == "tg/bfloat16/K128/H16/G16/T2048/BT16384"


def test_autotune_times_every_candidate_once_then_reads_the_cache(monkeypatch, tmp_path):
  monkeypatch.setenv(launch_profiles.ENV_MODE, "autotune")
  timer = FakeTimer(timings(fastest="wide_split"))
  name, how = autotune.resolve(BUCKET, timer, chip="sm_90")
  assert name == "wide_split" and how.startswith("autotune") and BUCKET.key in how
  assert sorted(timer.calls) == sorted(launch_profiles.CANDIDATES)
  data = json.loads((tmp_path / "cache.json").read_text())
  assert data["chip"] == "sm_90" and data["kernel_version"] == autotune.kernel_version()
  entry = data["buckets"][BUCKET.key]
  assert entry["profile"] == "wide_split" and entry["timings_ms"]["wide_split"][1] == 1.0
  # The same process: remembered. A new process (forget): read from disk, nothing timed.
  assert autotune.resolve(BUCKET, timer, chip="sm_90")[0] == "wide_split"
  autotune.forget()
  never = FakeTimer({}, failing=PROFILES)
  assert autotune.resolve(BUCKET, never, chip="sm_90")[0] == "wide_split"
  assert never.calls == []
  # Another bucket is timed and added beside the first.
  other = BUCKET._replace(attention="causal")
  assert autotune.resolve(other, FakeTimer(timings("lean")), chip="sm_90")[0] == "lean"
  assert set(json.loads((tmp_path / "cache.json").read_text())["buckets"]) == {BUCKET.key,
                                                                             other.key}


def _stale(path, **change):
  autotune.choose(BUCKET, "sm_90", FakeTimer(timings("tall")))
  data = json.loads(path.read_text())
  data.update(change)
  path.write_text(json.dumps(data))
  autotune.forget()


@pytest.mark.parametrize("problem,why", [
    ("chip", "it is for chip 'sm_80'"),
    ("version", "kernel version"),
    ("json", "malformed JSON"),
    ("profile", "names no known profile"),
    ("format", "not a cache of format"),
])
def test_a_stale_or_malformed_cache_is_refused_with_a_notice_and_replaced(tmp_path, caplog,
                                                                          problem, why):
  path = tmp_path / "cache.json"
  if problem == "chip":
    _stale(path, chip="sm_80")
  elif problem == "version":
    _stale(path, kernel_version="0123456789abcdef")
  elif problem == "profile":
    _stale(path, buckets={BUCKET.key: {"profile": "gone", "timings_ms": {}}})
  elif problem == "format":
    _stale(path, format="something else")
  else:
    path.write_text('{"format": "slm_jax triton launch cache 1", "chip": ')
  timer = FakeTimer(timings("lean"))
  with caplog.at_level(logging.WARNING, LOGGER):
    assert autotune.choose(BUCKET, "sm_90", timer) == "lean"  # timed again, not trusted
  assert timer.calls  # the cached 'tall' was not used
  (line,) = notices(caplog)
  assert "refusing cache" in line and why in line
  data = json.loads(path.read_text())
  assert (data["chip"], data["kernel_version"]) == ("sm_90", autotune.kernel_version())
  assert data["buckets"][BUCKET.key]["profile"] == "lean"


def test_the_kernel_version_follows_the_kernel_source_and_the_profiles(monkeypatch, tmp_path):
  before = autotune.kernel_version()
  source = tmp_path / "triton_kernels.py"
  source.write_bytes(autotune._KERNEL_SOURCE.read_bytes() + b"\n# changed\n")
  monkeypatch.setattr(autotune, "_KERNEL_SOURCE", source)
  changed_source = autotune.kernel_version()
  monkeypatch.setattr(autotune, "_KERNEL_SOURCE", autotune._KERNEL_SOURCE)
  monkeypatch.setitem(PROFILES, "old", TritonLaunch.uniform(32, 32))
  assert len({before, changed_source, autotune.kernel_version()}) == 3


def test_an_unwritable_cache_is_one_warning_and_the_choice_holds(monkeypatch, tmp_path, caplog):
  blocker = tmp_path / "file"
  blocker.write_text("not a folder")
  monkeypatch.setenv(autotune.ENV_CACHE, str(blocker / "cache.json"))
  timer = FakeTimer(timings("tall"))
  with caplog.at_level(logging.WARNING, LOGGER):
    assert autotune.choose(BUCKET, "sm_90", timer) == "tall"
    assert autotune.choose(BUCKET._replace(length=4096), "sm_90", timer) == "tall"
  (line,) = notices(caplog)
  assert "cannot write cache" in line
  calls = len(timer.calls)
  assert autotune.choose(BUCKET, "sm_90", timer) == "tall" and len(timer.calls) == calls


def test_a_failing_candidate_is_recorded_and_skipped_all_failing_is_an_error(tmp_path):
  timer = FakeTimer(timings("tall"), failing={"tall"})
  assert autotune.choose(BUCKET, "sm_90", timer) == "lean"  # the next fastest (2.0 ms: first)
  entry = json.loads((tmp_path / "cache.json").read_text())["buckets"][BUCKET.key]
  assert entry["timings_ms"]["tall"] is None
  with pytest.raises(RuntimeError, match="every candidate failed"):
    autotune.choose(BUCKET._replace(length=4096), "sm_90", FakeTimer({}, failing=PROFILES))


def test_autotune_without_a_measure_function_is_an_error(monkeypatch):
  monkeypatch.setenv(launch_profiles.ENV_MODE, "autotune")
  with pytest.raises(ValueError, match="needs a measure function"):
    autotune.resolve(BUCKET, chip="sm_90")
