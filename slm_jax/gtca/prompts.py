"""GTCA prompts: the text, the character range of every field, token ids with per-token character
offsets, and the token update mask m_t (SPEC §10).

MCQA with a chat-template backbone, as the reference writes it (Pineandgrass/
GatedTreeCrossAttention, utils/gtca_format.py): the system prompt `MCQA_SYSTEM`, one user turn

    Question: {question}        (HellaSwag: `HELLASWAG_LEAD` then the context)
    Options:
    A. {option 0}
    B. {option 1}…              (no newline after the last option)

and `Answer:` after the assistant header (on its own line: a newline is added when the
rendered template does not end with one). Without a chat template, the plain layout: the same
lines, then `Answer:` on the next line. A record's `context` adds a `Context: {context}` line
before the question; its `shots` (solved examples: HellaSwag 10, WinoGrande 5, `mcqa_data`) come
first in the same turn, each the same block followed by `Answer: {letter}` and a blank line.

Fields (character ranges `[start, end)` into `GtcaPrompt.text`): `parse_fields` — what the parser
reads (the context and question *text*, without their labels; never a shot); `options_header`
(`Options:`); `option_lines` (`A. …` each, without the newline); `answer` (`Answer:` … the end).

CoLA (`judgment_prompt`, record `{"sentence", "judge": true}`): the CoLA system prompt, the
sentence as the user turn, `Answer:` after the assistant header (plain: the instruction line,
`Sentence: {sentence}`, `Answer:`); the score is the next token, " 1" vs " 0". A sentence to be
*scored* (BLiMP, CoLA's threshold variant: `sentence_prompt`) is the sentence alone and never
wrapped in a chat template; `parse_fields` = the sentence, no options, m ≡ 1. A BOS id is
prepended at most once: not when the text's first token already is the BOS (a chat template
that writes it).

m_t = 0 for every token whose characters overlap an options block (the `Options:` header
through the end of the last option line: header, option lines and the newlines between them;
the shots' blocks too), 1 elsewhere (zero-width tokens such as a prepended BOS get 1).

An example longer than `max_len` tokens is truncated from the left (as the paper does):
`GtcaPrompt.truncated` counts the dropped tokens (0 when none). `PromptFormat.max_len` bounds the
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
JUDGMENT = "judgment"  # CoLA's prompted 0/1 judgment
ANSWER_TEXT = "Answer:"
QUESTION_LABEL = "Question: "
# The reference's system prompts and HellaSwag lead (Pineandgrass/GatedTreeCrossAttention,
# utils/gtca_format.py), written as it writes them.
MCQA_SYSTEM = ("Choose the correct option based on the question. Output only the corresponding "
               "letter of the option without providing a reason.")
COLA_SYSTEM = ("You are a linguist. Decide if the following English sentence is grammatically "
               "acceptable. Output 1 for acceptable, 0 for unacceptable. Output only a single "
               "character: 0 or 1.")
HELLASWAG_LEAD = "Context: Read the context and choose the most plausible continuation.\n"


class PromptError(ValueError):
  """A record that cannot become a prompt (names the example and what is wrong)."""


class TextTokenizer:
  """Ids and character offsets of a text, from a `tokenizers.Tokenizer`, with the backbone's BOS
  id and chat template (a callable: (user message, system prompt or None) → the rendered
  conversation with the generation prompt) when it has them.
  `identity` is the sha256 of the tokenizer's canonical JSON: the parse cache's stale check."""

  def __init__(self, tokenizer: Any, *, bos_id: int | None = None,
               chat_template: Callable[[str, str | None], str] | None = None, name: str = ""):
    self.tokenizer = tokenizer
    self.bos_id = bos_id
    self.chat_template = chat_template
    self.name = name

  @classmethod
  def load(cls, path: str | pathlib.Path) -> "TextTokenizer":
    """A Hugging Face checkpoint folder (tokenizer.json, its special tokens and chat template), a
    `.gguf` file (the same, from its metadata) or a bare tokenizer.json file (no BOS, no
    template)."""
    path = pathlib.Path(path)
    if path.is_dir() or path.suffix.lower() == ".gguf":  # a GGUF file's tokenizer: rebuilt
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
    rendering [system prompt,] user message and the generation prompt (the assistant header)."""
    template = None
    if tok.template is not None:
      def template(content: str, system: str | None = None) -> str:
        turns = [{"role": "system", "content": system}] if system else []
        return tok.chat(turns + [{"role": "user", "content": content}],
                        add_generation_prompt=True)
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
class GtcaPrompt:
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
             example_id: str | None = None) -> GtcaPrompt:
    """The prompt of a JSON record: MCQA (`question`, `options`, optional `context`, `lead`,
    `shots`), a sentence to score (`sentence`) or CoLA's judgment (`sentence`, `judge`: true);
    `example_id` defaults to the record's `id`. A sentence to score is never chat-wrapped."""
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
      sentence = str(record["sentence"])
      if record.get("judge"):
        return judgment_prompt(sentence, tokenizer, example_id=example_id,
                               max_len=self.prompt_limit(MCQA, example_id),
                               chat_template=template, bos_id=bos_id)
      return sentence_prompt(sentence, tokenizer, example_id=example_id,
                             max_len=self.prompt_limit(SENTENCE, example_id), bos_id=bos_id)
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
                       bos_id=bos_id, lead=str(record.get("lead") or QUESTION_LABEL),
                       shots=record.get("shots") or ())


