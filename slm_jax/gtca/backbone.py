"""A slm_jax word-level backbone made ready for GTCA (SPEC §10): LoRA adapters, the prompt's
words, and the prompt tokenizer — the one the parse cache, training, evaluation and the probe
share, so a cache built for a workdir (`python -m slm_jax.gtca.cache --workdir=RUN`) has the
identity the trainer checks.

A training workdir's word vocabulary lacks the prompt's words (`Question:`, `Options:`,
`Answer:`, `A.`, the letters, the slot `___`), so `prepare_backbone` appends one embedding row per
missing word after the reserved ids (ids V, V+1, …: no existing id moves), frozen like every
other backbone array (see `slm_jax.gtca.train` for why its norm is the largest loaded row's).
`word_prompt_tokenizer` builds the same tokenizer from the vocabulary alone (no model), which is
all the cache builder needs.

A Hugging Face checkpoint folder (Llama / Qwen2 / OLMo2, SPEC §13) is a backbone too
(`hf_backbone`): `slm_jax.hf.load_model` imports it with LoRA adapters added (their own init),
its `tokenizer.json` (BOS, chat template) is the prompt tokenizer, nothing is appended (a
sub-word vocabulary spells every prompt word) and the option letters must be one token each
(" A", " B", …). A `.gguf` file is such a checkpoint as well (`slm_jax.hf.load` reads its
tensors and metadata, `slm_jax.hf.tokenizer` rebuilds its tokenizer and chat template).
`load_backbone(source)` takes either kind; `is_hf_checkpoint` tells them apart (a `.gguf` file,
or a folder with `config.json` and no slm_jax tokenizer spec).

**Context** (`Backbone.context`, `backbone_context`): the most tokens a row may have; prompts are
cut from the left to fit it, answer letter included (`prompts.PromptFormat`). A Hugging Face
checkpoint: its `max_position_embeddings`. A slm_jax workdir: its `data.seq_len`. The slm_jax
decoder has no position table (RoPE at the row's positions, no positional embedding or other
per-position parameter; `model.rope_original_max_position` only shapes Llama-3 frequency
scaling), so nothing in the model itself caps a row; the training row length is the longest
context the model has ever seen, the limit its positions are trained for. Unknown (None, no
truncation): a bare tokenizer.json, a workdir folder without `config.json`.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from slm_jax.gtca.prompts import TextTokenizer
from slm_jax.gtca.toy_task import LETTERS, SLOT
from slm_jax.model.config import LORA_TARGETS
from slm_jax.model.decoder import Decoder
from slm_jax.tokenizer import SPEC_FILE_NAME, Tokenizer
from slm_jax.train import models
from slm_jax.train.loading import load_run
from slm_jax.train.sharding import path_string


def prompt_words(n_options: int = 2) -> tuple[str, ...]:
  """The words of the MCQA prompt a word-level vocabulary needs."""
  letters = LETTERS[:n_options]
  return ("Question:", "Options:", "Answer:", SLOT, *(f"{x}." for x in letters), *letters)


def added_words(tokenizer: Tokenizer, n_options: int = 2, source: str = "") -> tuple[str, ...]:
  """The prompt words (`prompt_words(n_options)`) the word vocabulary lacks, in order."""
  base = tokenizer.base
  if getattr(base, "kind", "") != "word":
    raise ValueError(f"backbone {source or '(model)'}: GTCA on a slm_jax workdir needs a "
                     f"word-level vocabulary, this one is {getattr(base, 'kind', '?')!r}")
  return tuple(w for w in dict.fromkeys(prompt_words(n_options)) if w not in base.index)


def word_prompt_tokenizer(tokenizer: Tokenizer, n_options: int = 2, source: str = ""
                          ) -> tuple[TextTokenizer, tuple[str, ...]]:
  """(the prompt tokenizer, the added words): a whitespace word-level `tokenizers` model over
  the vocabulary's words (their own ids) and the added prompt words (ids V, V+1, …); a word
  outside both reads as the vocabulary's first word (its unknown word)."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  from tokenizers import models, pre_tokenizers  # pylint: disable=import-outside-toplevel
  added = added_words(tokenizer, n_options, source)
  base, old_v = tokenizer.base, tokenizer.vocab_size
  vocab = {w: i for i, w in enumerate(base.words)}
  vocab.update({w: old_v + i for i, w in enumerate(added)})
  hf = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token=base.words[0]))
  hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  return TextTokenizer(hf, bos_id=tokenizer.bos_id, name=source or "word"), added


