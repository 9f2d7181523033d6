"""CPU: 20 epochs of a cosine with the POS head, three seeds ensembled (the shipped GUM model;
40–75 min per member on 2 cores)."""


def get_config():
  return {"schedule": "cosine", "max_epochs": 20, "tag_weight": 0.5, "members": 3}