def _render(content: str, chat_template: Callable[..., str] | None, system: str | None,
            example_id: str) -> tuple[str, int]:
  """(text, shift): `content` as the user turn of the chat template (after `system`), or
  plain; `shift` = where the content starts in the text."""
  if chat_template is None:
    return content, 0
  text = chat_template(content, system)
  shift = text.find(content)
  if shift < 0:
    raise PromptError(f"example {example_id}: the chat template does not contain the user "
                      "message verbatim, so the field ranges cannot be placed")
  return text, shift


def _answered(text: str, chat: bool) -> tuple[str, int]:
  """(text + `Answer:`, where `Answer:` starts): after the assistant header on a line of its
  own (a newline is added when the rendered template does not end with one, as the reference
  does); the plain layout's content already ends with a newline."""
  if chat and not text.endswith("\n"):
    text += "\n"
  return text + ANSWER_TEXT, len(text)


def _finish(example_id: str, kind: str, text: str, fields: dict[str, Any],
            tokenizer: TextTokenizer, masked: Sequence[tuple[int, int]], max_len: int | None,
            bos_id: int | None) -> GtcaPrompt:
  """Tokenizes `text` (field ranges already placed in it), prepends BOS once, truncates, masks."""
  ids_T, offsets_T2 = tokenizer.encode(text)
  if bos_id is not None and not (len(ids_T) and ids_T[0] == bos_id):
    # once: a chat template that writes the BOS itself already gave it
    ids_T = np.concatenate([[bos_id], ids_T])
    offsets_T2 = np.concatenate([np.zeros((1, 2), np.int64), offsets_T2])
  dropped = 0
  if max_len is not None and len(ids_T) > max_len:
    if max_len < 1:
      raise PromptError(f"example {example_id}: max_len must be >= 1, got {max_len}")
    dropped = len(ids_T) - max_len
    ids_T, offsets_T2 = ids_T[dropped:], offsets_T2[dropped:]
  mask_T = np.ones(len(ids_T), np.float32)
  for start, end in masked:
    mask_T[overlapping(offsets_T2, start, end)] = 0.0
  return GtcaPrompt(example_id=example_id, kind=kind, text=text,
                parse_fields=tuple(fields["parse"]), options_header=fields.get("header"),
                option_lines=tuple(fields.get("options", ())), answer=fields.get("answer"),
                ids_T=ids_T, offsets_T2=offsets_T2, update_mask_T=mask_T, truncated=dropped,
                field_names=tuple(fields["names"]))


def _options_block(options: Sequence[str], example_id: str
                   ) -> tuple[str, tuple[int, int], list[tuple[int, int]]]:
  """(`Options:\nA. …\nB. …`, header range, line ranges), ranges relative to the block."""
  if not options:
    raise PromptError(f"example {example_id}: no options")
  if len(options) > len(LETTERS):
    raise PromptError(f"example {example_id}: {len(options)} options, at most {len(LETTERS)}")
  text, lines = "Options:", []
  for letter, option in zip(LETTERS, options):
    option = " ".join(str(option).split())  # one line each
    if not option:
      raise PromptError(f"example {example_id}: option {letter} is empty")
    text += "\n"
    lines.append((len(text), len(text) + len(f"{letter}. {option}")))
    text += f"{letter}. {option}"
  return text, (0, len("Options:")), lines