def workdir_prompt_tokenizer(workdir: str | pathlib.Path, n_options: int = 2) -> TextTokenizer:
  """`word_prompt_tokenizer` of a training workdir's saved tokenizer (no checkpoint read)."""
  path = pathlib.Path(workdir) / SPEC_FILE_NAME
  if not path.is_file():
    raise FileNotFoundError(f"--workdir {workdir}: no {SPEC_FILE_NAME} (not a slm_jax training "
                            "workdir)")
  return word_prompt_tokenizer(Tokenizer.load(path), n_options, str(workdir))[0]


@dataclasses.dataclass
class Backbone:
  """A decoder with LoRA adapters and a prompt tokenizer over its (extended) vocabulary."""
  decoder: Decoder
  text_tokenizer: TextTokenizer
  letter_ids: tuple[int, ...]
  pad_id: int
  added_words: tuple[str, ...]
  source: str
  context: int | None = None  # the most tokens of a row (module docstring); None: unknown


def backbone_context(source: str | pathlib.Path) -> int | None:
  """The context of a backbone source without loading it (module docstring): a Hugging Face
  folder's or GGUF file's `max_position_embeddings`, a slm_jax workdir's `data.seq_len`; None
  for anything else (a bare tokenizer.json). `train.models` decides what the path is."""
  try:
    return models.model_context(source)
  except models.ModelPathError:
    pass
  path = pathlib.Path(source)  # a tokenizer folder with a model's config.json but no weights
  if (path.is_dir() and (path / models.CONFIG_FILE).is_file()
      and not (path / SPEC_FILE_NAME).is_file()):
    from slm_jax.hf.load import checkpoint_config  # pylint: disable=import-outside-toplevel
    value = checkpoint_config(path)[0].get("max_position_embeddings")
    return int(value) if value else None
  return None


