"""`python -m slm_jax.export --workdir=RUN --out=DIR`: a trained SLM as a `LlamaForCausalLM` folder
(`--checkpoint=FILE.gguf --out=DIR`: a GGUF file as a safetensors folder, `hf.gguf_export`).

Loads the run's newest checkpoint (or `--step`) with `train.loading.load_run` and writes it with
`hf.export.write_llama` (config, safetensors, tokenizer with the structural tokens; LoRA adapters
merged; TG-family attention refused with the reason, SPEC §13). A non-empty `--out` is refused
unless `--force`; the folder is written whole (`files.replace_folder`: a temporary folder beside
it, renamed into place when complete), so `--force` replaces everything in it — no shard or index
of another model survives — and a failed export leaves `--out` as it was.
"""

from __future__ import annotations

import pathlib
import sys

from slm_jax import cli, files
from slm_jax.hf.export import write_llama
from slm_jax.hf.gguf_export import export_gguf
from slm_jax.train.loading import load_run

DTYPES = ("float32", "bfloat16")


def export(workdir: str | pathlib.Path, out: str | pathlib.Path, *, step: int | None = None,
           dtype: str = "float32", force: bool = False) -> pathlib.Path:
  """Writes the Llama folder of `workdir`'s newest checkpoint (or `step`) to `out`."""
  out = pathlib.Path(out)
  files.check_replaceable(out, force)  # before the (slow) load
  run = load_run(workdir, step=step, dtype="float32")
  with files.replace_folder(out, force=force) as folder:
    parameters, merged = write_llama(run.model, run.tokenizer, folder, dtype=dtype,
                                     max_length=run.cfg.data.seq_len)
  print(f"exported {run.workdir} step {run.step} ({run.configuration.name}, "
        f"{parameters:,} parameters, {dtype}"
        f"{f', {merged} LoRA layers merged' if merged else ''}) to {out}", flush=True)
  return out


def main(argv: list[str] | None = None) -> int:
  parser = cli.ArgumentParser(prog="python -m slm_jax.export", description=__doc__)
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--workdir", help="the slm_jax training workdir")
  source.add_argument("--checkpoint", help="a .gguf file (written as a safetensors folder)")
  parser.add_argument("--out", required=True, help="the folder to write (HF layout)")
  parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
  parser.add_argument("--dtype", choices=DTYPES, default="float32",
                      help="dtype of the written tensors (default float32)")
  parser.add_argument("--force", action="store_true",
                      help="replace a non-empty --out (its whole content)")
  args = parser.parse_args(argv)
  if args.checkpoint:
    export_gguf(args.checkpoint, args.out, dtype=args.dtype, force=args.force)
  else:
    export(args.workdir, args.out, step=args.step, dtype=args.dtype, force=args.force)
  return cli.EXIT_OK


if __name__ == "__main__":
  sys.exit(cli.run(main))
