"""Parsing text with the chart parser: `python -m slm_jax.parser.parse [--model=DIR] FILE`.

Input: one sentence per line (`-` = standard input). Raw text is split into PTB words by the parse
stage's word splitter (`slm_jax.splitting.ptb_words`: `don't` → `do n't`, `(` → `-LRB-`);
with `--pretokenized` the line's space-separated words are kept as they are.

Output (stdout or `--output`): one bracketed tree per line (Viterbi), or with `--samples=K` up to K
distinct trees per sentence, best first, in the PTB-blocks proposals format
(`slm_jax.eval.proposals.FileProposals`: a sentence's trees on consecutive lines, a blank line after
each sentence).

Bad input, counted and reported on stderr at the end:
- an empty (or whitespace-only) line: an empty output line in tree mode, so output line k is
  always input line k; no block in `--samples` mode (blocks are keyed by their words);
- a sentence longer than the model's word limit (`max_words`, 300 for the shipped model): skipped
  with a message naming the line (an empty output line in tree mode, no block with samples);
- characters the model never saw: read as the character UNK (words likewise), never an error;
- invalid UTF-8, or a `--pretokenized` word holding `(` or `)` (PTB writes -LRB- / -RRB-):
  `error: FILE:LINE: …` and exit code 2;
- a missing or corrupt model folder: `error: <file>: …` and exit code 2.
"""

from __future__ import annotations

import collections
import contextlib
import sys
from typing import Iterator, TextIO

from slm_jax import cli
from slm_jax.parser.api import load_parser
from slm_jax.ptb import format_tree
from slm_jax.splitting import ptb_words

CHUNK = 512  # sentences parsed per call (input is streamed in chunks)


def _lines(path: str) -> Iterator[str]:
  """The input's lines, decoded as UTF-8; invalid UTF-8 names the line and the byte."""
  if path == "-" and not hasattr(sys.stdin, "buffer"):  # a text stream (tests)
    yield from sys.stdin
    return
  where, offset = ("<stdin>" if path == "-" else path), 0
  with (contextlib.nullcontext(sys.stdin.buffer) if path == "-" else open(path, "rb")) as f:
    for number, raw in enumerate(f, 1):
      try:
        yield raw.decode("utf-8")
      except UnicodeDecodeError as error:
        raise cli.CliError(f"{where}:{number}: invalid UTF-8 at byte {offset + error.start} "
                           f"({error.reason}); save the file as UTF-8") from None
      offset += len(raw)


def _chunks(lines: Iterator[str], pretokenized: bool, max_words: int, counts, where: str):
  """(line number, words or None) in chunks; None marks an empty or too long line."""
  chunk: list[tuple[int, list[str] | None]] = []
  for number, line in enumerate(lines, 1):
    text = line.strip()
    words = (text.split() if pretokenized else ptb_words(text)) if text else []
    if pretokenized and any("(" in w or ")" in w for w in words):
      bracket = next(w for w in words if "(" in w or ")" in w)
      raise cli.CliError(f"{where}:{number}: word {bracket!r} holds a bracket: --pretokenized "
                         "words are PTB tokens (write -LRB- / -RRB-), or drop --pretokenized")
    if not words:
      counts["empty lines"] += 1
      chunk.append((number, None))
    elif len(words) > max_words:
      counts["too long (skipped)"] += 1
      print(f"{where}:{number}: skipped: {len(words)} words, more than the model's limit of "
            f"{max_words}", file=sys.stderr)
      chunk.append((number, None))
    else:
      chunk.append((number, words))
    if len(chunk) == CHUNK:
      yield chunk
      chunk = []
  if chunk:
    yield chunk


def parse_stream(parser, lines: Iterator[str], out: TextIO, *, pretokenized: bool = False,
                 samples: int = 0, seed: int = 0, where: str = "<input>") -> collections.Counter:
  """Parses `lines` onto `out` (formats in the module docstring); returns the counts."""
  counts: collections.Counter = collections.Counter()
  for chunk in _chunks(lines, pretokenized, parser.max_words, counts, where):
    sentences = [words for _, words in chunk if words is not None]
    if samples:
      found = iter(parser.proposals_batch(sentences, samples, seed=seed + counts["sentences"]))
    else:
      found = iter(parser.parse(sentences))
    for _, words in chunk:
      if words is None:
        if not samples:
          out.write("\n")
        continue
      counts["sentences"] += 1
      if samples:
        trees = [p.tree for p in next(found)]
        counts["trees"] += len(trees)
        out.write("".join(format_tree(t) + "\n" for t in trees) + "\n")
      else:
        out.write(format_tree(next(found)) + "\n")
        counts["trees"] += 1
  return counts


@cli.options
class ParserParseOptions:
  """The flags of `python -m slm_jax.parser.parse` (the module docstring)."""

  input: str = cli.option(positional=True, help="one sentence per line; - for standard input")
  model: str | None = cli.option(None, help="parser folder (default: the shipped GUM model, "
                                 "slm_jax/parser/data/gum)")
  pretokenized: bool = cli.option(False, help="lines are space-separated PTB words, kept as "
                                  "they are")
  samples: int = cli.option(0, help="K: write up to K distinct trees per sentence (proposals "
                            "format)")
  seed: int = cli.option(0)
  output: str = cli.option("-", help="output file (default: standard output)")

  def validate(self) -> None:
    if self.samples < 0:
      raise cli.CliError(f"--samples must be ≥ 0, got {self.samples}")


def parse_file(options: ParserParseOptions) -> dict[str, int]:
  """Parses `options.input` into `options.output`; the counts (`parse_stream`'s)."""
  if options.input != "-":
    open(options.input, encoding="utf-8").close()  # a missing input fails before the model loads
  model = load_parser(options.model)
  where = "<stdin>" if options.input == "-" else options.input
  out = sys.stdout if options.output == "-" else open(options.output, "w", encoding="utf-8")
  try:
    return parse_stream(model, _lines(options.input), out, pretokenized=options.pretokenized,
                        samples=options.samples, seed=options.seed, where=where)
  finally:
    if out is not sys.stdout:
      out.close()


def main(argv=None) -> int:
  counts = parse_file(cli.parse_options(ParserParseOptions, argv,
                                        prog="python -m slm_jax.parser.parse",
                                        doc=__doc__.split("\n\n", 1)[0]))
  extra = ", ".join(f"{k}: {v}" for k, v in counts.items() if k not in ("sentences", "trees"))
  print(f"parsed {counts['sentences']} sentences ({counts['trees']} trees)"
        + (f"; {extra}" if extra else ""), file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(cli.run(main))
