"""`slm_jax.cli_flags` (`cli.ArgumentParser`): every CLI still accepts its flags as they were
spelled: underscored (the canonical spelling), dashed (`--batch-size`, an alias everywhere, also
inside argument groups and mutually exclusive groups), and the training CLIs' flags that became
aliases of config keys.

Each command line is parsed the way the CLI parses it (its own `main`), and stopped right after
argparse returns, so no job runs; the dashed twin of every underscored flag must give the same
namespace.
"""

from __future__ import annotations

import argparse
import importlib
import re

import pytest

from slm_jax import cli


class Parsed(BaseException):  # a BaseException: the CLIs' `cli.run` must not catch it
  def __init__(self, namespace: argparse.Namespace, rest: list[str]):
    super().__init__()
    self.namespace, self.rest = namespace, rest


@pytest.fixture()
def parse(monkeypatch):
  """parse(module, argv) -> (namespace, unparsed): `module.main(argv)` up to its argparse call."""
  real = cli.ArgumentParser.parse_known_args

  def stop(self, args=None, namespace=None):
    parsed, rest = real(self, args, namespace)
    raise Parsed(parsed, rest)

  monkeypatch.setattr(cli.ArgumentParser, "parse_known_args", stop)

  def run(module: str, argv: list[str]):
    with pytest.raises(Parsed) as stopped:
      importlib.import_module(module).main(list(argv))
    return vars(stopped.value.namespace), stopped.value.rest

  return run


def dashed(argv: list[str]) -> list[str]:
  """`--batch_size=8` → `--batch-size=8` (option names only; values and positionals kept)."""
  return [re.sub(r"^--([^=]+)", lambda m: "--" + m.group(1).replace("_", "-"), a)
          if a.startswith("--") and not a.startswith("--config.") else a for a in argv]


# module, command line (every flag spelled as documented), values the namespace must hold
COMMANDS = [
    ("slm_jax.finetune.__main__", ["--task=xsum", "--workdir=run", "--out=o", "--data_dir=d",
                          "--seeds=42,7", "--epochs=2", "--lr=3e-3", "--batch_size=4",
                          "--max_len=256", "--warmup_steps=0", "--limit=8", "--micro_batches=2",
                          "--tree_source=flat", "--log_every=1", "--checkpoint_every=9",
                          "--config=tiny"],
     {"seeds": (42, 7), "batch_size": "4", "micro_batches": "2", "data_dir": "d"}),
    ("slm_jax.parser.train", ["--workdir=w", "--config=tiny", "--train=a.mrg", "--dev=b.mrg",
                              "--test=c.mrg", "--split=gum", "--gum=g", "--encoder=transformer",
                              "--max_minutes=1", "--max_epochs=2", "--eval_every=5",
                              "--export=e", "--seed=3", "--members=2"],
     {"max_epochs": "2", "eval_every": "5", "max_minutes": "1", "encoder": "transformer"}),
    ("slm_jax.parser.parse", ["in.txt", "--model=m", "--pretokenized", "--samples=2", "--seed=1",
                              "--output=o.txt"], {"samples": 2, "pretokenized": True}),
    ("slm_jax.parser.evalb", ["gold.mrg", "pred.mrg", "--per_label", "--json", "--unlabeled"],
     {"per_label": True, "unlabeled": True}),
    ("slm_jax.score", ["--checkpoint=c", "--ids_file=ids.txt", "--out=o.jsonl",
                       "--dtype=bfloat16", "--topk=3", "--bos", "--batch_size=4", "--fsdp=1"],
     {"batch_size": 4, "topk": 3}),
    ("slm_jax.evaluate", ["--workdir=a", "--workdir=b", "--tasks=sg,blimp", "--out=o",
                          "--max_items=3", "--proposals=5", "--blimp_dir=b", "--data_source=local",
                          "--syntaxgym_dir=s", "--blimp_proposals=grammar", "--docppl_ptb=p",
                          "--docppl_documents=2", "--max_context=64", "--sg_suites=hu31",
                          "--beam=4", "--sub_beam=2", "--fast_track=1", "--max_len_factor=2.0",
                          "--min_len=4", "--beam_score_cnt2=false", "--tree_scoring=joint",
                          "--downstream_dir=d", "--mc_tasks=arc_easy", "--tree_source=flat",
                          "--gen_beam=2", "--gen_max_tokens=9", "--gen_max_words=8",
                          "--dtype=float32", "--batch_size=8", "--seed=1",
                          "--bootstrap_resamples=10", "--bootstrap_seed=2"],
     {"workdir": ["a", "b"], "max_items": 3, "beam_score_cnt2": False, "sub_beam": 2}),
    ("slm_jax.prepare", ["in.mrg", "--output=o", "--format=auto", "--strict",
                         "--sentences_as_documents", "--records_per_file=7", "--allow_partial",
                         "--shard=1/2"],
     {"records_per_file": 7, "sentences_as_documents": True, "shard": (1, 2)}),
    ("slm_jax.parse.__main__", ["in.jsonl", "--output=o", "--backend=slm", "--batch_size=8",
                                "--max_words=9", "--text_field=t", "--id_field=i",
                                "--input_format=auto", "--output_format=jsonl",
                                "--cache_dir=c", "--no_cache", "--force"],
     {"batch_size": 8, "no_cache": True, "text_field": "t"}),
    ("slm_jax.explain", ["t.mrg", "--configuration=tgtree", "--sentences", "--seed=2",
                         "--lenient", "--embedded=3", "--embedded_seed=4", "--format=table"],
     {"embedded_seed": 4, "embedded": 3}),
    ("slm_jax.plot", ["--workdir=a", "--workdir=b", "--out=p.png"], {"workdir": ["a", "b"]}),
    ("slm_jax.aot", ["--config=tgtree_tiny", "--topology=local", "--hbm_gib=1.5",
                     "--vocab_size=64", "--share_programs=false", "--config.train.steps=3"],
     {"hbm_gib": 1.5, "vocab_size": 64, "share_programs": False}),
    ("slm_jax.gtca.train", ["--config=toy", "--backbone=b", "--out=o", "--methods=gtca",
                            "--seeds=0,1", "--stage_steps=1,1,1", "--batch_size=4", "--lr=1e-3",
                            "--alpha=0.1", "--train_items=8", "--dev_items=4", "--test_items=4",
                            "--task_seed=1", "--option_order=fixed", "--task=toy",
                            "--data_root=d", "--cache=c", "--log_every=1", "--jit_cache=j",
                            "--shared_cross_attention", "--weak_parser=w"],
     {"train_items": "8", "option_order": "fixed", "jit_cache": "j",
      "shared_cross_attention": "true", "weak_parser": "w"}),
    ("slm_jax.gtca.evaluate", ["--runs=a", "--out=t.md", "--run=r", "--task=cola",
                               "--data_root=d", "--cache=c", "--limit=2", "--fit_limit=3",
                               "--cola=threshold"],
     {"fit_limit": 3, "data_root": "d", "cola": "threshold"}),
    ("slm_jax.gtca.cache", ["--data=d.jsonl", "--data_root=r", "--limit=2", "--ptb=p",
                            "--workdir=w", "--options=4", "--out=c.sqlite", "--max_len=64",
                            "--chat_template=off", "--bos", "--block=8", "--merge",
                            "--shard=0/2"],
     {"data_root": "r", "max_len": 64, "chat_template": "off"}),
    ("slm_jax.gtca.probe", ["--hf=h", "--train=a", "--test=b", "--out=o", "--label=l",
                            "--rank=4", "--steps=5", "--batch_size=2", "--learning_rate=0.1",
                            "--forward_batch=3", "--max_train=9", "--max_test=8",
                            "--max_words=20", "--layers=0,1", "--seed=1"],
     {"forward_batch": 3, "max_train": 9, "learning_rate": 0.1, "hf": "h"}),
    ("slm_jax.export", ["--workdir=w", "--out=o", "--step=3", "--dtype=float32", "--force"],
     {"step": 3, "force": True}),
]


