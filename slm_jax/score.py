"""`python -m slm_jax.score`: per-token log-probabilities of texts or id sequences, one JSON line each.

  python -m slm_jax.score --checkpoint=DIR (--text_file=F | --ids_file=F) [--out=F.jsonl]
      [--dtype=float32|bfloat16] [--topk=N] [--bos] [--batch_size=8] [--fsdp=1]

DIR is a Hugging Face checkpoint folder (config.json + safetensors, imported by `slm_jax.hf`), a
GGUF file (`FILE.gguf`, dequantized on import) or an slm_jax training workdir (its newest
checkpoint). For every input line one JSON object:
`ids`, `tokens` (the vocabulary entry of each id) and `logprobs` (natural log-probability of each
token given its prefix; the first is null); `--topk=N` adds `topk`: after each position t, the N
most likely next tokens as {"id", "token", "logprob"}. `--ids_file`: one sequence per line as
space-separated token ids; `--text_file`: one text per line, tokenized with the checkpoint's
tokenizer (HF: its tokenizer.json; GGUF: the vocabulary in the file; a workdir: its tokenizer,
word by word, a word that is one of the run's reserved symbols — `<s>`, `</s>`, `(NP`, `NP)`,
`)`, `<P>` — encoded as that symbol's id, as training wrote it) with no special tokens added
unless `--bos`. Every record has `unknown`: how many of its ids are the tokenizer's unknown token
(`<unk>`); the total is reported on stderr. An empty line gives empty lists. This is also how to check a converted
model: the same ids scored here and by transformers agree to 1e-4 in float32.

Checked: an HF folder whose tokenizer.json disagrees with its weights and config.json (more ids
than the embedding's rows, another BOS id; `hf.tokenizer_fit`) is refused naming both values; invalid UTF-8 names line and byte;
a line longer than the model's context (max_position_embeddings, a GGUF file's context length, a
workdir's seq_len; without one, the longest row the scorer takes) is refused in one line naming
the input line and the limit, before anything is scored; a non-finite log-prob is written as null
(strict JSON) and the command ends with exit 1 saying how many. Lines are split on "\n" only
(`files.read_lines`: one input line, one output record).
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
from typing import Callable, TextIO

import jax
import jax.numpy as jnp

from slm_jax import cli, files
from slm_jax.inference.text_scorer import TextScorer
from slm_jax.hf.load import checkpoint_config, load_checkpoint
from slm_jax.hf.tokenizer_fit import check_tokenizer_fits
from slm_jax.structure import MAX_ROW_TOKENS
from slm_jax.tokenizer_bases import UNK_SYMBOL
from slm_jax.train import sharding
from slm_jax.train import models
from slm_jax.train.loading import load_run

DTYPES = ("float32", "bfloat16")


class Source:
  """A checkpoint to score with: the model, text → ids, ids → token strings, and the length it
  was trained on (None: unknown) with where that number comes from."""

  def __init__(self, model, encode: Callable[[str, bool], list[int]],
               pieces: Callable[[list[int]], list[str]], trained_len: int | None = None,
               trained_len_from: str = "", unk_id: int | None = None):
    self.model, self.encode, self.pieces = model, encode, pieces
    self.trained_len, self.trained_len_from = trained_len, trained_len_from
    self.unk_id = unk_id  # the tokenizer's unknown token (None: it has none)


def open_checkpoint(folder: str | pathlib.Path, dtype: str = "float32", fsdp: int = 1) -> Source:
  """The model and tokenizer of an HF folder, a .gguf file or an slm_jax workdir."""
  folder = pathlib.Path(folder)
  kind = models.model_kind(folder)  # the one rule of what a model path is
  if kind == models.WORKDIR:
    run = load_run(folder, dtype=dtype)
    tok = run.tokenizer
    reserved_ids = range(tok.base_size, tok.vocab_size)
    reserved = dict(zip(tok.decode(list(reserved_ids)), reserved_ids))  # symbol -> its id

    def encode(text: str, bos: bool) -> list[int]:
      ids = [i for word in text.split()
             for i in ((reserved[word],) if word in reserved else tok.encode_word(word))]
      return [tok.bos_id, *ids] if bos else ids

    return Source(run.model, encode, lambda ids: tok.decode(ids), int(run.cfg.data.seq_len),
                  "the run's data.seq_len",
                  tok.base.index[UNK_SYMBOL] if tok.base.kind == "word" else None)
  shardings = None
  if fsdp > len(jax.devices()):
    raise cli.CliError(f"--fsdp={fsdp}: only {len(jax.devices())} {jax.default_backend()} "
                       "device(s) here")
  if fsdp > 1:
    mesh = sharding.make_mesh(data=1, fsdp=fsdp, devices=jax.devices()[:fsdp])
    shardings = lambda abstract: sharding.tree_shardings(abstract, mesh)
  if kind == models.HF_FOLDER and (folder / "tokenizer.json").is_file():
    check_tokenizer_fits(folder)  # another model's tokenizer.json: refused before loading
  checkpoint = load_checkpoint(folder, compute_dtype=jnp.dtype(dtype),
                               param_dtype=jnp.dtype(dtype), shardings=shardings)
  model, tok = checkpoint.model, checkpoint.tokenizer
  trained_len = checkpoint_config(folder)[0].get("max_position_embeddings")

  def encode(text: str, bos: bool) -> list[int]:
    if tok is None:
      raise cli.CliError(f"{folder} has no tokenizer.json: use --ids_file")
    return tok.encode(text, bos=bos)

  unk = tok.special.get("unk_token") if tok else None
  return Source(model, encode, tok.pieces if tok else lambda ids: [str(i) for i in ids],
                trained_len, ("the GGUF file's context_length" if kind == models.GGUF
                              else "max_position_embeddings"),
                tok.tokenizer.token_to_id(unk) if unk else None)


def read_ids(path: pathlib.Path) -> list[list[int]]:
  out = []
  for number, line in enumerate(files.read_lines(path), 1):
    try:
      out.append([int(t) for t in line.split()])
    except ValueError:
      raise cli.CliError(f"{path}:{number}: not space-separated integer ids: {line[:60]!r}"
                         ) from None
  return out


def check_lengths(sequences: list[list[int]], source: Source, path: pathlib.Path) -> None:
  """Refuses (one line naming the input line and the limit) a sequence longer than the model's
  context — or, when the checkpoint states none, than the longest row the scorer takes —
  before anything is allocated for it."""
  limit = source.trained_len or MAX_ROW_TOKENS
  where = (source.trained_len_from if source.trained_len
           else "the longest row the scorer takes; the checkpoint states no context length")
  for number, ids in enumerate(sequences, 1):
    if len(ids) > limit:
      longer = sum(len(other) > limit for other in sequences)
      raise cli.CliError(f"{path}:{number}: {len(ids):,} tokens, longer than the model's context "
                         f"of {limit:,} ({where}); split the line (one sequence per line)"
                         + (f"; {longer} lines are longer" if longer > 1 else ""))


def _finite(value) -> float | None:
  value = float(value)
  return value if math.isfinite(value) else None


def score_lines(source: Source, sequences: list[list[int]], out: TextIO, *, topk: int = 0,
                batch_size: int = 8) -> tuple[int, int]:
  """Writes one JSON object per sequence to `out` (strict JSON: a non-finite log-prob is
  null); returns (sequences, non-finite log-probs)."""
  scorer = TextScorer(source.model, batch_size=batch_size)
  present = [i for i, ids in enumerate(sequences) if ids]
  scored = dict(zip(present, scorer.score([sequences[i] for i in present], topk)))
  nonfinite = 0
  for i, ids in enumerate(sequences):
    record = {"ids": ids, "tokens": source.pieces(ids) if ids else [], "logprobs": [],
              "unknown": sum(i == source.unk_id for i in ids)}
    if i in scored:
      result = scored[i]
      record["logprobs"] = [None, *map(_finite, result.logprobs)]
      nonfinite += sum(v is None for v in record["logprobs"][1:])
      if topk:
        record["topk"] = [
            [{"id": int(t), "token": token, "logprob": _finite(v)}
             for t, token, v in zip(ids_k, source.pieces(list(ids_k)), values_k)]
            for ids_k, values_k in zip(result.top_ids, result.top_logprobs)]
    elif topk:
      record["topk"] = []
    out.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
  return len(sequences), nonfinite


INPUTS = cli.Exclusive("inputs", required=True)


@cli.options
class ScoreOptions:
  """The flags of `python -m slm_jax.score` (the module docstring)."""

  checkpoint: str = cli.option(help="HF checkpoint folder, .gguf file or workdir")
  text_file: pathlib.Path | None = cli.option(None, exclusive=INPUTS, help="one text per line")
  ids_file: pathlib.Path | None = cli.option(None, exclusive=INPUTS,
                                             help="one id sequence per line")
  out: pathlib.Path | None = cli.option(None, help="JSONL (default stdout)")
  dtype: str = cli.option("float32", choices=DTYPES)
  topk: int = cli.option(0, help="top-N next tokens per position")
  bos: bool = cli.option(False, help="prepend the BOS token to texts")
  batch_size: int = cli.option(8)
  fsdp: int = cli.option(1, help="shard an HF checkpoint's parameters over this many devices")

  def validate(self) -> None:
    if self.topk < 0:
      raise cli.CliError(f"--topk={self.topk} must be ≥ 0")


def score(options: ScoreOptions) -> int:
  """Scores the lines of `options`' input file to `--out` (or stdout); the exit code (1: some
  log-probs are not finite)."""
  path = options.text_file or options.ids_file
  flag = "--text_file" if options.text_file else "--ids_file"
  if path.is_dir():
    raise cli.CliError(f"{flag}={path}: is a folder; give a file (one line per sequence)")
  if not path.is_file():
    raise cli.CliError(f"{flag}={path}: no such file")
  lines = files.read_lines(path)  # before the checkpoint loads: bad input fails at once
  sequences = read_ids(path) if options.ids_file else None
  source = open_checkpoint(options.checkpoint, options.dtype, options.fsdp)
  if sequences is None:
    sequences = [source.encode(line, options.bos) if line.strip() else [] for line in lines]
  check_lengths(sequences, source, path)
  unknown = sum(i == source.unk_id for ids in sequences for i in ids)
  if unknown:
    print(f"warning: {path}: {unknown} of {sum(map(len, sequences))} tokens are the tokenizer's "
          "unknown token (each record's `unknown` counts its own)", file=sys.stderr)
  if options.out is None:
    count, nonfinite = score_lines(source, sequences, sys.stdout, topk=options.topk,
                                   batch_size=options.batch_size)
  else:
    with open(options.out, "w", encoding="utf-8") as out:
      count, nonfinite = score_lines(source, sequences, out, topk=options.topk,
                                     batch_size=options.batch_size)
    print(f"scored {count} lines → {options.out}", file=sys.stderr)
  if nonfinite:
    print(f"error: {nonfinite} log-probs are not finite (written as null): the model's output "
          "overflowed; try --dtype=float32", file=sys.stderr)
    return cli.EXIT_INCOMPLETE
  return cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
  return score(cli.parse_options(ScoreOptions, argv, prog="python -m slm_jax.score",
                                 doc=__doc__))


if __name__ == "__main__":
  sys.exit(cli.run(main))
