"""A checkpoint's tokenizer: `tokenizer.json` (through `tokenizers`), its special tokens and chat
template (rendered with jinja2 exactly as transformers renders it), and the reverse direction:
the `tokenizer.json` of an slm_jax `Tokenizer` with its reserved structural tokens, for export.

`CheckpointTokenizer(path)` (a checkpoint folder, or a `.gguf` file: its tokenizer rebuilt from
the file's vocabulary by `slm_jax.hf.gguf_tokenizer`): `encode(text, bos=False)` → ids (no
special tokens added unless `bos`), `pieces(ids)`, `decode(ids)`, `bos_id` / `eos_id` (from
`tokenizer_config.json`, else `config.json`), `add_bos` (whether the checkpoint's tokenizer adds
its BOS: `add_bos_token`, else what its post-processor adds), `chat(messages,
add_generation_prompt=...)` → the rendered prompt. The template comes from
`tokenizer_config.json` (`chat_template`: a string, or a list of named templates, of which
"default") or `chat_template.jinja` (GGUF: `tokenizer.chat_template`); it runs in jinja2's immutable sandbox with
`trim_blocks`, `lstrip_blocks`, the loop controls extension, transformers' `tojson` filter and
its `raise_exception` / `strftime_now` globals, given the special tokens by name.

`tokenizer_json(tokenizer)`: an HF `tokenizer.json` equal to our `Tokenizer` on its base and
holding every reserved id (PAD, BOS, EOS, PAUSE, MERGED_CLOSE, ONT, CNT) as an added special
token at its id (renamed `<|slm:…|>` where the base already has the string): word-level bases become a `WordLevel` model, the GPT-2 base its byte-level BPE
from the pinned package files, an HF base its own tokenizer.json with the tokens appended.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any, Sequence

from slm_jax.hf.gguf import is_gguf
from slm_jax.tokenizer import Tokenizer
from slm_jax.tokenizer_bases import UNK_SYMBOL, gpt2_files

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def _content(token: Any) -> str | None:
  """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
  return token.get("content") if isinstance(token, dict) else token


def render_template(template: str, **context: Any) -> str:
  """`template` rendered as transformers' `apply_chat_template(tokenize=False)` renders it."""
  import jinja2  # pylint: disable=import-outside-toplevel  # a base dependency (pyproject)
  import jinja2.sandbox  # pylint: disable=import-outside-toplevel
  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)

  env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                     extensions=["jinja2.ext.loopcontrols"])
  env.filters["tojson"] = tojson
  env.globals["raise_exception"] = raise_exception
  env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
  return env.from_string(template).render(**context)


class CheckpointTokenizer:
  """The tokenizer of a Hugging Face checkpoint folder or GGUF file (see the module docstring)."""

  def __init__(self, folder: str | pathlib.Path):
    self.folder = pathlib.Path(folder)  # the checkpoint: a folder, or a .gguf file
    if is_gguf(self.folder):
      from slm_jax.hf.gguf import open_gguf  # pylint: disable=import-outside-toplevel
      from slm_jax.hf.gguf_tokenizer import gguf_parts  # pylint: disable=import-outside-toplevel
      parts = gguf_parts(open_gguf(self.folder))
    else:
      parts = self._folder_parts()
    self.tokenizer: Any = parts["tokenizer"]  # a tokenizers.Tokenizer
    self.special: dict[str, str | None] = parts["special"]  # bos/eos/unk/pad_token → string
    self.template: str | None = parts["template"]
    self.bos_id: int | None = parts["bos_id"]
    self.eos_id: int | None = parts["eos_id"]
    self.add_bos: bool = parts["add_bos"]  # whether the checkpoint's tokenizer adds a BOS

  def _folder_parts(self) -> dict[str, Any]:
    import tokenizers  # pylint: disable=import-outside-toplevel
    path = self.folder / TOKENIZER_FILE
    if not path.is_file():
      raise FileNotFoundError(f"{path} not found: the checkpoint has no tokenizer.json")
    try:
      tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception on malformed files
      raise ValueError(f"cannot read {path}: {error}") from error
    config_path = self.folder / TOKENIZER_CONFIG
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    special = {name: _content(config.get(name)) for name in SPECIAL_NAMES}
    model_config = self.folder / "config.json"
    ids = json.loads(model_config.read_text()) if model_config.is_file() else {}

    def token_id(name: str, fallback: int | None) -> int | None:
      found = tokenizer.token_to_id(special[name]) if special[name] else None
      return found if found is not None else fallback

    eos = ids.get("eos_token_id")
    bos_id = token_id("bos_token", ids.get("bos_token_id"))
    eos_id = token_id("eos_token", eos[0] if isinstance(eos, list) else eos)
    added = tokenizer.encode("", add_special_tokens=True).ids  # what its post-processor adds
    add_bos = config.get("add_bos_token", bos_id is not None and added[:1] == [bos_id])
    return dict(tokenizer=tokenizer, special=special, template=self._template(config),
                bos_id=bos_id, eos_id=eos_id, add_bos=bool(add_bos))

  def _template(self, config: dict[str, Any]) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, list):
      named = {t.get("name"): t.get("template") for t in template}
      template = named.get("default")
    if template is None and (self.folder / TEMPLATE_FILE).is_file():
      template = (self.folder / TEMPLATE_FILE).read_text(encoding="utf-8")
    return template

  @property
  def size(self) -> int:
    return self.tokenizer.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str, bos: bool = False) -> list[int]:
    """Token ids of `text` with no special tokens added (`bos`: the BOS token first)."""
    ids = self.tokenizer.encode(text, add_special_tokens=False).ids
    if bos:
      if self.bos_id is None:
        raise ValueError(f"{self.folder}: the checkpoint defines no BOS token (bos_token in "
                         f"{TOKENIZER_CONFIG} or bos_token_id in config.json)")
      ids = [self.bos_id, *ids]
    return ids

  def pieces(self, ids: Sequence[int]) -> list[str]:
    """The vocabulary entry of each id (byte-level pieces as stored, e.g. 'Ġcat')."""
    return [self.tokenizer.id_to_token(int(i)) for i in ids]

  def decode(self, ids: Sequence[int]) -> str:
    return self.tokenizer.decode(list(ids), skip_special_tokens=False)

  def chat(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = False,
           **kwargs: Any) -> str:
    """The chat template rendered over `messages` (transformers' `tokenize=False` output)."""
    if self.template is None:
      raise ValueError(f"{self.folder}: no chat template ({TOKENIZER_CONFIG} chat_template or "
                       f"{TEMPLATE_FILE})")
    special = {k: v for k, v in self.special.items() if v is not None}
    return render_template(self.template, messages=messages,
                           add_generation_prompt=add_generation_prompt,
                           **{**special, **kwargs})