def mcqa_prompt(question: str, options: Sequence[str], tokenizer: TextTokenizer, *,
                context: str = "", example_id: str = "?", max_len: int | None = None,
                chat_template: Callable[..., str] | None = None, bos_id: int | None = None,
                lead: str = QUESTION_LABEL, shots: Sequence[Mapping[str, Any]] = ()) -> GtcaPrompt:
  """The MCQA prompt (module docstring layout); an empty question or no options is an error.
  `lead` replaces `Question: ` (HellaSwag's instruction); `shots` are solved examples
  ({question, options, answer index}) written before the question in the same user turn."""
  question = " ".join(question.split())
  context = context.strip()
  if not question:
    raise PromptError(f"example {example_id}: empty question")
  parts: list[str] = []
  masked: list[tuple[int, int]] = []
  at = lambda: sum(map(len, parts))

  def block(label: str, body: str, options: Sequence[str], where: str):
    """label + body + newline + options block; returns (body range, header, lines)."""
    body_at = at() + len(label)
    parts.append(label + body + "\n")
    text, header, lines = _options_block(options, where)
    base = at()
    parts.append(text)
    shift = lambda span: (span[0] + base, span[1] + base)
    masked.append((base, base + len(text)))  # header, option lines and the newlines between
    return (body_at, body_at + len(body)), shift(header), [shift(l) for l in lines]

  for n, shot in enumerate(shots):
    where = f"{example_id} (shot {n})"
    shot_q = " ".join(str(shot["question"]).split())
    block(lead, shot_q, [str(o) for o in shot["options"]], where)
    parts.append(f"\n{ANSWER_TEXT} {LETTERS[int(shot['answer'])]}\n\n")
  parse, names = [], []
  if context:
    parse.append((at() + len("Context: "), at() + len("Context: ") + len(context)))
    names.append("context")
    parts.append(f"Context: {context}\n")
  question_span, header, lines = block(lead, question, options, example_id)
  parse.append(question_span)
  names.append("question")
  content = "".join(parts)
  chat = chat_template is not None
  text, shift = _render(content if chat else content + "\n", chat_template, MCQA_SYSTEM,
                        example_id)
  text, answer_at = _answered(text, chat)
  move = lambda span: (span[0] + shift, span[1] + shift)
  fields = {"parse": [move(s) for s in parse], "names": names, "header": move(header),
            "options": [move(l) for l in lines], "answer": (answer_at, len(text))}
  return _finish(example_id, MCQA, text, fields, tokenizer, [move(m) for m in masked], max_len,
                 bos_id)


def sentence_prompt(sentence: str, tokenizer: TextTokenizer, *, example_id: str = "?",
                    max_len: int | None = None, bos_id: int | None = None) -> GtcaPrompt:
  """A sentence to be scored (BLiMP, CoLA's threshold variant): the sentence alone — never in
  a chat template, whatever the backbone has (#36) — with BOS once when `bos_id` is given;
  m ≡ 1; an empty sentence is an error."""
  sentence = sentence.strip()
  if not sentence:
    raise PromptError(f"example {example_id}: empty sentence")
  fields = {"parse": [(0, len(sentence))], "names": ["sentence"]}
  return _finish(example_id, SENTENCE, sentence, fields, tokenizer, (), max_len, bos_id)


def judgment_prompt(sentence: str, tokenizer: TextTokenizer, *, example_id: str = "?",
                    max_len: int | None = None, chat_template: Callable[..., str] | None = None,
                    bos_id: int | None = None) -> GtcaPrompt:
  """CoLA's prompted acceptability judgment (the reference's): with a chat template, the CoLA
  system prompt, the sentence as the user turn and `Answer:` after the assistant header; plain:
  the instruction line, `Sentence: …` and `Answer:`. m ≡ 1; the model's next token after
  `Answer:` is read as " 1" (acceptable) vs " 0"."""
  sentence = " ".join(sentence.split())
  if not sentence:
    raise PromptError(f"example {example_id}: empty sentence")
  chat = chat_template is not None
  content = sentence if chat else f"{COLA_SYSTEM}\nSentence: {sentence}\n"
  text, shift = _render(content, chat_template, COLA_SYSTEM, example_id)
  at = shift + (0 if chat else len(COLA_SYSTEM) + len("\nSentence: "))
  text, answer_at = _answered(text, chat)
  fields = {"parse": [(at, at + len(sentence))], "names": ["sentence"],
            "answer": (answer_at, len(text))}
  return _finish(example_id, JUDGMENT, text, fields, tokenizer, (), max_len, bos_id)
