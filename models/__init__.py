"""Flax NNX models behind one small functional interface that the shadow-model trainer uses.

models.family(name) is a model family's record (data kind, stored statistics, fine-tuning, how to build it;
models/families.py); models.get_model(name, **fields) builds its FunctionalModel (models/functional_model.py). The
per-token losses the language-model families are trained and scored with are models/token_loss.py's.
"""

from models.families import DATA_KINDS, FAMILIES, Family, family, get_model
from models.functional_model import (LM_STATS, FunctionalModel, functional, image_loss, image_statistics, lm_loss,
                                     lm_statistics, pretrained)

__all__ = ["DATA_KINDS", "FAMILIES", "Family", "family", "get_model", "LM_STATS", "FunctionalModel", "functional",
           "image_loss", "image_statistics", "lm_loss", "lm_statistics", "pretrained"]
