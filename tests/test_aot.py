"""AOT reports: the real train step compiled for this machine's devices and for a TPU topology
(libtpu, no chip), XLA's per-chip memory and FLOPs read back, and a config that does not fit is
one clear error."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from slm_jax import aot, cli
from slm_jax.train import run_config as config_builder
from tests.tpu_topology import require_libtpu

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ["--config=tgtree_tiny", "--vocab_size=512", "--config.data.seq_len=128",
        "--config.train.global_batch=8"]


def _rows(text: str) -> list[dict[str, str]]:
  lines = [l for l in text.splitlines() if l.startswith("|")]
  headers = [h.strip() for h in lines[0].strip("|").split("|")]
  return [dict(zip(headers, (c.strip() for c in l.strip("|").split("|")))) for l in lines[2:]]


def test_local_report_counts_the_real_step_and_refuses_what_does_not_fit(capsys):
  run = config_builder.load_config("configs/tgtree_tiny.py", TINY[2:] + [
      "optimizer.grad_accum_steps=4"])
  import jax  # pylint: disable=g-import-not-at-top
  report = aot.compile_step(run, jax.devices(), 512, None, "local")
  assert report.micro_batches == "4 × 2" and report.fits
  assert report.arguments > 0 and report.temporaries > 0  # (CPU reports no code size)
  # XLA's FLOPs of all four micro-batches (the scan body × 4) are near the model's 6N + 12LdT
  # estimate (which leaves out the embedding and head: the tiny model's are large)
  assert 0.8 < report.flops / report.model_flops < 3, (report.flops, report.model_flops)
  assert aot.main([*TINY, "--topology=local", "--hbm_gib=0.0001"]) == cli.EXIT_USAGE
  captured = capsys.readouterr()
  (row,) = _rows(captured.out)
  assert row["fits"] == "NO" and row["topology"] == "local"
  assert "error: tgtree_tiny does not fit local:" in captured.err
  assert "--config.mesh.fsdp" in captured.err


def test_bad_topology_and_libtpu_are_one_error_line(monkeypatch, capsys):
  assert aot.main([*TINY, "--topology=v4-8", "--config.model.attention_impl=triton_gpu"]) == 2
  assert "error: model.attention_impl=triton_gpu: --topology=v4-8 is a TPU; use pallas_tpu" \
      in capsys.readouterr().err
  with pytest.raises(cli.CliError, match="unknown; expected local or one of v4-8"):
    aot.tpu_devices("v9-8")
  with pytest.raises(cli.CliError, match="no such file"):
    aot.tpu_devices("v5p-64", libtpu="/nonexistent/libtpu.so")
  monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
  monkeypatch.setenv("TPU_SKIP_MDS_QUERY", "1")
  if aot._libtpu_path() is None:  # pylint: disable=protected-access  # (.ci/run: not importable)
    with pytest.raises(cli.CliError, match=r"needs libtpu: pip install -e '.\[aot\]'"):
      aot.tpu_devices("v5p-64")


def _tpu(libtpu: str, *extra: str) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  done = subprocess.run([sys.executable, "-m", "slm_jax.aot", *TINY, "--topology=v4-8",
                         f"--libtpu={libtpu}", *extra], capture_output=True, text=True, env=env,
                        cwd=ROOT, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  (row,) = _rows(done.stdout)
  return row


def test_a_tpu_topology_compiles_on_this_cpu_machine_with_the_partition_table():
  libtpu = require_libtpu()
  replicated = _tpu(libtpu)
  assert replicated["mesh"] == "data4×fsdp1" and replicated["HBM GiB"] == "32"
  assert replicated["fits"] == "yes" and float(replicated["XLA TFLOP/step/chip"]) > 0
  # attention_impl=auto on a TPU topology: the fused kernel, through Mosaic (the module's own
  # Mosaic calls say so), split over the 4 chips' rows
  assert replicated["attention"] == "pallas_tpu (Mosaic)"
  sharded = _tpu(libtpu, "--config.mesh.fsdp=4", "--config.model.attention_impl=xla")
  assert sharded["mesh"] == "data1×fsdp4" and sharded["attention"] == "xla"
  # parameters and AdamW moments split 4 ways: each chip holds much less of them
  assert float(sharded["args GiB"]) < 0.5 * float(replicated["args GiB"])


def _tiny_steps(*extra: str):
  import jax  # pylint: disable=g-import-not-at-top
  load = lambda name: config_builder.load_config(f"configs/{name}.py", [*TINY[2:], *extra])
  return {n: aot.lower_step(load(n), jax.devices(), 512) for n in ("tg_tiny", "tgtree_tiny")}


def test_configurations_that_differ_only_in_constants_share_one_compilation(capsys):
  """tg and tgtree differ only in the mask scheme's constants: one program key (another
  sequence length is another program), compiled once by the CLI."""
  steps, shorter = _tiny_steps(), _tiny_steps("data.seq_len=64")
  assert steps["tg_tiny"].program_key == steps["tgtree_tiny"].program_key
  assert steps["tg_tiny"].lowered.as_text() != steps["tgtree_tiny"].lowered.as_text()
  assert steps["tg_tiny"].program_key != shorter["tg_tiny"].program_key
  assert aot.main(["--config=tg_tiny", "--config=tgtree_tiny", "--topology=local", *TINY[1:]]) == 0
  rows = _rows(capsys.readouterr().out)
  assert [r["compiled as"] for r in rows] == ["itself", "tg_tiny"]
  assert rows[0]["temps GiB"] == rows[1]["temps GiB"] and rows[1]["compile s"] == "0"


@pytest.mark.slow
def test_a_shared_compilation_reports_what_compiling_each_would():
  """The premise of sharing: compiling both gives the same memory, and FLOPs within 1%."""
  steps = _tiny_steps()
  tg, tgtree = (aot.compile_lowered(steps[n], None, "local", 1) for n in ("tg_tiny", "tgtree_tiny"))
  fields = ("arguments", "outputs", "temporaries")
  assert [getattr(tg, f) for f in fields] == [getattr(tgtree, f) for f in fields]
  # constant folding removes a few elementwise mask operations: 0.4% of this tiny step's FLOPs
  assert abs(tg.flops / tgtree.flops - 1) < 0.01, (tg.flops, tgtree.flops)
