"""GTCA prompts as the reference writes them (SPEC §10): the chat MCQA prompt (system prompt, user
turn with question and options, `Answer:` after the assistant header), CoLA's judgment prompt,
shots and HellaSwag's lead; a sentence to score never chat-wrapped and BOS added once (#36);
CoLA's 0/1 token choice."""

from __future__ import annotations

import numpy as np
import pytest

from slm_jax.gtca import prompts, spans
from slm_jax.gtca.backbone import digit_ids
from slm_jax.ptb import parse_trees

pytest.importorskip("jinja2")
tokenizers = pytest.importorskip("tokenizers")
from tests.test_gtca_spans import QUESTION, tiny_tokenizer  # noqa: E402  (after the skips)

# A tiny chat template in the shape of SmolLM2's / Qwen2.5's: it writes the BOS itself.
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
SYSTEM = prompts.MCQA_SYSTEM
SENTENCE = "The cats chase the mice."


@pytest.fixture(scope="module")
def chat_tok():
  from slm_jax.hf.tokenizer import render_template
  tok = tiny_tokenizer()
  tok.add_special_tokens(["<s>", "<|end|>"])

  def template(content, system=None):
    turns = [{"role": "system", "content": system}] if system else []
    return render_template(TEMPLATE, messages=turns + [{"role": "user", "content": content}],
                           add_generation_prompt=True, bos_token="<s>")
  return prompts.TextTokenizer(tok, bos_id=tok.token_to_id("<s>"), chat_template=template,
                               name="tiny-chat")


def test_chat_mcqa_prompt_is_the_references(chat_tok):
  fmt = prompts.PromptFormat(chat=True, bos=True)
  p = fmt.prompt({"id": "q", "question": "  Which   unbelievable animals chase mice? ",
                  "options": ["cats", "dogs"]}, chat_tok)
  assert p.text == (
      "<s><|system|>\n"
      "Choose the correct option based on the question. Output only the corresponding letter "
      "of the option without providing a reason.<|end|>\n"
      "<|user|>\n"
      "Question: Which unbelievable animals chase mice?\nOptions:\nA. cats\nB. dogs<|end|>\n"
      "<|assistant|>\nAnswer:")
  assert {name: p.field_text(span) for name, span in p.fields().items()} == {
      "question": QUESTION, "options_header": "Options:", "option_A": "A. cats",
      "option_B": "B. dogs", "answer": "Answer:"}
  # BOS once: the template wrote it, nothing is prepended ([1, 1, …] before)
  assert p.ids_T[0] == chat_tok.bos_id and (p.ids_T == chat_tok.bos_id).sum() == 1
  texts = [p.text[a:b] for a, b in p.offsets_T2]
  assert "".join(t for t, m in zip(texts, p.update_mask_T) if m == 0) == (
      "Options:\nA. cats\nB. dogs")
  tree = spans.span_tree(p, parse_trees("(SBARQ (WHNP Which unbelievable animals) "
                                        "(SQ (VP chase mice)) ?)"))
  assert [c.label for c in tree.root.children] == ["SBARQ", spans.OPTIONS, spans.ANSWER]
  assert "".join(texts[tree.root.children[-1].start:tree.root.children[-1].end]) == "Answer:"


def test_a_scored_sentence_is_never_chat_wrapped_and_has_one_bos(chat_tok):
  """#36: BLiMP / CoLA-threshold sentences were wrapped in the chat template (system turn, user
  turn, assistant header: all scored) and `--bos` doubled the template's BOS."""
  for fmt in (prompts.PromptFormat(chat=True, bos=True), prompts.PromptFormat(chat=True)):
    p = fmt.prompt({"id": "s", "sentence": SENTENCE}, chat_tok)
    assert p.text == SENTENCE and p.kind == prompts.SENTENCE
    words, _ = chat_tok.encode(SENTENCE)
    want = ([chat_tok.bos_id] if fmt.bos else []) + words.tolist()
    assert p.ids_T.tolist() == want
    assert np.all(p.update_mask_T == 1.0)


def test_cola_judgment_prompt_is_the_references(chat_tok):
  fmt = prompts.PromptFormat(chat=True, bos=True)
  p = fmt.prompt({"id": "c", "sentence": SENTENCE, "judge": True}, chat_tok)
  assert p.text == (
      "<s><|system|>\nYou are a linguist. Decide if the following English sentence is "
      "grammatically acceptable. Output 1 for acceptable, 0 for unacceptable. Output only a "
      "single character: 0 or 1.<|end|>\n<|user|>\nThe cats chase the mice.<|end|>\n"
      "<|assistant|>\nAnswer:")
  assert (p.ids_T == chat_tok.bos_id).sum() == 1 and np.all(p.update_mask_T == 1.0)
  assert p.field_text(p.parse_fields[0]) == SENTENCE and p.field_text(p.answer) == "Answer:"
  tree = spans.span_tree(p, parse_trees("(S (NP The cats) (VP chase (NP the mice)) .)"))
  assert [c.label for c in tree.root.children] == ["S", spans.ANSWER]
  plain = prompts.PromptFormat().prompt({"id": "c", "sentence": SENTENCE, "judge": True},
                                        chat_tok)
  assert plain.text == f"{prompts.COLA_SYSTEM}\nSentence: {SENTENCE}\nAnswer:"
  assert plain.field_text(plain.parse_fields[0]) == SENTENCE


def test_shots_and_lead_come_first_in_the_same_turn(chat_tok):
  record = {"id": "h", "question": QUESTION, "options": ["cats", "dogs"],
            "lead": prompts.HELLASWAG_LEAD,
            "shots": [{"question": "Who  barks?", "options": ["dogs", "cats"], "answer": 0},
                      {"question": "Who purrs?", "options": ["dogs", "cats"], "answer": 1}]}
  lead = "Context: Read the context and choose the most plausible continuation.\n"
  user = (f"{lead}Who barks?\nOptions:\nA. dogs\nB. cats\nAnswer: A\n\n"
          f"{lead}Who purrs?\nOptions:\nA. dogs\nB. cats\nAnswer: B\n\n"
          f"{lead}{QUESTION}\nOptions:\nA. cats\nB. dogs")
  plain = prompts.PromptFormat().prompt(record, chat_tok)
  assert plain.text == user + "\nAnswer:"
  chat = prompts.PromptFormat(chat=True).prompt(record, chat_tok)
  assert chat.text == (f"<s><|system|>\n{SYSTEM}<|end|>\n<|user|>\n{user}<|end|>\n"
                       "<|assistant|>\nAnswer:")
  for p in (plain, chat):
    assert [p.field_text(f) for f in p.parse_fields] == [QUESTION]  # shots are not parsed
    texts = [p.text[a:b] for a, b in p.offsets_T2]
    masked = "".join(t for t, m in zip(texts, p.update_mask_T) if m == 0)
    assert masked == ("Options:\nA. dogs\nB. cats" * 2 + "Options:\nA. cats\nB. dogs")


def test_cola_digits_are_the_first_single_token_form(chat_tok):
  (zero, one), form = digit_ids(chat_tok)
  assert chat_tok.tokenizer.decode([one]).strip() == "1" and zero != one
  assert form in ("' d'", "'d'")
  from tokenizers import models, pre_tokenizers
  words = tokenizers.Tokenizer(models.WordLevel({"<unk>": 0, "cats": 1}, unk_token="<unk>"))
  words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  with pytest.raises(ValueError, match="--cola=threshold"):
    digit_ids(prompts.TextTokenizer(words, name="words"))  # "1" reads as <unk>: refused
