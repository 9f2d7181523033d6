"""launch/tpu_vm.sh in DRY_RUN mode: the gcloud commands it would run, and remote commands that
a shell parses back into exactly the arguments given; launch/slurm_gpu.sbatch in DRY_RUN mode: the
srun command and each task's devices and command, and what jax.distributed reads from that Slurm
environment."""

from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "launch" / "tpu_vm.sh"


def dry_run(*args: str) -> list[str]:
  done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                        env={**os.environ, "DRY_RUN": "1", "PROJECT": "proj"}, check=False)
  assert done.returncode == 0, done.stderr
  return [shlex.split(line) for line in done.stdout.splitlines()]


def remote(command: list[str]) -> str:
  return command[command.index("--command") + 1]


def test_train_runs_main_on_every_host_with_the_arguments_intact(tmp_path):
  (line,) = dry_run("train", "slm", "us-east5-a", "configs/tgtree_1b.py", "/mnt/runs/a b",
                    "--config.data.paths=('/mnt/data',)", "--config.mesh.fsdp=8")
  assert line[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "slm"]
  assert "--worker=all" in line and line[line.index("--project") + 1] == "proj"
  # the remote shell's view: run it with `echo` in place of the python program
  command = remote(line).replace("nohup .venv/bin/python", "printf '%s\\n'")
  command = command.replace("cd ~/slm_jax && ", "").split(" > ~/")[0]
  args = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                        check=True).stdout.splitlines()
  assert args == ["-m", "slm_jax.main", "--config=configs/tgtree_1b.py",
                  "--workdir=/mnt/runs/a b", "--config.data.paths=('/mnt/data',)",
                  "--config.mesh.fsdp=8"]


def test_setup_installs_the_tpu_wheel_of_the_pinned_jax():
  copy, install = dry_run("setup", "slm", "zone")
  assert copy[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "scp"] and "--worker=all" in copy
  command = remote(install)
  subprocess.run(["bash", "-n", "-c", command], check=True)
  assert '"jax[tpu]==$(sed' in command and "-r /tmp/slm_jax_requirements.txt -e ." in command


@pytest.mark.parametrize("args", [(), ("train", "slm", "zone", "only-config"), ("bogus", "a", "b")])
def test_bad_usage_exits_with_the_usage_text(args):
  done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                        env={**os.environ, "DRY_RUN": "1"}, check=False)
  assert done.returncode == 2 and "launch/tpu_vm.sh create" in done.stderr


def test_device_check_runs_the_parts_asked_for_and_reports_each(tmp_path):
  """launch/device_check.sh on this CPU machine: the env report and the kernel check (which
  finds no fused kernel on CPU: exit 2), each part's exit code in status.txt, nothing else run."""
  script = SCRIPT.parent / "device_check.sh"
  done = subprocess.run(["bash", str(script), str(tmp_path)], capture_output=True, text=True,
                        env={**os.environ, "PARTS": "env kernel", "PYTHON": sys.executable},
                        check=False, timeout=300)
  assert done.returncode == 0, done.stderr
  status = (tmp_path / "status.txt").read_text().splitlines()
  assert [line.split()[:2] for line in status] == [["env", "rc=0"], ["kernel", "rc=2"]]
  env = (tmp_path / "env.txt").read_text()
  assert "backend cpu" in env and "attention_impl=auto resolves to xla" in env
  assert "no fused kernel on cpu" in (tmp_path / "kernel.txt").read_text()
  assert not (tmp_path / "attention.txt").exists()


def test_device_check_cuts_the_parts_it_has_no_time_for(tmp_path):
  """BUDGET spent: every part is recorded as cut (none runs) and the report still comes out."""
  script = SCRIPT.parent / "device_check.sh"
  done = subprocess.run(["bash", str(script), str(tmp_path)], capture_output=True, text=True,
                        env={**os.environ, "DRY": "1", "BUDGET": "0", "PYTHON": sys.executable},
                        check=False, timeout=60)
  assert done.returncode == 0, done.stderr
  status = (tmp_path / "status.txt").read_text().splitlines()
  assert [line.split()[:2] for line in status] == [
      [name, "cut:"] for name in ("env", "kernel", "beamexact", "profiles", "attention",
                                  "train100m", "sgloop")]
  assert (tmp_path / "REPORT.md").read_text().startswith("# Device check")
  assert not (tmp_path / "env.txt").exists()


