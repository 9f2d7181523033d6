"""Multiple-choice items of a pretrained checkpoint as raw text (`downstream.raw_text_prompts`,
SPEC §13): the continuation's log-prob equals lm-evaluation-harness's computation in plain
transformers (context + " " + option tokenized in one piece, the tokens after the context's own
encoding, no BOS before a non-empty context), through the one protocol dispatch and `downstream.scoring`; and
`evaluate --checkpoint --tasks=mc` scores the tasks (refused before this change)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from slm_jax import evaluate  # noqa: E402
from slm_jax.downstream.example import TaskExample  # noqa: E402
from slm_jax.downstream.prompts import build_prompts  # noqa: E402
from slm_jax.downstream.protocol import protocol  # noqa: E402
from slm_jax.downstream.scoring import evaluate_task  # noqa: E402
from slm_jax.downstream.raw_text_prompts import RawTextEncoder  # noqa: E402
from slm_jax.evaluation.checkpoints import load_checkpoint_run  # noqa: E402
from slm_jax.kinds import Kind  # noqa: E402
from tests.downstream_fixtures import write_fixtures  # noqa: E402
from tests.test_raw_text import checkpoint  # noqa: E402,F401  # the tiny Llama fixture

EXAMPLES = [
    TaskExample("piqa", "Keep the cats from the door", ("Close the door.", "Don't go, she said."),
                0, "piqa:0"),
    TaskExample("arc_easy", "Where do mice go?", ("where cats aren't", "The door", "a hungry cat"),
                2, "arc:1"),
]


def lm_eval_log_prob(model, fast, context: str, continuation: str) -> float:
  """lm-evaluation-harness's `loglikelihood` of (context, continuation) with an HF model: the
  context's trailing spaces move to the continuation, whole = encode(context + continuation),
  the continuation = whole's tokens after encode(context), no special tokens."""
  spaces = len(context) - len(context.rstrip())
  if spaces:
    context, continuation = context[:-spaces], context[-spaces:] + continuation
  whole = fast(context + continuation, add_special_tokens=False).input_ids
  n_context = len(fast(context, add_special_tokens=False).input_ids)
  with torch.no_grad():
    logp = torch.log_softmax(model(torch.tensor([whole])).logits[0].double(), -1)
  return float(sum(logp[t - 1, whole[t]] for t in range(n_context, len(whole))))


def test_option_scores_equal_lm_eval(checkpoint, tmp_path):
  model, fast, folder = checkpoint
  run = load_checkpoint_run(folder)
  scorer = protocol(run.configuration).scorer(run, 4)  # the one dispatch point
  summary = {}
  for example in EXAMPLES:
    summary[example.task] = evaluate_task(scorer, example.task, [example], None, tmp_path,
                                          None, progress=False)
    (record,) = [json.loads(line) for line in (tmp_path / f"{example.task}.jsonl").open()]
    want = [lm_eval_log_prob(model, fast, "".join(p.context), p.continuation)
            for p in build_prompts(example)]
    got = [o["term"] for o in record["options"]]
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert [o["full"] for o in record["options"]] == got  # no structure: S_full = S_term
    assert record["prediction"] == int(np.argmax(
        [w / len(o) for w, o in zip(want, example.options)]))  # normalized per character
  assert json.loads((tmp_path / "piqa.meta.json").read_text())["scheme"] == "raw text"


def test_encoder_spans_and_prefix(checkpoint):
  _, fast, folder = checkpoint
  run = load_checkpoint_run(folder)
  encoder = RawTextEncoder(run.tokenizer, fast.bos_token_id)
  assert not encoder.add_bos  # this tokenizer adds no BOS: a non-empty context is read as is
  encoded = encoder.encode(["Question: Where do mice go?\nAnswer:", " where cats aren't"])
  ids = encoded.sequence.tokens.tolist()
  assert ids == fast("Question: Where do mice go?\nAnswer: where cats aren't",
                     add_special_tokens=False).input_ids
  n_context = len(fast("Question: Where do mice go?\nAnswer:", add_special_tokens=False).input_ids)
  assert encoded.component_T.tolist() == [0] * n_context + [1] * (len(ids) - n_context)
  assert (encoded.sequence.kinds == Kind.TERMINAL).all()
  alone = encoder.encode([" where cats"])  # nothing before it: lm-eval's prefix token
  assert alone.sequence.tokens[0] == fast.bos_token_id and alone.component_T[0] == -1
  with pytest.raises(ValueError, match="must hold text"):
    encoder.encode(["Question:", "  "])


@pytest.mark.parametrize("mc_format", ["olmes", "paper"])
def test_evaluate_scores_mc_for_a_checkpoint(checkpoint, tmp_path, mc_format):
  _, _, folder = checkpoint
  data = tmp_path / "data"
  write_fixtures(data, rows_per_split=2 if mc_format == "olmes" else 10)  # paper: fixed shots
  tasks = ("piqa", "arc_easy") if mc_format == "olmes" else ("piqa",)  # arc: curated shot ids
  out = tmp_path / "out"
  assert evaluate.main([f"--checkpoint={folder}", "--tasks=mc", f"--mc_tasks={','.join(tasks)}",
                        f"--downstream_dir={data}", f"--out={out}", "--max_items=2",
                        f"--mc_format={mc_format}", "--bootstrap_resamples=10"]) == 0
  (entry,) = json.loads((out / "results.json").read_text())["models"]
  assert entry["downstream"]["protocol"] == "raw text"
  assert set(entry["downstream"]["mc"]) == set(tasks)
  assert all(entry["downstream"]["mc"][t]["n"] == 2 for t in tasks)
  records = (out / "downstream" / f"checkpoint0_{folder.name}" / "mc" / "piqa.jsonl").open()
  assert all(np.isfinite(o["term"]) for r in map(json.loads, records) for o in r["options"])
  summary = json.loads((out / "downstream" / f"checkpoint0_{folder.name}" / "mc"
                        / "piqa.summary.json").read_text())
  assert summary["raw_text"]["straddling_tokens"] >= 0 and "joint_units" not in summary
