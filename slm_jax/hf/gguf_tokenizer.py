"""A GGUF file's tokenizer, rebuilt with the `tokenizers` library from the file's metadata.

A GGUF has no tokenizer.json: `tokenizer.ggml.model` names the algorithm, `tokens` / `merges` /
`scores` / `token_type` hold the vocabulary, `tokenizer.ggml.pre` names llama.cpp's pre-tokenizer,
`bos/eos/unknown/padding_token_id`, `add_bos_token` / `add_eos_token` and `add_space_prefix` the
special tokens and what is added, and `tokenizer.chat_template` the chat template. `gguf_parts(g)`
builds the parts of a `slm_jax.hf.tokenizer.CheckpointTokenizer`: what transformers' GGUF
loader builds (`from_pretrained(..., gguf_file=...)`), token for token:

- `gpt2` (byte-level BPE: SmolLM, Qwen2, Llama-3): a BPE over the vocabulary, tokens not spelled in
  the byte alphabet re-spelled byte by byte, with the file's merges; pre-tokenizer per
  `tokenizer.ggml.pre` (`PRE_TOKENIZERS`: llama.cpp's regexes; an unknown name is refused, never
  guessed); byte-level decoder.
- `llama` (SentencePiece BPE: Llama-2, Mistral, TinyLlama): BPE with byte fallback over `▁`-spelled
  pieces, merges from the file or, when it has none, recovered from the scores as transformers
  does; a `▁` prepended to the text unless `add_space_prefix` is false.

Tokens typed CONTROL (3) are added as special tokens (matched whole in text; in a byte-level
vocabulary only those spelled in the byte alphabet), USER_DEFINED (4) as plain added tokens.
BOS is added when `add_bos_token` says so (absent: yes for `llama`, no for `gpt2`, as llama.cpp
and transformers do).
"""

from __future__ import annotations

from typing import Any

from slm_jax.hf.config import HfConfigError

CONTROL, USER_DEFINED = 3, 4
GPT2_SPLIT = None  # ByteLevel's own (GPT-2) regex
SMOLLM_SPLIT = "digits"  # each digit alone, then GPT-2's regex
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre → how text is split before byte-level BPE (llama.cpp's llm_tokenizer_bpe).
PRE_TOKENIZERS = {"default": GPT2_SPLIT, "gpt2": GPT2_SPLIT, "gpt-2": GPT2_SPLIT,
                  "smollm": SMOLLM_SPLIT, "starcoder": SMOLLM_SPLIT,
                  "llama3": LLAMA3_SPLIT, "llama-v3": LLAMA3_SPLIT, "llama-bpe": LLAMA3_SPLIT,
                  "qwen2": QWEN2_SPLIT, "deepseek-r1-qwen": QWEN2_SPLIT}
SPECIAL_KEYS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                "unk_token": "unknown_token_id", "pad_token": "padding_token_id"}


def _byte_level(meta: dict[str, Any], where: str):
  # pylint: disable-next=import-outside-toplevel
  from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
  byte_char = _bytes_to_unicode()
  alphabet = set(byte_char.values())
  vocab = {token if set(token) <= alphabet else
           "".join(byte_char[b] for b in token.encode("utf-8")): i
           for i, token in enumerate(meta["tokenizer.ggml.tokens"])}
  tokenizer = Tokenizer(models.BPE(vocab, _merges(meta, where, vocab), dropout=None,
                                   continuing_subword_prefix="", end_of_word_suffix="",
                                   fuse_unk=False))
  pre = meta.get("tokenizer.ggml.pre", "default")
  if pre not in PRE_TOKENIZERS:
    raise HfConfigError(f"{where}: tokenizer.ggml.pre={pre!r} is not supported (the importer "
                        f"knows llama.cpp's {', '.join(sorted(PRE_TOKENIZERS))})")
  split = PRE_TOKENIZERS[pre]
  if split is GPT2_SPLIT:
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  elif split == SMOLLM_SPLIT:
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
  else:
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
  tokenizer.decoder = decoders.ByteLevel()
  return tokenizer, alphabet


