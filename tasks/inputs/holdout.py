"""A held-out share of the training file, split off by a seed of its own: validation data for choosing
a recipe (a sweep's pooling, learning rate, ...) without ever reading the dev set, which then scores
the chosen recipe once."""

from __future__ import annotations

import numpy as np

from sesame.tasks.core.errors import ConfigError


def check_holdout_fraction(fraction: float | None) -> None:
    if fraction is not None and not 0 < fraction < 1:
        raise ConfigError(f"data.holdout_fraction={fraction}: use a share of the training examples strictly between "
                          "0 and 1 (0.1 holds out 10%), or null to validate on data.validation_file")


def holdout_indices(num_examples: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train, held_out)``: ascending indices of ``num_examples`` examples, ``round(fraction * n)`` of
    them held out, chosen by ``seed`` alone (so every job of a sweep holds out the same examples,
    whatever its training seed)."""
    check_holdout_fraction(fraction)
    held = int(round(fraction * num_examples))
    if not 1 <= held < num_examples:
        raise ConfigError(f"data.holdout_fraction={fraction} of {num_examples} training examples holds out {held}: "
                          "both parts need at least one example. Fix: more training data or another fraction")
    order = np.random.default_rng(seed).permutation(num_examples)
    return np.sort(order[held:]), np.sort(order[:held])
