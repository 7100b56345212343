"""Choices scored on repeats they were not made on: what a pick from a noisy measurement delivers.

A bench that picks "the best" of many contenders by the same measurements that then score it
credits the pick with its luck. Leaving each repeat out of the choice, then scoring the
choice on that repeat alone, removes that bias; what remains is the cost of choosing from
noise, which an operator who picks from a measurement pays too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def cross_fitted_rival(
    tokens: np.ndarray,  # [contender, phase, repeat]
    seconds: np.ndarray,  # [contender, phase, repeat]
    oracle_tokens: np.ndarray,  # [phase, repeat]
    oracle_seconds: np.ndarray,  # [phase, repeat]
    rivals: Sequence[int],
) -> tuple[np.ndarray, list[int]]:
    """Per repeat, the rival that the *other* repeats rank best, and its ratio to the oracle on
    that repeat alone: ([repeat], the rival's index per repeat).

    "The best static policy" picked by the measurements that then score it is the luckiest of
    a dozen noisy figures, above what any of them delivers (the pooled oracle's winner's curse,
    one level up): an operator choosing a static table from a measurement gets the chosen
    table's next run, which is what this scores. Needs two repeats or more.
    """
    repeats = tokens.shape[2]
    if repeats < 2:
        raise ValueError("a cross-fitted choice needs at least 2 repeats")
    alone = repeat_ratios(tokens, seconds, oracle_tokens, oracle_seconds)  # [contender, repeat]
    chosen = []
    for r in range(repeats):
        fitted = _ratios_over(tokens, seconds, oracle_tokens, oracle_seconds, np.arange(repeats) != r)
        chosen.append(max(rivals, key=lambda c: fitted[c]))
    return alone[chosen, np.arange(repeats)], chosen


def repeat_ratios(
    tokens: np.ndarray, seconds: np.ndarray, oracle_tokens: np.ndarray, oracle_seconds: np.ndarray
) -> np.ndarray:
    """Each contender's ratio to the oracle on each repeat alone: [contender, repeat]."""
    repeats = tokens.shape[2]
    return np.stack(
        [
            _ratios_over(tokens, seconds, oracle_tokens, oracle_seconds, np.arange(repeats) == r)
            for r in range(repeats)
        ],
        axis=1,
    )


def _ratios_over(
    tokens: np.ndarray,
    seconds: np.ndarray,
    oracle_tokens: np.ndarray,
    oracle_seconds: np.ndarray,
    repeats: np.ndarray,  # [repeat] bool: the repeats pooled
) -> np.ndarray:
    """[contender]: the mean over phases of goodput over the oracle's, both pooled over `repeats`."""
    goodput = tokens[..., repeats].sum(axis=-1) / seconds[..., repeats].sum(axis=-1)  # [C, P]
    oracle = oracle_tokens[:, repeats].sum(axis=-1) / oracle_seconds[:, repeats].sum(axis=-1)  # [P]
    ratios: np.ndarray = (goodput / oracle).mean(axis=-1)
    return ratios
