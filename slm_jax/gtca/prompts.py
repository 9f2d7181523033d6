"""GTCA prompts: the text, the character range of every field, token ids with per-token character
offsets, and the token update mask m_t (SPEC §10).

MCQA layout (the user message, when a chat template renders it):

    Context: {context}          only when the record has a non-empty context
    Question: {question}
    Options:
    A. {option 0}
    B. {option 1}
    …
    Answer:

Fields (character ranges `[start, end)` into `Prompt.text`): `parse_fields` — what the parser
reads (the context and question *text*, without their labels); `options_header` (`Options:`);
`option_lines` (`A. …` each, without the newline); `answer` (`Answer:` … the end of the text, so a
chat template's assistant header belongs to it). BLiMP / CoLA: the text is the sentence itself (or
its chat rendering), `parse_fields` = the sentence, no options, m ≡ 1.

m_t = 0 for every token whose characters overlap the options block (the `Options:` header
through the end of the last option line: header, option lines and the newlines between them),
1 elsewhere (zero-width tokens such as a prepended BOS get 1).

An example longer than `max_len` tokens is truncated from the left (as the paper does):
`Prompt.truncated` counts the dropped tokens (0 when none). `PromptFormat.max_len` bounds the
whole row the model reads: an MCQA prompt is always followed by its answer letter (the training
target, the scored token), so `PromptFormat` keeps at most `max_len − answer_tokens` prompt
tokens (`answer_tokens` = 1) and prompt + letter ≤ max_len; a sentence prompt has nothing after it
and keeps `max_len`. (The bare `mcqa_prompt` / `sentence_prompt` take `max_len` as the prompt's
own limit.) The cache key is computed from the truncated ids, so the builder and the trainer must
use the same `PromptFormat`; the cache stores it (`PromptFormat.to_meta`) and readers rebuild it
with `PromptFormat.from_meta` (a cache written before `answer_tokens` existed reads as 0, the way
it was built).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import string
from typing import Any, Callable, Mapping, Sequence

import numpy as np

LETTERS = string.ascii_uppercase
MCQA = "mcqa"
SENTENCE = "sentence"


class PromptError(ValueError):
  """A record that cannot become a prompt (names the example and what is wrong)."""


class TextTokenizer:
  """Ids and character offsets of a text, from a `tokenizers.Tokenizer`, with the backbone's BOS
  id and chat template (a callable: user message → rendered text) when it has them.
  `identity` is the sha256 of the tokenizer's canonical JSON: the parse cache's stale check."""

  def __init__(self, tokenizer: Any, *, bos_id: int | None = None,
               chat_template: Callable[[str], str] | None = None, name: str = ""):
    self.tokenizer = tokenizer
    self.bos_id = bos_id
    self.chat_template = chat_template
    self.name = name

  @classmethod
  def load(cls, path: str | pathlib.Path) -> "TextTokenizer":
    """A Hugging Face checkpoint folder (tokenizer.json, its special tokens and chat template) or
    a bare tokenizer.json file (no BOS, no template)."""
    path = pathlib.Path(path)
    if path.is_dir():
      from slm_jax.hf import tokenizer as hf_tokenizer  # pylint: disable=import-outside-toplevel
      return cls.from_checkpoint(hf_tokenizer.CheckpointTokenizer(path))
    if not path.is_file():
      raise FileNotFoundError(f"backbone {path}: neither a checkpoint folder nor a tokenizer.json")
    import tokenizers  # pylint: disable=import-outside-toplevel
    try:
      return cls(tokenizers.Tokenizer.from_file(str(path)), name=path.name)
    except Exception as error:  # tokenizers raises a bare Exception on malformed files
      raise ValueError(f"cannot read tokenizer {path}: {error}") from error

  @classmethod
  def from_checkpoint(cls, tok: Any) -> "TextTokenizer":
    """From an `slm_jax.hf.tokenizer.CheckpointTokenizer`: its BOS id, and its chat template
    rendering one user message with the generation prompt (the assistant header) after it."""
    template = None
    if tok.template is not None:
      def template(content: str) -> str:
        return tok.chat([{"role": "user", "content": content}], add_generation_prompt=True)
    return cls(tok.tokenizer, bos_id=tok.bos_id, chat_template=template, name=tok.folder.name)

  @property
  def identity(self) -> str:
    return "sha256:" + hashlib.sha256(self.tokenizer.to_str().encode("utf-8")).hexdigest()

  def encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids_T int64, offsets_T2 int64 character [start, end)) of `text`, no special tokens added
    (special tokens written in the text, as chat templates do, are recognized)."""
    encoding = self.tokenizer.encode(text, add_special_tokens=False)
    ids_T = np.asarray(encoding.ids, np.int64)
    offsets_T2 = np.asarray(encoding.offsets, np.int64).reshape(-1, 2)
    return ids_T, offsets_T2


