#!/usr/bin/env bash
# Run slm_jax on every host of a Cloud TPU VM slice (v4 / v5e / v5p, single- or multi-host).
#
#   launch/tpu_vm.sh create NAME ZONE TYPE [RUNTIME]    # e.g. tgtree v5p-64 in us-east5-a
#   launch/tpu_vm.sh setup  NAME ZONE                   # copy this checkout, install on all hosts
#   launch/tpu_vm.sh train  NAME ZONE CONFIG WORKDIR [--config.x=y ...]
#   launch/tpu_vm.sh ssh    NAME ZONE 'command'         # any command on every host
#   launch/tpu_vm.sh delete NAME ZONE
#
# `train` starts `python -m slm_jax.main` on all hosts at once (gcloud --worker=all) under nohup,
# logging to ~/slm_jax_<NAME>.log on each host. With mesh.distributed=auto (the default) every
# host calls jax.distributed.initialize(), which finds the slice's coordinator on its own; the
# mesh then spans every chip (mesh.data=-1 fills; add --config.mesh.fsdp=K to shard parameters
# and optimizer state K ways). WORKDIR must be shared storage all hosts see (a gs:// path mounted
# with gcsfuse, or Filestore) so checkpoints and resume work.
#
# DRY_RUN=1 prints the gcloud commands instead of running them. PROJECT=... adds --project.
set -euo pipefail

usage() { sed -n '2,8p' "$0" >&2; exit 2; }
[[ $# -ge 3 ]] || usage
action=$1 name=$2 zone=$3
shift 3
repo_dir=$(cd "$(dirname "$0")/.." && pwd)
project_flag=()
[[ -n "${PROJECT:-}" ]] && project_flag=(--project "$PROJECT")

run() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    printf '%q ' "$@"; printf '\n'
  else
    "$@"
  fi
}

on_all_hosts() {
  run gcloud compute tpus tpu-vm ssh "$name" --zone "$zone" "${project_flag[@]}" --worker=all \
    --command "$1"
}

case "$action" in
  create)
    [[ $# -ge 1 ]] || usage
    run gcloud compute tpus tpu-vm create "$name" --zone "$zone" "${project_flag[@]}" \
      --accelerator-type "$1" --version "${2:-v2-alpha-tpuv5}"
    ;;
  setup)
    run gcloud compute tpus tpu-vm scp --recurse "$repo_dir" "$name:~/slm_jax" --zone "$zone" \
      "${project_flag[@]}" --worker=all
    # the jax[tpu] wheel of the pinned jax version first, then the rest of the pins
    on_all_hosts "cd ~/slm_jax && python3 -m venv .venv && .venv/bin/pip install -q -U pip && \
.venv/bin/pip install -q \"jax[tpu]==\$(sed -n 's/^jax\\[cpu\\]==//p' requirements.txt)\" && \
grep -v '^jax\\[cpu\\]' requirements.txt > /tmp/slm_jax_requirements.txt && \
.venv/bin/pip install -q -r /tmp/slm_jax_requirements.txt -e ."
    ;;
  train)
    [[ $# -ge 2 ]] || usage
    config=$1 workdir=$2
    shift 2
    extra=""
    for arg in "$@"; do extra+=" $(printf '%q' "$arg")"; done
    on_all_hosts "cd ~/slm_jax && nohup .venv/bin/python -m slm_jax.main \
--config=$(printf '%q' "$config") --workdir=$(printf '%q' "$workdir")$extra \
> ~/slm_jax_${name}.log 2>&1 &"
    ;;
  ssh)
    [[ $# -ge 1 ]] || usage
    on_all_hosts "$1"
    ;;
  delete)
    run gcloud compute tpus tpu-vm delete "$name" --zone "$zone" "${project_flag[@]}" --quiet
    ;;
  *)
    usage
    ;;
esac
