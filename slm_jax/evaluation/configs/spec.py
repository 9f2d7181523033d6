"""SPEC's protocol (`evaluate --protocol=spec`, = the flags' defaults; SPEC §9/§11): joint tree
scoring, CNT2 scored in the beam where it is a target, Hu et al.'s 31 SG suites; `auto` BLiMP /
doc-PPL proposals, the paper's multiple-choice format, float32, bootstrap seed 2027. Flags given on
the command line win."""


def get_config():
  return {"protocol": "spec",
          "syntactic": {"tree_scoring": "joint", "beam_score_cnt2": True, "sg_suites": "hu31",
                        "blimp_proposals": "auto", "docppl_proposals": None},
          "downstream": {"mc_format": "paper"},
          "run": {"dtype": "float32", "bootstrap_seed": 2027}}
