"""Pretraining-data membership inference, the model side: everything that needs a model or a benchmark's texts
before the attacks (attacks/, which need neither) score stored arrays.

- feature_extraction: builds a features folder (attacks/feature_folder.py reads and writes its files) with every
  per-token array the attacks read: lp / mu / sigma, ReCaLL's conditional lp, EM-MIA's pairs, reference and
  neighbour lp.
- prefix_lp: log-probabilities of texts under prefixes, each prefix run once (GPT-NeoX key-value cache, LSTM carry).
- mia_data: the membership benchmarks' texts and labels (WikiMIA, MIMIR, users' labelled files).
- neighbours: neighbour texts for the Neighbourhood attack (MIMIR's, a fill-mask model's, or offline unigram swaps).
- offline_benchmark: the offline benchmark's data splits, its target GPT-NeoX pretrained with epoch checkpoints, and
  its reference model (experiments/pretrain_benchmark.py).

Apart from shadow-model training (training/pipeline.py and its trainer), which these modules only borrow from: a
shadow run's model is scored through training/shadow_model.py, and per-token arrays come from training/per_token.py.
"""