def _sentencepiece(meta: dict[str, Any], where: str):
  # pylint: disable-next=import-outside-toplevel
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers
  vocab = {token: i for i, token in enumerate(meta["tokenizer.ggml.tokens"])}
  tokenizer = Tokenizer(models.BPE(vocab, _merges(meta, where, vocab), fuse_unk=True,
                                   byte_fallback=True, dropout=None))
  prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
  tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
      replacement="▁", prepend_scheme="first" if prefix else "never", split=False)
  steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
  tokenizer.decoder = decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if prefix else []))
  return tokenizer, None


BUILDERS = {"gpt2": _byte_level, "llama": _sentencepiece}


def _merges(meta: dict[str, Any], where: str, vocab: dict[str, int]) -> list[tuple[str, str]]:
  """The file's merges, or (SentencePiece files without them) the merges its scores imply:
  every split of a token into two tokens, best score first (transformers' generate_merges)."""
  if "tokenizer.ggml.merges" in meta:
    return [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
  scores = meta.get("tokenizer.ggml.scores")
  if scores is None:
    raise HfConfigError(f"{where}: neither tokenizer.ggml.merges nor tokenizer.ggml.scores")
  found = []
  for token, score in zip(meta["tokenizer.ggml.tokens"], scores):
    pairs = [(token[:k], token[k:]) for k in range(1, len(token))
             if token[:k] in vocab and token[k:] in vocab]
    found += [(left, right, score) for left, right in
              sorted(pairs, key=lambda p: (vocab[p[0]], vocab[p[1]]))]
  found.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
  return [(left, right) for left, right, _ in found]


def _bytes_to_unicode() -> dict[int, str]:
  """GPT-2's byte → printable character table (the byte-level BPE alphabet)."""
  printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
               + list(range(ord("®"), ord("ÿ") + 1)))
  extra = [b for b in range(256) if b not in printable]
  return {**{b: chr(b) for b in printable},
          **{b: chr(256 + n) for n, b in enumerate(extra)}}


def gguf_parts(g) -> dict[str, Any]:
  """The CheckpointTokenizer parts of GgufFile `g` (see the module docstring)."""
  from tokenizers import AddedToken, processors  # pylint: disable=import-outside-toplevel
  meta, where = g.metadata, str(g.path)
  kind = meta.get("tokenizer.ggml.model")
  if "tokenizer.ggml.tokens" not in meta or kind not in BUILDERS:
    raise HfConfigError(f"{where}: tokenizer.ggml.model={kind!r} is not supported (the importer "
                        f"builds {', '.join(BUILDERS)}; a file without a vocabulary has no "
                        "tokenizer)")
  tokenizer, alphabet = BUILDERS[kind](meta, where)
  tokens = meta["tokenizer.ggml.tokens"]
  kinds = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
  ids = {name: meta.get(f"tokenizer.ggml.{key}") for name, key in SPECIAL_KEYS.items()}
  special = {name: tokens[i] if i is not None else None for name, i in ids.items()}
  named = {i for i in ids.values() if i is not None}
  tokenizer.add_special_tokens([
      AddedToken(token, special=True, normalized=False)
      for i, (token, kind_) in enumerate(zip(tokens, kinds))
      if (kind_ == CONTROL or i in named) and (alphabet is None or set(token) <= alphabet)])
  tokenizer.add_tokens([AddedToken(token, special=False, normalized=False)
                        for token, kind_ in zip(tokens, kinds) if kind_ == USER_DEFINED])
  add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", kind == "llama"))
  add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))
  added = [name for name, on in (("bos_token", add_bos), ("eos_token", add_eos)) if on]
  if any(ids[name] is None for name in added):
    raise HfConfigError(f"{where}: tokenizer.ggml.add_bos_token / add_eos_token is set but the "
                        "file names no such token id")
  single = " ".join([f"{special['bos_token']}:0"] * add_bos + ["$A:0"]
                    + [f"{special['eos_token']}:0"] * add_eos)
  tokenizer.post_processor = processors.TemplateProcessing(
      single=single, pair=f"{single} $B:1",
      special_tokens=sorted({(special[name], ids[name]) for name in added}))
  return dict(tokenizer=tokenizer, special=special,
              template=meta.get("tokenizer.chat_template"), bos_id=ids["bos_token"],
              eos_id=ids["eos_token"], add_bos=add_bos)