def _flat(tree: Any) -> dict[str, Any]:
  return {path_string(p): x for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def prepare_backbone(model: Decoder, tokenizer: Tokenizer, *, seed: int = 0, lora_rank: int = 8,
                     lora_alpha: float = 16.0, lora_dropout: float = 0.05, n_options: int = 2,
                     source: str = "", context: int | None = None) -> Backbone:
  """`model` rebuilt with LoRA adapters and one frozen embedding row per prompt word
  (`prompt_words(n_options)`) its word vocabulary lacks (module docstring); every loaded array
  is copied bit for bit."""
  added = added_words(tokenizer, n_options, source)
  old_v = tokenizer.vocab_size
  cfg = model.config
  new_cfg = cfg.replace(vocab_size=old_v + len(added), lora_rank=lora_rank, lora_alpha=lora_alpha,
                        lora_dropout=lora_dropout, lora_targets=LORA_TARGETS)
  decoder = Decoder(new_cfg, rngs=nnx.Rngs(seed))
  old = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  new = nnx.to_pure_dict(nnx.state(decoder, nnx.Param))
  old_flat = _flat(old)
  rows = jax.random.normal(jax.random.key(seed + 7919), (len(added), cfg.d_model), jnp.float32)
  table = np.asarray(old_flat["embed_tokens/embedding"], np.float32)
  rows = rows / jnp.linalg.norm(rows, axis=1, keepdims=True) * float(
      np.linalg.norm(table, axis=1).max())

  def fill(path, target):
    name = path_string(path)
    if name.rsplit("/", 1)[-1] in ("lora_a", "lora_b"):
      return target
    if name not in old_flat:
      raise ValueError(f"backbone {source}: {name} has no loaded array")
    loaded = old_flat[name]
    if name == "embed_tokens/embedding":
      extra = rows.astype(loaded.dtype)
      return jnp.concatenate([loaded, extra], axis=0)
    if name == "lm_head/kernel":
      extra = rows.T.astype(loaded.dtype)
      return jnp.concatenate([loaded, extra], axis=1)
    if loaded.shape != target.shape:
      raise ValueError(f"backbone {source}: {name} has shape {loaded.shape}, expected "
                       f"{target.shape}")
    return loaded

  filled = jax.tree_util.tree_map_with_path(fill, new)
  state = nnx.state(decoder, nnx.Param)
  nnx.replace_by_pure_dict(state, filled)
  nnx.update(decoder, state)
  check = _flat(nnx.to_pure_dict(nnx.state(decoder, nnx.Param)))
  for name, loaded in old_flat.items():
    got = np.asarray(check[name])
    want = np.asarray(loaded)
    if name == "embed_tokens/embedding":
      got = got[:old_v]
    elif name == "lm_head/kernel":
      got = got[:, :old_v]
    if got.tobytes() != want.tobytes():
      raise RuntimeError(f"backbone {source}: {name} was not copied bit for bit")
  text_tokenizer, _ = word_prompt_tokenizer(tokenizer, n_options, source)
  letters = letter_ids(text_tokenizer, n_options, source)
  return Backbone(decoder, text_tokenizer, letters, tokenizer.pad_id, added, source, context)


def letter_ids(text_tokenizer: TextTokenizer, n_options: int, source: str) -> tuple[int, ...]:
  """The id of each option letter after `Answer:` (" A", " B", …): one token each, a distinct id
  each (letters that all map to one id, e.g. `<unk>`, could never be told apart), or an error."""
  letters = []
  for letter in LETTERS[:n_options]:
    ids, _ = text_tokenizer.encode(" " + letter)
    if len(ids) != 1:
      raise ValueError(f"backbone {source}: option letter {letter!r} is {len(ids)} tokens "
                       f"({ids.tolist()}); GTCA scores one letter token per option")
    letters.append(int(ids[0]))
  if len(set(letters)) != len(letters):
    raise ValueError(f"backbone {source}: the option letters {', '.join(LETTERS[:n_options])} "
                     f"are not distinct ids ({list(letters)}); GTCA tells the options apart by "
                     "their letter token")
  return tuple(letters)


def digit_ids(text_tokenizer: TextTokenizer, source: str = "") -> tuple[tuple[int, int], str]:
  """((id of 0, id of 1), the form used): CoLA's judgment tokens after `Answer:` — " 0" / " 1"
  when each is one token, else "0" / "1" (the reference's rule: the first single-token form;
  Llama-3 and Qwen2 tokenizers split " 1" into " " + "1"). A form is one token that decodes
  back to the digit (a word vocabulary's unknown word does not); neither form is an error."""
  for form in (" {}", "{}"):
    ids = []
    for digit in "01":
      encoded, _ = text_tokenizer.encode(form.format(digit))
      if len(encoded) == 1 and text_tokenizer.tokenizer.decode(
          [int(encoded[0])]).strip() == digit:
        ids.append(int(encoded[0]))
    if len(ids) == 2:
      return (ids[0], ids[1]), repr(form.format("d"))
  raise ValueError(f"backbone {source or text_tokenizer.name}: neither \" 0\"/\" 1\" nor "
                   "\"0\"/\"1\" are single tokens; CoLA's prompted judgment reads one token "
                   "(--cola=threshold scores the sentences' likelihood instead)")


def is_hf_checkpoint(source: str | pathlib.Path) -> bool:
  """A Hugging Face checkpoint folder or a `.gguf` file, not a slm_jax training workdir
  (`train.models.model_kind`). A path of no kind is not one: the workdir loader then says
  what it lacks."""
  return models.kind_or_none(source) in (models.HF_FOLDER, models.GGUF)


def hf_backbone(folder: str | pathlib.Path, *, seed: int = 0, lora_rank: int = 8,
                lora_alpha: float = 16.0, lora_dropout: float = 0.05, n_options: int = 2
                ) -> Backbone:
  """A Hugging Face checkpoint as a GTCA backbone (module docstring), float32 compute."""
  from slm_jax.hf.load import load_model  # pylint: disable=import-outside-toplevel
  from slm_jax.hf.load import checkpoint_config  # pylint: disable=import-outside-toplevel
  source = str(folder)
  text_tokenizer = TextTokenizer.load(folder)
  letters = letter_ids(text_tokenizer, n_options, source)
  decoder = load_model(folder, seed=seed, compute_dtype="float32", lora_rank=lora_rank,
                       lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                       lora_targets=LORA_TARGETS)
  hf = checkpoint_config(folder)[0]
  pad = next((int(hf[k]) for k in ("pad_token_id", "eos_token_id")
              if isinstance(hf.get(k), int)), 0)  # rows are masked: any id in range pads
  return Backbone(decoder, text_tokenizer, letters, pad, (), source, backbone_context(folder))


def load_backbone(source: str | pathlib.Path, **kwargs) -> Backbone:
  """The GTCA backbone of a slm_jax training workdir (`prepare_backbone` of its newest
  checkpoint) or of a Hugging Face checkpoint folder (`hf_backbone`)."""
  if is_hf_checkpoint(source):
    return hf_backbone(source, **kwargs)
  run = load_run(source)
  return prepare_backbone(run.model, run.tokenizer, source=str(source),
                          context=backbone_context(source), **kwargs)


def frozen_model(source: str | pathlib.Path) -> Decoder:
  """The backbone as loaded, without adapters or added rows (the probe's baseline)."""
  if is_hf_checkpoint(source):
    from slm_jax.hf.load import load_model  # pylint: disable=import-outside-toplevel
    return load_model(source, compute_dtype="float32")
  return load_run(source).model