@dataclasses.dataclass(frozen=True)
class Prompt:
  """One example's prompt (see the module docstring for the fields)."""

  example_id: str
  kind: str  # MCQA | SENTENCE
  text: str
  parse_fields: tuple[tuple[int, int], ...]
  options_header: tuple[int, int] | None
  option_lines: tuple[tuple[int, int], ...]
  answer: tuple[int, int] | None
  ids_T: np.ndarray  # int64, after left truncation
  offsets_T2: np.ndarray  # int64 character ranges of the kept tokens
  update_mask_T: np.ndarray  # float32 m_t
  truncated: int = 0  # tokens dropped from the left
  field_names: tuple[str, ...] = ()  # of parse_fields: "context", "question" / "sentence"

  def __len__(self) -> int:
    return int(self.ids_T.shape[0])

  def fields(self) -> dict[str, tuple[int, int]]:
    """Every field's character range by name: context, question (or sentence), options_header,
    option_A, option_B, …, answer."""
    out = dict(zip(self.field_names, self.parse_fields))
    if self.options_header is not None:
      out["options_header"] = self.options_header
    for letter, line in zip(LETTERS, self.option_lines):
      out[f"option_{letter}"] = line
    if self.answer is not None:
      out["answer"] = self.answer
    return out

  def field_text(self, span: tuple[int, int]) -> str:
    return self.text[span[0]:span[1]]


def overlapping(offsets_T2: np.ndarray, start: int, end: int) -> np.ndarray:
  """bool_T: tokens whose character range overlaps [start, end) (zero-width tokens never do)."""
  return (offsets_T2[:, 0] < end) & (offsets_T2[:, 1] > start) & (
      offsets_T2[:, 1] > offsets_T2[:, 0])


@dataclasses.dataclass(frozen=True)
class PromptFormat:
  """How records become token ids: left truncation so that a row — the prompt and, after an
  MCQA prompt, its `answer_tokens` answer-letter tokens — has at most `max_len` tokens (None:
  never), the backbone's chat template or plain text, a BOS id prepended or not. Stored in the
  parse cache's meta."""

  max_len: int | None = None
  chat: bool = False
  bos: bool = False
  answer_tokens: int = 1  # tokens appended after an MCQA prompt (its answer letter)

  def to_meta(self) -> dict[str, str]:
    return {"prompt_format": json.dumps(dataclasses.asdict(self), sort_keys=True)}

  @classmethod
  def from_meta(cls, meta: Mapping[str, str]) -> "PromptFormat":
    # A cache written before `answer_tokens` existed truncated prompts to max_len itself.
    return cls(**{"answer_tokens": 0, **json.loads(meta["prompt_format"])})

  def prompt_limit(self, kind: str, example_id: str = "?") -> int | None:
    """The most prompt tokens of a `kind` prompt (MCQA: room left for the answer letter)."""
    if self.max_len is None:
      return None
    limit = self.max_len - (self.answer_tokens if kind == MCQA else 0)
    if limit < 1:
      raise PromptError(f"example {example_id}: max_len {self.max_len} leaves no room for a "
                        f"prompt before its {self.answer_tokens} answer token(s)")
    return limit

  def prompt(self, record: Mapping[str, Any], tokenizer: TextTokenizer,
             example_id: str | None = None) -> Prompt:
    """The prompt of a JSON record: MCQA (`question`, `options`, optional `context`) or a single
    sentence (`sentence`); `example_id` defaults to the record's `id`."""
    example_id = str(record.get("id", "?") if example_id is None else example_id)
    if self.chat and tokenizer.chat_template is None:
      raise PromptError(f"example {example_id}: the prompt format asks for a chat template and "
                        f"the backbone {tokenizer.name or '(tokenizer)'} has none")
    template = tokenizer.chat_template if self.chat else None
    bos_id = None
    if self.bos:
      if tokenizer.bos_id is None:
        raise PromptError(f"example {example_id}: the prompt format asks for a BOS token and "
                          f"the backbone {tokenizer.name or '(tokenizer)'} defines none")
      bos_id = tokenizer.bos_id
    if "sentence" in record:
      return sentence_prompt(str(record["sentence"]), tokenizer, example_id=example_id,
                             max_len=self.prompt_limit(SENTENCE, example_id),
                             chat_template=template, bos_id=bos_id)
    if "question" not in record or "options" not in record:
      raise PromptError(f"example {example_id}: a record needs `question` and `options` (MCQA) "
                        f"or `sentence` (BLiMP/CoLA); it has {sorted(record)}")
    options = record["options"]
    if not isinstance(options, (list, tuple)):
      raise PromptError(f"example {example_id}: `options` must be a list of strings, got "
                        f"{type(options).__name__}")
    return mcqa_prompt(str(record["question"] or ""), [str(o) for o in options], tokenizer,
                       context=str(record.get("context") or ""), example_id=example_id,
                       max_len=self.prompt_limit(MCQA, example_id), chat_template=template,
                       bos_id=bos_id)