RENAMED = "<|slm:{}|>"  # a reserved symbol the base vocabulary already has is written so


def tokenizer_json(tokenizer: Tokenizer) -> tuple[str, dict[int, str]]:
  """An HF tokenizer.json for `tokenizer` (see the module docstring) and the name of each
  reserved id in it: its slm_jax symbol (`(NP`, `<s>`, …), or `<|slm:SYMBOL|>` where the base
  vocabulary already holds that string (e.g. a pretrained `<s>`)."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  from tokenizers import decoders, models, pre_tokenizers  # pylint: disable=import-outside-toplevel
  kind = tokenizer.base.kind
  if kind == "word":
    vocab = {word: i for i, word in enumerate(tokenizer.base.words)}
    hf = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token=UNK_SYMBOL))
    hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  elif kind == "gpt2":
    encoder, merges = gpt2_files()
    hf = tokenizers.Tokenizer(models.BPE.from_file(str(encoder), str(merges)))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
  elif kind == "hf":
    hf = tokenizers.Tokenizer.from_str(tokenizer.base.json_bytes.decode("utf-8"))
  else:
    raise ValueError(f"a {kind!r} tokenizer base has no tokenizer.json export (word, gpt2 and hf "
                     "bases do); train on data.tokenizer=hf with the checkpoint's tokenizer.json")
  if hf.get_vocab_size(with_added_tokens=True) != tokenizer.base_size:
    raise ValueError(f"the {kind} base has {hf.get_vocab_size(with_added_tokens=True)} HF ids "
                     f"but slm_jax counts {tokenizer.base_size}: the reserved ids would shift")
  known = hf.get_vocab(with_added_tokens=True)
  ids = range(tokenizer.base_size, tokenizer.vocab_size)
  names = {i: RENAMED.format(symbol) if symbol in known else symbol
           for i, symbol in zip(ids, tokenizer.decode(list(ids)))}
  hf.add_special_tokens([tokenizers.AddedToken(name, special=True, normalized=False)
                         for name in names.values()])
  for token_id, name in names.items():
    if hf.token_to_id(name) != token_id:
      raise ValueError(f"reserved token {name!r} got HF id {hf.token_to_id(name)}, "
                       f"expected {token_id}")
  return hf.to_str(), names


def special_tokens_map(tokenizer: Tokenizer, names: dict[int, str]) -> dict[str, str]:
  """tokenizer_config.json special tokens of an exported SLM (our BOS / EOS / PAD)."""
  return {"bos_token": names[tokenizer.bos_id], "eos_token": names[tokenizer.eos_id],
          "pad_token": names[tokenizer.pad_id]}
