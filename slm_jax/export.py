"""`python -m slm_jax.export --checkpoint=RUN --out=DIR`: a trained SLM as a `LlamaForCausalLM`
folder (`--checkpoint=FILE.gguf --out=DIR`: a GGUF file as a safetensors folder,
`hf.gguf_export`; what the path is: `train.models.model_kind`; `--workdir=RUN`, the old
spelling, still works with a notice).

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
from slm_jax.train import models
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


@cli.options
class ExportOptions:
  """The flags of `python -m slm_jax.export` (the module docstring)."""

  checkpoint: str | None = cli.option(
      None, exclusive=cli.Exclusive("source", required=True), help="the model to export: a "
      "slm_jax training workdir (a LlamaForCausalLM folder) or a .gguf file (a safetensors "
      "folder)", renamed={"--workdir": "the old spelling of --checkpoint=WORKDIR"},
      renamed_note="which names any model")
  out: str = cli.option(help="the folder to write (HF layout)")
  step: int | None = cli.option(None, help="checkpoint step (default: newest)")
  dtype: str = cli.option("float32", choices=DTYPES,
                          help="dtype of the written tensors (default float32)")
  force: bool = cli.option(False, help="replace a non-empty --out (its whole content)")


def export_model(options: ExportOptions) -> None:
  """Exports `--checkpoint` (a workdir: a Llama folder; a GGUF file: a safetensors folder)."""
  path = options.checkpoint
  kind = models.model_kind(path)  # the one rule of what a model path is
  if kind == models.HF_FOLDER:
    raise cli.CliError(f"--checkpoint={path} is already a Hugging Face folder: nothing to "
                       "export (score or evaluate it as it is)")
  if kind == models.GGUF:
    if options.step is not None:
      raise cli.CliError(f"--step reads a training workdir's checkpoints; {path} is a GGUF file")
    export_gguf(path, options.out, dtype=options.dtype, force=options.force)
  else:
    export(path, options.out, step=options.step, dtype=options.dtype, force=options.force)


def main(argv: list[str] | None = None) -> int:
  export_model(cli.parse_options(ExportOptions, argv, prog="python -m slm_jax.export",
                                 doc=__doc__))
  return cli.EXIT_OK


if __name__ == "__main__":
  sys.exit(cli.run(main))
