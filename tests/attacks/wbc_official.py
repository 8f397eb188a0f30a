# Vendored from https://github.com/Stry233/WBC, attacks/wbc.py at commit 811287807bf39f345361e9e1b9b05878116f823c
# (the file last changed in 41d45708e0655d5391b39aa72f8394b074782e57), for tests/attacks/test_wbc.py only.
# Taken verbatim: lines 82-107 (WbcAttack._compute_window_score) and lines 122-136 (the per-text loop of
# WbcAttack._process_batch, which turns the batch's per-token losses and masks into scores). Left out: the
# module's imports of torch, datasets, transformers and the repository's own modules, the rest of the class, and
# lines 115-120 (the two models' forward passes, compute_per_token_losses), whose outputs are the arguments here:
# float32 [N, T] numpy losses and bool [N, T] masks. `self.context_window_lengths` is set by the stand-in __init__;
# the one change is range(len(texts)) -> range(len(target_losses)) (one text per row).
#
# MIT License
#
# Copyright (c) 2025 Yuetian Chen
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all
# copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.

import numpy as np


class WbcAttack:
    """The official window scoring and per-text aggregation, without the models."""

    def __init__(self, context_window_lengths):
        self.context_window_lengths = list(context_window_lengths)

    def _compute_window_score(self, target_losses: np.ndarray, ref_losses: np.ndarray,
                              window_size: int) -> float:
        """
        Compare losses within sliding windows using binary scoring.

        When window_size=1, this is equivalent to token-by-token comparison.
        If min_length < window_size, uses min_length as effective window_size.
        """
        min_length = min(len(target_losses), len(ref_losses))

        if min_length == 0:
            return 0.0

        # Use min_length as window_size if text is shorter than desired window
        effective_window_size = min(window_size, min_length)

        # Trim both arrays to same length and compute sliding window sums
        target_trimmed = target_losses[:min_length]
        ref_trimmed = ref_losses[:min_length]

        kernel = np.ones(effective_window_size)
        target_sums = np.convolve(target_trimmed, kernel, mode='valid')
        ref_sums = np.convolve(ref_trimmed, kernel, mode='valid')

        # Binary scoring: fraction of windows where reference loss > target loss
        return np.mean(ref_sums > target_sums)

    def _process_losses(self, target_losses, target_mask, ref_losses, ref_mask):
        """Lines 122-136 of the official _process_batch, on its compute_per_token_losses outputs."""
        batch_scores = []

        for i in range(len(target_losses)):
            target_valid = target_losses[i][target_mask[i]]
            ref_valid = ref_losses[i][ref_mask[i]]

            # Compute score for each window size
            window_scores = [
                self._compute_window_score(target_valid, ref_valid, window_size)
                for window_size in self.context_window_lengths
            ]

            # Aggregate using mean
            score = np.mean(window_scores) if window_scores else 0.0
            batch_scores.append(score)

        return batch_scores