@pytest.mark.parametrize("module, argv, expected", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_underscored_and_dashed_spellings_give_the_same_flags(parse, module, argv, expected):
  underscored, rest = parse(module, argv)
  assert all(a.startswith("--config.") for a in rest), rest
  for key, value in expected.items():
    assert underscored[key] == value, (key, underscored[key])
  assert dashed(argv) != argv or "_" not in "".join(argv)
  assert parse(module, dashed(argv)) == (underscored, rest)


def test_dashed_flags_inside_a_mutually_exclusive_group(parse):
  """`score --ids-file=F` was refused ("one of the arguments --text_file --ids_file is
  required"): the dashed rule did not reach argparse's groups."""
  args, _ = parse("slm_jax.score", ["--checkpoint=c", "--ids-file=ids.txt"])
  assert str(args["ids_file"]) == "ids.txt" and args["text_file"] is None
  args, _ = parse("slm_jax.gtca.probe", ["--workdir=w", "--out=o", "--max-words=5"])
  assert args["workdir"] == "w" and args["max_words"] == 5


def test_groups_keep_their_rules():
  parser = cli.ArgumentParser(prog="demo")
  group = parser.add_argument_group("inputs")
  group.add_argument("--text_file", aliases=("--texts",))
  exclusive = group.add_mutually_exclusive_group(required=True)
  exclusive.add_argument("--ids_file")
  exclusive.add_argument("--token_ids")
  assert vars(parser.parse_args(["--texts=a", "--token-ids=b"])) == {
      "debug": False, "text_file": "a", "ids_file": None, "token_ids": "b"}
  with pytest.raises(SystemExit):
    parser.parse_args(["--ids-file=a", "--token_ids=b"])  # still exclusive
  with pytest.raises(SystemExit):
    parser.parse_args(["--text-file=a"])  # still required


def test_main_takes_its_flags_and_config_overrides():
  """`python -m slm_jax.main` (absl): `--config=FILE|NAME`, `--config.KEY=VALUE`, `--workdir`,
  `--debug`; the overrides go to the config loader, the rest to absl."""
  from absl import flags
  from slm_jax import main
  try:
    rest = main.parse_flags(["main", "--config=tgtree_tiny", "--config.train.steps=5",
                             "--workdir=w", "--debug", "--config.model.d_model=64"])
    assert rest == ["main"]
    assert (main._CONFIG.value, main._WORKDIR.value, main._DEBUG.value) == ("tgtree_tiny", "w",
                                                                            True)
    assert main._OVERRIDES == ["--config.train.steps=5", "--config.model.d_model=64"]
  finally:
    flags.FLAGS.unparse_flags()
