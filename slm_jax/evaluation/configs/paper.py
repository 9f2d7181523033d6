"""The paper code's protocol (`evaluate --protocol=paper`): terminal-only tree scoring
(`tree_eval_type=terminal`), CNT2 never scored in the beam, the code's 32 SG suites; `auto` BLiMP /
doc-PPL proposals, the paper's multiple-choice format, float32, bootstrap seed 2027. Flags given on
the command line win."""


def get_config():
  return {"protocol": "paper",
          "syntactic": {"tree_scoring": "terminal", "beam_score_cnt2": False,
                        "sg_suites": "paper32", "blimp_proposals": "auto",
                        "docppl_proposals": None},
          "downstream": {"mc_format": "paper"},
          "run": {"dtype": "float32", "bootstrap_seed": 2027}}
