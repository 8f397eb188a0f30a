"""Shadow-model training and what reads its models (see README).

pipeline (the run folder's stages), model_setup (the model the copies start as), checkpoints (a group's stacked
parameters), group_files (which groups are done; the run-wide files stacked from theirs), trainer (many models at
once), data, canaries, images, preemption, partial (the first K models as a run of their own), shadow_model (one trained model back as a module), per_token (per-token arrays
of trained models, in batches). Pretraining-data feature extraction: the training.pretraining subpackage.
"""
