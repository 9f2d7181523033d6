"""Building the GTCA parse cache (SPEC §10): records → prompts → parser trees → span trees.

`build_cache(records, tokenizer, cache, fmt, parser_factory)` stores the span tree of every (id,
record) not yet in the cache (`slm_jax.gtca.parse_cache`). A record is an MCQA `{"id", "question",
"options": [...], "context"?}` or a sentence `{"id", "sentence"}`, with an optional `tree` (PTB
text, one tree per sentence of the context and question fields in order) used instead of parsing;
`read_records` reads them from JSON lines (`slm_jax.gtca.cache_records` from a real set or PTB
files). The prompt is built with the cache's `PromptFormat` (left truncation, chat template, BOS);
its text fields are split into sentences and parsed in blocks by the parser (`parser_identity`:
the sha256 of a parser folder, stored in the cache's meta); a failed batch is parsed sentence by
sentence. A key already present is counted (`cached already`), so a killed run resumes; ids equal
to another record's are counted as duplicates and stored once. `BuildReport` counts examples,
parsed, cached already, duplicates, truncated, errors (the first `KEPT_ERRORS` kept), long
sentences split, trees over K at a height.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib
from typing import Any, Callable, Mapping, Sequence

from slm_jax import files, identity
from slm_jax.gtca.parse_cache import ParseCache, cache_key
from slm_jax.gtca.prompts import PromptError, PromptFormat, TextTokenizer
from slm_jax.gtca.spans import K, SpanError, heights, parse_sentences, span_tree

KEPT_ERRORS = 20


def parser_identity(folder: str | pathlib.Path) -> str:
  """THE content digest (`identity.content_digest`) of the parser folder's weight and config
  files (its training summary left out)."""
  weights = sorted(p for p in pathlib.Path(folder).iterdir() if p.is_file() and p.suffix in (
      ".json", ".safetensors", ".npz", ".msgpack") and p.name != "summary.json")
  return f"{pathlib.Path(folder).name} digest:{identity.content_digest(*weights)}"


@dataclasses.dataclass
class BuildReport:
  examples: int = 0  # records of this shard
  parsed: int = 0  # span trees built and stored now
  cached: int = 0  # keys already in the cache (a rerun)
  duplicates: int = 0  # ids equal to another record's of this run
  truncated: int = 0  # prompts cut from the left to max_len
  errors: int = 0  # records that produced no span tree
  split_sentences: int = 0  # sentences longer than the parser's max_words, parsed in pieces
  over_k: int = 0  # stored trees with more than K nodes at some height (the branch cuts them)
  messages: list[str] = dataclasses.field(default_factory=list)

  def error(self, message: str) -> None:
    self.errors += 1
    if len(self.messages) < KEPT_ERRORS:
      self.messages.append(message)

  def summary(self) -> str:
    return (f"examples {self.examples}, parsed {self.parsed}, cached already {self.cached}, "
            f"duplicates {self.duplicates}, truncated {self.truncated}, errors {self.errors}, "
            f"long sentences split {self.split_sentences}, trees over K={K} at a height "
            f"{self.over_k}")


def _trees_of(record: Mapping[str, Any], example: str):
  from slm_jax import ptb  # pylint: disable=import-outside-toplevel
  try:
    trees = ptb.parse_trees(str(record["tree"]), source=f"example {example} tree")
  except ptb.TreeError as error:
    raise SpanError(f"example {example}: malformed tree: {error}") from None
  if not trees:
    raise SpanError(f"example {example}: the `tree` field holds no tree")
  return trees


def build_cache(records: Sequence[tuple[str, Mapping[str, Any]]], tokenizer: TextTokenizer,
                cache: ParseCache, fmt: PromptFormat, parser_factory: Callable[[], Any] | None,
                block: int = 256, progress: Callable[[int, int], None] | None = None
                ) -> BuildReport:
  """Stores the span tree of every (id, record) not yet cached (see the module docstring).
  `parser_factory()` gives a parser (`slm_jax.parser.api.Parser`) the first time a record has no
  `tree`; None: such records are errors."""
  report = BuildReport(examples=len(records))
  parser = None
  seen: set[str] = set()
  for first in range(0, len(records), block):
    todo = []  # (example, prompt, key, trees or None)
    rows = records[first:first + block]
    prompts = []
    for example, record in rows:
      try:
        prompt = fmt.prompt(record, tokenizer, example)
      except PromptError as error:
        report.error(str(error))
        continue
      report.truncated += prompt.truncated > 0
      prompts.append((example, record, prompt, cache_key(prompt.ids_T)))
    present = cache.present(key for *_, key in prompts)
    for example, record, prompt, key in prompts:
      if key in seen:  # stored by this run already (an earlier block): another record's ids
        report.duplicates += 1
      elif key in present:
        report.cached += 1
      else:
        seen.add(key)
        todo.append([example, record, prompt, key, None])
    sentences, owners = [], []
    for item in todo:
      example, record, prompt = item[:3]
      if "tree" in record:
        try:
          item[4] = _trees_of(record, example)
        except SpanError as error:
          report.error(str(error))
          item[4] = error
        continue
      if parser is None:
        if parser_factory is None:
          report.error(f"example {example}: no `tree` field and no parser")
          item[4] = SpanError("no parser")
          continue
        parser = parser_factory()
      split = collections.Counter()
      words = parse_sentences(prompt, parser.max_words, split)
      report.split_sentences += split["split_sentences"]
      sentences.extend(words)
      owners.extend([id(item)] * len(words))
      item[4] = []
    if sentences:
      parsed = _parse(parser, sentences, report)
      by_item = collections.defaultdict(list)
      for owner, tree in zip(owners, parsed):
        by_item[owner].append(tree)
      for item in todo:
        if id(item) in by_item:
          trees = by_item[id(item)]
          item[4] = (SpanError(f"example {item[0]}: the parser failed") if None in trees
                     else trees)
          if None in trees:
            report.error(str(item[4]))
    done = []
    for example, _, prompt, key, trees in todo:
      if isinstance(trees, Exception):
        continue
      try:
        tree = span_tree(prompt, trees)
      except SpanError as error:
        report.error(str(error))
        continue
      report.over_k += heights(tree)[1] > 0
      done.append((key, tree))
    cache.put_many(done)
    report.parsed += len(done)
    if progress is not None:
      progress(min(first + block, len(records)), len(records))
  return report


def _parse(parser, sentences: list[list[str]], report: BuildReport) -> list:
  """Parser trees for `sentences`; if the batch fails, sentence by sentence (None: failed)."""
  try:
    return list(parser.parse(sentences))
  except Exception:  # pylint: disable=broad-except
    out = []
    for words in sentences:
      try:
        out.append(parser.parse([words])[0])
      except Exception as error:  # pylint: disable=broad-except
        report.messages.append(f"parser failed on {' '.join(words)[:80]!r}: {error}")
        out.append(None)
    return out


def read_records(path: str | pathlib.Path, index: int, count: int,
                 report_errors: list[str]) -> list[tuple[str, dict]]:
  """(id, record) of the lines i ≡ index (mod count); an unreadable line is an error message."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"--data {path} not found")
  out, line_index = [], -1
  # lines on \n only; invalid UTF-8 (a Latin-1 file) is refused naming the file, line and byte
  for number, line in files.iter_lines(path):
    if not line.strip():
      continue
    line_index += 1
    if line_index % count != index:
      continue
    try:
      record = json.loads(line)
      if not isinstance(record, dict):
        raise ValueError(f"a JSON object is needed, got {type(record).__name__}")
    except ValueError as error:
      report_errors.append(f"{path}:{number}: {error}")
      continue
    out.append((str(record.get("id", f"{path.name}:{number}")), record))
  return out