@pytest.mark.slow  # every part on CPU at tiny sizes: about 4 minutes on 2 cores
def test_device_check_dry_run_runs_every_part_on_cpu(tmp_path):
  """DRY=1: the whole check with the device's commands at tiny sizes (Triton kernels under the
  interpreter): every part exits 0 and the report holds each part's table."""
  script = SCRIPT.parent / "device_check.sh"
  done = subprocess.run(["bash", str(script), str(tmp_path)], capture_output=True, text=True,
                        env={**os.environ, "DRY": "1", "PYTHON": sys.executable}, check=False,
                        timeout=900)
  assert done.returncode == 0, done.stderr
  status = (tmp_path / "status.txt").read_text().splitlines()
  assert [line.split()[:2] for line in status] == [
      [name, "rc=0"] for name in ("env", "kernel", "beamexact", "profiles", "attention",
                                  "train100m", "sgloop")]
  report = (tmp_path / "REPORT.md").read_text()
  assert report.count("PASS: triton_gpu vs xla_attention") == 2
  assert "3 of 3 buckets answered by the cache, nothing timed" in report
  assert "| 100M | H800 (paper" in report and "| tiny | cpu (this run) |" in report
  assert "| host rounds words/s | compiled loop words/s |" in report  # sgloop
  assert (tmp_path / "best_profile.txt").read_text().strip() in ("old", "lean_split")


SLURM = SCRIPT.parent / "slurm_gpu.sbatch"
_NO_SLURM = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JAX_"))}


def slurm_dry_run(*args: str, **env: str) -> list[list[str]]:
  done = subprocess.run(["bash", str(SLURM), *args], capture_output=True, text=True,
                        env={**_NO_SLURM, "DRY_RUN": "1", **env}, check=False)
  assert done.returncode == 0, done.stderr
  return [shlex.split(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("per, tasks", [("gpu", "8"), ("node", "1")])
def test_slurm_starts_one_task_per_gpu_or_per_node_with_the_arguments_intact(per, tasks):
  args = ["configs/tgtree_1b.py", "/mnt/runs/a b", "--config.data.paths=('/mnt/data',)"]
  (line,) = slurm_dry_run(*args, NODES="2", GPUS_PER_NODE="8", PER=per)
  assert line[:3] == ["srun", "--nodes=2", f"--ntasks-per-node={tasks}"]
  assert f"PER={per}" in line[line.index("srun") + 4]  # --export=…
  assert line[line.index("--task") + 1:] == args
  assert line[line.index("--task") - 1] == str(SLURM)  # the checkout's copy runs on every node


def test_a_slurm_task_initializes_jax_distributed_from_the_slurm_environment():
  """The task's command and device ids, and what jax.distributed derives from that
  environment: process 11 of 16 on GPU 3, coordinator on the step's first node."""
  slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "gpu[007-008]", "SLURM_NTASKS": "16",
           "SLURM_PROCID": "11", "SLURM_LOCALID": "3", "GPUS_PER_NODE": "8"}
  (line,) = slurm_dry_run("--task", "configs/tg_1b.py", "/runs/tg", "--config.mesh.fsdp=8",
                          **slurm)
  assert line[0] == "JAX_LOCAL_DEVICE_IDS=3"
  assert line[2:] == ["-m", "slm_jax.main", "--config=configs/tg_1b.py", "--workdir=/runs/tg",
                      "--config.mesh.distributed=on", "--config.mesh.fsdp=8"]
  (per_node,) = slurm_dry_run("--task", "c", "w", PER="node", GPUS_PER_NODE="4")
  assert per_node[0] == "JAX_LOCAL_DEVICE_IDS=0,1,2,3"
  probe = ("from jax._src import clusters; print(clusters.ClusterEnv."
           "auto_detect_unset_distributed_params(None, None, None, None, None, 300))")
  env = {**_NO_SLURM, **slurm}
  done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                        check=True)
  port = 4242 % 2**12 + 65535 - 2**12 + 1
  assert done.stdout.strip() == f"('gpu007:{port}', 16, 11, [3])"


@pytest.mark.parametrize("args, env, message", [
    ((), {}, "sbatch --nodes=4"),
    (("c", "w"), {"PER": "core"}, "error: PER=core"),
    (("c", "w"), {}, "error: cannot tell the GPUs per node"),
])
def test_slurm_bad_usage_is_one_error(args, env, message):
  done = subprocess.run(["bash", str(SLURM), *args], capture_output=True, text=True,
                        env={**_NO_SLURM, "DRY_RUN": "1", **env}, check=False)
  assert done.returncode == 2 and message in done.stderr, done.stderr
