"""The GTCA parse cache: key, miss, stale identity, and the builder CLI (given trees, shards,
resume, merge)."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import struct

import numpy as np
import pytest

from slm_jax import cli
from slm_jax.gtca import cache as gcache
from slm_jax.gtca import cache_builder, parse_cache, prompts, spans
from slm_jax.ptb import parse_trees

tokenizers = pytest.importorskip("tokenizers")

from tests.test_gtca_spans import QUESTION, QUESTION_TREE, tiny_tokenizer  # noqa: E402

IDENTITY = {"tokenizer": "sha256:aaa", "parser": "given"}


def test_cache_key_is_sha256_of_little_endian_uint32():
  ids = [0, 1, 255, 256, 65535, 70000, 2**32 - 1]
  expected = hashlib.sha256(struct.pack("<%dI" % len(ids), *ids)).hexdigest()
  assert parse_cache.cache_key(ids) == expected
  assert parse_cache.cache_key(np.asarray(ids, np.int64)) == expected
  assert parse_cache.cache_key(np.asarray(ids, ">u4")) == expected  # byte order of the input ignored
  assert parse_cache.cache_key([]) == hashlib.sha256(b"").hexdigest()
  assert parse_cache.cache_key([1, 2]) != parse_cache.cache_key([2, 1])
  with pytest.raises(ValueError, match="token ids"):
    parse_cache.cache_key([1, -2])
  with pytest.raises(ValueError, match="token ids"):
    parse_cache.cache_key([[1, 2]])


def small_tree(n: int) -> spans.SpanTree:
  return spans.SpanTree(spans.SpanNode(spans.ROOT, 0, n, (spans.SpanNode("a", 0, n),)), n,
                        ((0, 1),))


def test_get_put_and_a_miss_names_the_example(tmp_path):
  path = tmp_path / "c.sqlite"
  with parse_cache.ParseCache(path, IDENTITY, writable=True) as cache:
    cache.put_many([(parse_cache.cache_key([5, 6, 7]), small_tree(3))])
    assert len(cache) == 1
  with parse_cache.ParseCache(path, {"tokenizer": IDENTITY["tokenizer"]}) as cache:
    assert cache.get([5, 6, 7], example="ex-1") == small_tree(3)
    assert cache.meta["parser"] == "given"
    with pytest.raises(parse_cache.CacheMissError, match="example ex-2 .*3 tokens"):
      cache.get([5, 6, 8], example="ex-2")
  with pytest.raises(FileNotFoundError, match="not found"):
    parse_cache.ParseCache(tmp_path / "none.sqlite", IDENTITY)


@pytest.mark.parametrize("stored, why", [
    ('{"v": 1, "nodes": [["S", 0, ', "not a span tree (Expecting value: line 1 column 29"),
    ('{"v": 1}', "not a span tree (KeyError: 'nodes')"),
    ("[1, 2]", "not a span tree ("),
    (small_tree(4).to_json(), "the span tree covers 4 tokens, the ids have 3"),
    # issue #47: a span ending past its row (999 in a 3-token row) was accepted
    ('{"v":1,"n":3,"masked":[],"nodes":[["S",0,3,1],["NP",1,999,0]]}',
     "not a span tree (span tree JSON: node 'NP' [1, 999) ends outside its row of 3 tokens)"),
    ('{"v":1,"n":5,"masked":[],"nodes":[["S",0,5,1],["NP",0,3,1],["N",2,4,0]]}',
     "not a span tree (span tree JSON: node 'N' [2, 4) ends outside its parent [0, 3) of 5"),
    ('{"v":1,"n":3,"masked":[],"nodes":[["S",0,999,0]]}',
     "not a span tree (span tree JSON: node 'S' [0, 999) ends outside its row of 3 tokens)"),
    ('{"v":1,"n":3,"masked":[[2,7]],"nodes":[]}',
     "not a span tree (span tree JSON: masked range [2, 7) outside its row of 3 tokens)"),
])
def test_a_malformed_cached_tree_names_file_and_key(tmp_path, capsys, stored, why):
  """A stored tree that cannot be read is one line naming the file, the record's key and the
  example (before: "Expecting value: line 1 column 24", naming nothing)."""
  path = tmp_path / "c.sqlite"
  key = parse_cache.cache_key([5, 6, 7])
  with parse_cache.ParseCache(path, IDENTITY, writable=True) as cache:
    cache.put_many([(key, small_tree(3))])
    with cache._db:  # pylint: disable=protected-access
      cache._db.execute("UPDATE spans SET tree = ? WHERE key = ?", (stored, key))  # pylint: disable=protected-access

  def read(_):
    with parse_cache.ParseCache(path, IDENTITY) as cache:
      cache.get([5, 6, 7], example="ex-1")

  assert cli.run(read, []) == cli.EXIT_USAGE
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line.startswith(f"error: {path}: record {key}: {why}"), line
  assert "(example ex-1); rebuild the cache" in line


def test_a_cache_from_another_tokenizer_is_refused(tmp_path):
  path = tmp_path / "c.sqlite"
  parse_cache.ParseCache(path, IDENTITY, writable=True).close()
  with pytest.raises(parse_cache.StaleCacheError, match="tokenizer 'sha256:aaa', not 'sha256:bbb'"):
    parse_cache.ParseCache(path, {"tokenizer": "sha256:bbb"})
  with pytest.raises(parse_cache.StaleCacheError, match="parser"):
    parse_cache.ParseCache(path, {**IDENTITY, "parser": "gum sha256:123"}, writable=True)
  (tmp_path / "junk.sqlite").write_bytes(b"not sqlite at all, " * 100)
  with pytest.raises(ValueError, match="not a GTCA span cache"):
    parse_cache.ParseCache(tmp_path / "junk.sqlite", IDENTITY)


def test_tokenizer_identity_is_stable_and_distinguishes_tokenizers(tmp_path):
  tok = tiny_tokenizer()
  tok.save(str(tmp_path / "tokenizer.json"))
  loaded = prompts.TextTokenizer.load(tmp_path / "tokenizer.json")
  assert loaded.identity == prompts.TextTokenizer(tok).identity
  assert prompts.TextTokenizer(tiny_tokenizer(280)).identity != loaded.identity


# ---- the builder CLI ---------------------------------------------------------------------------

RECORDS = [
    {"id": "m1", "question": QUESTION, "options": ["cats", "dogs"], "answer": "A",
     "tree": QUESTION_TREE},
    {"id": "m2", "context": "Cats hunt.", "question": "Which animals chase mice?",
     "options": ["cats", "dogs"], "tree": "(S (NP Cats) (VP hunt) .) "
                                          "(SBARQ (WHNP Which animals) (SQ (VP chase mice)) ?)"},
    {"id": "s1", "sentence": "The cats chase the mice.",
     "tree": "(S (NP The cats) (VP chase (NP the mice)) .)"},
    {"id": "bad-empty", "question": "", "options": ["a"], "tree": "(S a)"},
    {"id": "bad-tree", "sentence": "Dogs bark.", "tree": "(S Cats meow .)"},
    {"id": "dup", "sentence": "The cats chase the mice.",
     "tree": "(S (NP The cats) (VP chase (NP the mice)) .)"},
]


@pytest.fixture()
def setup(tmp_path):
  tokenizer_path = tmp_path / "tokenizer.json"
  tiny_tokenizer().save(str(tokenizer_path))
  data = tmp_path / "data.jsonl"
  data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS) + "{not json\n")
  return tmp_path, tokenizer_path, data


def run_cli(capsys, *argv):
  code = cli.run(gcache.main, list(argv))
  out, err = capsys.readouterr()
  return code, out, err


def test_cli_builds_resumes_and_counts(setup, capsys):
  tmp_path, tokenizer_path, data = setup
  out = tmp_path / "cache.sqlite"
  args = (f"--data={data}", f"--backbone={tokenizer_path}", f"--out={out}")
  code, stdout, stderr = run_cli(capsys, *args)
  assert code == cli.EXIT_INCOMPLETE  # two bad records and a bad line: counted, listed
  assert ("examples 7, parsed 3, cached already 0, duplicates 1, truncated 0, errors 3"
          in stdout), stdout
  assert "example bad-empty: empty question" in stderr
  assert "example bad-tree: tree word 0 'Cats'" in stderr
  assert "data.jsonl:7:" in stderr
  assert "gtca cache: 6/6 examples" in stderr and "ETA" in stderr
  # A rerun parses nothing: everything already there is counted.
  code, stdout, _ = run_cli(capsys, *args)
  assert "parsed 0, cached already 4, duplicates 0" in stdout  # m1, m2, s1 and dup's key
  # The trainer side: the stored prompt format rebuilds the ids, the tree comes back.
  tok = prompts.TextTokenizer.load(tokenizer_path)
  with parse_cache.ParseCache(out, {"tokenizer": tok.identity}) as cache:
    fmt = prompts.PromptFormat.from_meta(cache.meta)
    for record in RECORDS[:3]:
      prompt = fmt.prompt(record, tok)
      tree = cache.get(prompt.ids_T, example=record["id"])
      assert tree == spans.span_tree(prompt, parse_trees(record["tree"]))
    with pytest.raises(parse_cache.CacheMissError, match="example bad-tree"):
      cache.get(fmt.prompt(RECORDS[4], tok).ids_T, example="bad-tree")
  # Another tokenizer on the same cache: refused in one line, exit 2.
  other = tmp_path / "other.json"
  tiny_tokenizer(280).save(str(other))
  code, _, stderr = run_cli(capsys, f"--data={data}", f"--backbone={other}", f"--out={out}")
  assert code == cli.EXIT_USAGE and stderr.startswith("error: parse cache") and (
      "tokenizer" in stderr)


def test_cli_truncates_from_the_left_and_counts(setup, capsys):
  tmp_path, tokenizer_path, data = setup
  out = tmp_path / "short.sqlite"
  code, stdout, _ = run_cli(capsys, f"--data={data}", f"--backbone={tokenizer_path}",
                            f"--out={out}", "--max_len=30")
  assert "truncated 2" in stdout, stdout  # the two MCQA prompts are longer than 30 tokens
  with parse_cache.ParseCache(out, {}) as cache:
    assert json.loads(cache.meta["prompt_format"])["max_len"] == 30


def test_cli_shards_then_merge(setup, capsys):
  tmp_path, tokenizer_path, data = setup
  out = tmp_path / "sharded.sqlite"
  base = (f"--data={data}", f"--backbone={tokenizer_path}", f"--out={out}")
  run_cli(capsys, *base, "--shard=0/2")
  code, _, stderr = run_cli(capsys, "--merge", f"--out={out}")
  assert code == cli.EXIT_INCOMPLETE and "shards [1] of 2 are missing" in stderr
  run_cli(capsys, *base, "--shard=1/2")
  assert parse_cache.shard_path(out, 1, 2).name == "sharded.shard-00001-of-00002.sqlite"
  code, stdout, _ = run_cli(capsys, "--merge", f"--out={out}")
  assert code == cli.EXIT_OK and "merged 2 shards" in stdout and "3 span trees" in stdout
  whole = tmp_path / "whole.sqlite"
  run_cli(capsys, *base[:2], f"--out={whole}")
  with parse_cache.ParseCache(out, {}) as merged, parse_cache.ParseCache(whole, {}) as single:
    rows = lambda c: sorted(c._db.execute("SELECT key, tree FROM spans"))  # noqa: E731
    assert rows(merged) == rows(single) and len(merged) == 3
    assert merged.meta["tokenizer"] == single.meta["tokenizer"]


def test_cli_on_a_checkpoint_folder_uses_its_chat_template_bos_and_context(setup, capsys):
  pytest.importorskip("jinja2")
  tmp_path, _, data = setup
  folder = tmp_path / "backbone"
  folder.mkdir()
  tok = tiny_tokenizer()
  tok.add_special_tokens(["<s>"])
  tok.save(str(folder / "tokenizer.json"))
  template = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
              "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
  (folder / "tokenizer_config.json").write_text(json.dumps(
      {"bos_token": "<s>", "chat_template": template}))
  (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 40}))
  out = tmp_path / "chat.sqlite"
  code, stdout, _ = run_cli(capsys, f"--data={data}", f"--backbone={folder}", f"--out={out}",
                            "--bos")
  assert "parsed 3" in stdout and "truncated 2" in stdout, stdout  # max_len 40 from config.json
  backbone = prompts.TextTokenizer.load(folder)
  assert backbone.bos_id == tok.token_to_id("<s>")
  with parse_cache.ParseCache(out, {"tokenizer": backbone.identity}) as cache:
    fmt = prompts.PromptFormat.from_meta(cache.meta)
    assert fmt == prompts.PromptFormat(max_len=40, chat=True, bos=True)
    prompt = fmt.prompt(RECORDS[2], backbone)
    # a sentence to score is never chat-wrapped (#36); BOS once
    assert prompt.text == "The cats chase the mice."
    assert prompt.ids_T[0] == backbone.bos_id and prompt.ids_T[1] != backbone.bos_id
    tree = cache.get(prompt.ids_T, example="s1")
    sentence = tree.root.children[0]
    texts = [prompt.text[a:b] for a, b in prompt.offsets_T2]
    assert "".join(texts[sentence.start:sentence.end]) == "The cats chase the mice."


SURFACE = {"-LRB-": "(", "-RRB-": ")", "``": '"', "''": '"'}
PUNCTUATED = [
    ("q-quote", {"question": 'Why didn\'t the "old" dog (a beagle) bark?',
                 "options": ["it slept", "it left"]}),
    ("s-bracket", {"sentence": 'She said "we can\'t stay" (not today).'}),
    ("m-context", {"context": "The dog (Rex) won't eat.", "question": 'Who said "no"?',
                   "options": ["Rex", "Anna"]}),
]


@pytest.mark.slow  # ~13 s on the shared 2 cores (parser load + JAX compile)
def test_the_shipped_parser_builds_aligned_trees_for_quotes_brackets_and_contractions(tmp_path):
  """gtca.cache with `slm_jax.parser.api.load_parser()` (the shipped GUM model): no errors, and
  every parser word's tokens spell that word (quotes, brackets, `n't` included)."""
  from slm_jax.parser import api  # pylint: disable=import-outside-toplevel
  tok = prompts.TextTokenizer(tiny_tokenizer(), bos_id=0, name="tiny")
  fmt = prompts.PromptFormat(bos=True)
  with parse_cache.ParseCache(tmp_path / "c.sqlite", IDENTITY, writable=True) as cache:
    report = cache_builder.build_cache(PUNCTUATED, tok, cache, fmt, api.load_parser)
    assert (report.errors, report.parsed) == (0, 3), report.messages
    for example, record in PUNCTUATED:
      prompt = fmt.prompt(record, tok, example)
      tree = cache.get(prompt.ids_T, example)
      texts = [prompt.text[a:b] for a, b in prompt.offsets_T2]
      fields = "".join(prompt.field_text(f) + " " for f in prompt.parse_fields)
      spelled = []
      for sentence in tree.root.children:
        if sentence.label in (spans.OPTIONS, spans.ANSWER):
          continue
        for node in (n for n in spans.SpanTree(sentence, 0).nodes() if not n.children):
          joined = "".join(texts[node.start:node.end])
          surface = SURFACE.get(node.label, node.label)
          assert surface in joined, (example, node.label, joined)
          spelled.append(surface)
      # Every non-space character of the parse fields is some word's, in order.
      assert "".join(spelled) == "".join(fields.split()), (example, spelled)
      assert "n't" in spelled and "(" in spelled and ")" in spelled


def test_cli_caches_two_pairs_per_paradigm_of_the_shared_blimp(tmp_path, capsys):
  """`--task=blimp --limit=2` on the real BLiMP release (../shared/data/blimp): both sentences of
  the first 2 pairs of all 67 paradigms, counted (a repeated sentence would be a duplicate)."""
  from slm_jax.gtca import mcqa_data  # pylint: disable=import-outside-toplevel
  from slm_jax.tokenizer import make_tokenizer  # pylint: disable=import-outside-toplevel
  from tests.shared_data import require_shared  # pylint: disable=import-outside-toplevel
  blimp = require_shared("blimp")
  pairs = mcqa_data.load_set("blimp", blimp, limit=2)
  sentences = [s.sentence for pair in pairs.examples for s in pair.sentences()]
  workdir = tmp_path / "workdir"  # a word vocabulary spelling every sentence (no unknown words)
  workdir.mkdir()
  make_tokenizer("word", words=sorted({w for s in sentences for w in s.split()})).save(workdir)
  distinct = len({tuple(s.split()) for s in sentences})
  args = ("--task=blimp", f"--data_root={blimp}", f"--workdir={workdir}", "--bos", "--limit=2",
          "--parser=right_branching", f"--out={tmp_path / 'blimp.sqlite'}")
  code, out, err = run_cli(capsys, *args)
  assert code == cli.EXIT_OK, err
  assert len(pairs.paradigms) == 67 and len(sentences) == 268
  assert "blimp all: 67 paradigms, 134 pairs, 268 sentences (good and bad of every pair)" in out
  assert (f"examples 268, parsed {distinct}, cached already 0, duplicates {268 - distinct}, "
          "truncated 0, errors 0") in out, out
  with parse_cache.ParseCache(tmp_path / "blimp.sqlite", {}) as cache:
    assert len(cache) == distinct and cache.meta["parser"] == "right_branching"
  code, out, _ = run_cli(capsys, *args)  # a rerun finds every sentence
  assert code == cli.EXIT_OK and "parsed 0, cached already 268, duplicates 0" in out, out


# ---- --parser=benepar (the parse extra), through a stand-in `benepar` module ------------------
def _fake_benepar(monkeypatch, seen: list, wrong_leaves: bool = False):
  """A `benepar` module with benepar's interface (InputSentence, Parser.parse_sents → trees with
  `pformat`): each sentence as (TOP (S (NN w0) (VP (NN w1) …))) over its escaped words."""
  import types

  class InputSentence:
    def __init__(self, words, space_after, escaped_words):
      self.words, self.space_after, self.escaped_words = words, space_after, escaped_words

  class Output:
    def __init__(self, text):
      self.text = text

    def pformat(self, margin):
      del margin
      return self.text

  class Parser:
    def __init__(self, model, batch_size):
      self.model = model

    def parse_sents(self, sentences):
      out = []
      for s in sentences:
        seen.append(list(s.words))
        leaves = [f"(NN {w})" for w in s.escaped_words[::-1 if wrong_leaves else 1]]
        out.append(Output(f"(TOP (S {leaves[0]} (VP {' '.join(leaves[1:])})))"))
      return out

  module = types.ModuleType("benepar")
  module.InputSentence, module.Parser = InputSentence, Parser
  monkeypatch.setitem(__import__("sys").modules, "benepar", module)


BENEPAR_RECORDS = [{"id": "b1", "sentence": "Cats (quietly) chase mice."},
                   {"id": "b2", "question": "Which cats chase mice?", "options": ["a", "b"]}]


def test_cli_parses_with_benepar_when_it_is_installed(tmp_path, monkeypatch, capsys):
  tokenizer_path = tmp_path / "tokenizer.json"
  tiny_tokenizer().save(str(tokenizer_path))
  data = tmp_path / "b.jsonl"
  data.write_text("".join(json.dumps(r) + "\n" for r in BENEPAR_RECORDS))
  seen: list = []
  _fake_benepar(monkeypatch, seen)
  out = tmp_path / "b.sqlite"
  code, stdout, _ = run_cli(capsys, f"--data={data}", f"--backbone={tokenizer_path}",
                            f"--out={out}", "--parser=benepar:fake_model")
  assert code == 0 and "parsed 2" in stdout and "errors 0" in stdout, stdout
  assert ["Cats", "(", "quietly", ")", "chase", "mice", "."] in seen  # raw words for its encoder
  tok = prompts.TextTokenizer.load(tokenizer_path)
  with parse_cache.ParseCache(out, {"tokenizer": tok.identity, "parser": "benepar:fake_model"}) as cache:
    fmt = prompts.PromptFormat.from_meta(cache.meta)
    prompt = fmt.prompt(BENEPAR_RECORDS[0], tok)
    expected = parse_trees("(S Cats (VP -LRB- quietly -RRB- chase mice .))")  # TOP, tags dropped
    assert cache.get(prompt.ids_T, example="b1") == spans.span_tree(prompt, expected)
  # a tree over other words than the input is an error naming the example, not a silent tree
  _fake_benepar(monkeypatch, seen, wrong_leaves=True)
  code, stdout, stderr = run_cli(capsys, f"--data={data}", f"--backbone={tokenizer_path}",
                                 f"--out={tmp_path / 'w.sqlite'}", "--parser=benepar:fake_model")
  assert code == cli.EXIT_INCOMPLETE and "errors 2" in stdout
  assert "example b1: the parser failed" in stderr and "leaves are not the input words" in stderr


def test_benepar_without_the_parse_extra_says_how_to_install(tmp_path, monkeypatch, capsys):
  monkeypatch.setitem(__import__("sys").modules, "benepar", None)  # import benepar fails
  tokenizer_path = tmp_path / "tokenizer.json"
  tiny_tokenizer().save(str(tokenizer_path))
  data = tmp_path / "b.jsonl"
  data.write_text(json.dumps(BENEPAR_RECORDS[0]) + "\n")
  code, _, stderr = run_cli(capsys, f"--data={data}", f"--backbone={tokenizer_path}",
                            f"--out={tmp_path / 'b.sqlite'}", "--parser=benepar")
  assert code == cli.EXIT_USAGE and "parse extra" in stderr and "pip install" in stderr


def test_files_that_are_no_span_cache_get_the_one_line_contract(tmp_path, setup, capsys):
  """A folder, another SQLite schema, a corrupt database: `FILE: not a GTCA span cache (…)`,
  for the reader, the writer and the cache CLI (exit 2, one line)."""
  folder = tmp_path / "folder.sqlite"
  folder.mkdir()
  other = tmp_path / "other.sqlite"
  with sqlite3.connect(other) as db:
    db.execute("CREATE TABLE runs (name TEXT)")
  junk = tmp_path / "junk.sqlite"
  junk.write_bytes(b"not sqlite at all, " * 100)
  for path, why in ((folder, "a folder"), (other, "no meta or spans table; tables: runs"),
                    (junk, "DatabaseError")):
    for writable in (False, True):
      with pytest.raises(parse_cache.NotACacheError,
                         match=f"^{re.escape(str(path))}: not a GTCA span cache \\(.*{why}"):
        parse_cache.ParseCache(path, IDENTITY, writable=writable)
  _, tokenizer_path, data = setup
  code, _, stderr = run_cli(capsys, f"--data={data}", f"--backbone={tokenizer_path}",
                            f"--out={folder}")
  assert code == cli.EXIT_USAGE
  assert stderr.strip() == f"error: {folder}: not a GTCA span cache (a folder; give the cache's " \
                           ".sqlite file)"


def test_latin1_data_names_the_file_and_line(tmp_path, setup, capsys):
  """Issue #47 item 9: a Latin-1 --data file was a UnicodeDecodeError naming no file or line."""
  _, tokenizer_path, _ = setup
  data = tmp_path / "latin1.jsonl"
  data.write_bytes(json.dumps(RECORDS[2]).encode() + b"\n" + '{"id": "x", "sentence": "Caf\xe9 ."}'
                   .encode("latin-1") + b"\n")
  code, _, stderr = run_cli(capsys, f"--data={data}", f"--backbone={tokenizer_path}",
                            f"--out={tmp_path / 'c.sqlite'}")
  assert code == cli.EXIT_USAGE
  byte = data.read_bytes().index(b"\xe9")
  assert stderr == (f"error: {data}:2: invalid UTF-8 at byte {byte} (invalid continuation "
                    "byte); save the file as UTF-8\n")


def test_the_cache_cli_refuses_empty_data(tmp_path, setup, capsys):
  _, tokenizer_path, _ = setup
  for text, why in (("", "0 lines refused"), ("{not json\n", "1 lines refused: ")):
    data = tmp_path / "empty.jsonl"
    data.write_text(text)
    out = tmp_path / "empty.sqlite"
    code, _, stderr = run_cli(capsys, f"--data={data}", f"--backbone={tokenizer_path}",
                              f"--out={out}")
    assert code == cli.EXIT_USAGE and f"{data}: no usable records ({why}" in stderr, stderr
    assert not out.exists()