def _finish(example_id: str, kind: str, content: str, fields: dict[str, Any],
            tokenizer: TextTokenizer, masked: tuple[int, int] | None, max_len: int | None,
            chat_template: Callable[[str], str] | None, bos_id: int | None) -> Prompt:
  """Renders `content` (chat template), shifts the field ranges, tokenizes, truncates, masks."""
  text, shift = content, 0
  if chat_template is not None:
    text = chat_template(content)
    shift = text.find(content)
    if shift < 0:
      raise PromptError(f"example {example_id}: the chat template does not contain the user "
                        "message verbatim, so the field ranges cannot be placed")
  move = lambda span: None if span is None else (span[0] + shift, span[1] + shift)
  if kind == MCQA and fields["answer"] is not None:
    fields["answer"] = (fields["answer"][0], len(text) - shift)  # `Answer:` … the end
  ids_T, offsets_T2 = tokenizer.encode(text)
  if bos_id is not None:
    ids_T = np.concatenate([[bos_id], ids_T])
    offsets_T2 = np.concatenate([np.zeros((1, 2), np.int64), offsets_T2])
  dropped = 0
  if max_len is not None and len(ids_T) > max_len:
    if max_len < 1:
      raise PromptError(f"example {example_id}: max_len must be >= 1, got {max_len}")
    dropped = len(ids_T) - max_len
    ids_T, offsets_T2 = ids_T[dropped:], offsets_T2[dropped:]
  mask_T = np.ones(len(ids_T), np.float32)
  if masked is not None:
    start, end = move(masked)
    mask_T[overlapping(offsets_T2, start, end)] = 0.0
  return Prompt(example_id=example_id, kind=kind, text=text,
                parse_fields=tuple(move(s) for s in fields["parse"]),
                options_header=move(fields.get("header")),
                option_lines=tuple(move(s) for s in fields.get("options", ())),
                answer=move(fields.get("answer")), ids_T=ids_T, offsets_T2=offsets_T2,
                update_mask_T=mask_T, truncated=dropped, field_names=tuple(fields["names"]))


def mcqa_prompt(question: str, options: Sequence[str], tokenizer: TextTokenizer, *,
                context: str = "", example_id: str = "?", max_len: int | None = None,
                chat_template: Callable[[str], str] | None = None,
                bos_id: int | None = None) -> Prompt:
  """The MCQA prompt (module docstring layout); an empty question or no options is an error."""
  question, context = question.strip(), context.strip()
  if not question:
    raise PromptError(f"example {example_id}: empty question")
  if not options:
    raise PromptError(f"example {example_id}: no options")
  if len(options) > len(LETTERS):
    raise PromptError(f"example {example_id}: {len(options)} options, at most {len(LETTERS)}")
  parts: list[str] = []
  parse: list[tuple[int, int]] = []

  def add(label: str, body: str) -> tuple[int, int]:
    at = sum(map(len, parts)) + len(label)
    parts.append(label + body + "\n")
    return at, at + len(body)

  if context:
    parse.append(add("Context: ", context))
  parse.append(add("Question: ", question))
  header = add("", "Options:")
  lines = []
  for letter, option in zip(LETTERS, options):
    option = " ".join(str(option).split())  # one line each
    if not option:
      raise PromptError(f"example {example_id}: option {letter} is empty")
    lines.append(add("", f"{letter}. {option}"))
  answer_at = sum(map(len, parts))
  content = "".join(parts) + "Answer:"
  fields = {"parse": parse, "names": ["context"] * bool(context) + ["question"],
            "header": header, "options": lines, "answer": (answer_at, len(content))}
  return _finish(example_id, MCQA, content, fields, tokenizer, (header[0], lines[-1][1]),
                 max_len, chat_template, bos_id)


def sentence_prompt(sentence: str, tokenizer: TextTokenizer, *, example_id: str = "?",
                    max_len: int | None = None, chat_template: Callable[[str], str] | None = None,
                    bos_id: int | None = None) -> Prompt:
  """A BLiMP / CoLA prompt: the sentence alone, m ≡ 1; an empty sentence is an error."""
  sentence = sentence.strip()
  if not sentence:
    raise PromptError(f"example {example_id}: empty sentence")
  fields = {"parse": [(0, len(sentence))], "names": ["sentence"]}
  return _finish(example_id, SENTENCE, sentence, fields, tokenizer, None, max_len, chat_template,
                 bos_id)
