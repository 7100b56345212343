"""Paired bootstrap over repeats: how sure a goodput ratio measured in alternation is.

Every repeat of a bucket ran every contender on the same requests, close together in time,
so resampling whole repeats (the same indices for every contender) keeps that pairing: the
interval of a difference between two contenders is much narrower than either goodput's.

>>> tokens = np.array([[[10.0, 10.0]], [[9.0, 11.0]]])  # [contender, phase, repeat]
>>> seconds = np.ones_like(tokens)
>>> ratios = PairedRatios(tokens, seconds, tokens[0], seconds[0], resamples=200)
>>> ratios.ratio(1).point
1.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Interval:
    point: float
    low: float
    high: float

    def to_json(self) -> list[float]:
        return [self.point, self.low, self.high]


class PairedRatios:
    """Ratio to the oracle (the mean over phases of goodput / the oracle's there), with intervals."""

    def __init__(
        self,
        tokens: np.ndarray,  # [contender, phase, repeat]
        seconds: np.ndarray,  # [contender, phase, repeat]
        oracle_tokens: np.ndarray,  # [phase, repeat]: the oracle's own measurements, resampled alike
        oracle_seconds: np.ndarray,  # [phase, repeat]
        *,
        resamples: int = 2000,
        seed: int = 0,
    ) -> None:
        both_tokens = np.concatenate([tokens, oracle_tokens[None]])  # the oracle is the last row
        both_seconds = np.concatenate([seconds, oracle_seconds[None]])
        phases, repeats = tokens.shape[1], tokens.shape[2]
        rng = np.random.default_rng(seed)
        index = rng.integers(0, repeats, size=(resamples, 1, phases, repeats))
        sampled_tokens = np.take_along_axis(both_tokens[None], index, axis=3).sum(axis=3)  # [B, C+1, P]
        sampled_seconds = np.take_along_axis(both_seconds[None], index, axis=3).sum(axis=3)
        self._point = _ratios(both_tokens.sum(axis=2) / both_seconds.sum(axis=2))  # [C]
        self._samples = _ratios(sampled_tokens / sampled_seconds)  # [B, C]

    def ratio(self, contender: int) -> Interval:
        return _interval(self._point[contender], self._samples[:, contender])

    def difference(self, a: int, b: int) -> Interval:
        """Ratio of a minus ratio of b: below zero beyond its interval means a is worse."""
        return _interval(self._point[a] - self._point[b], self._samples[:, a] - self._samples[:, b])


def _ratios(goodput: np.ndarray) -> np.ndarray:
    """goodput [..., C+1, P] with the oracle last -> mean over phases of goodput / oracle's, [..., C]."""
    return (goodput[..., :-1, :] / goodput[..., -1:, :]).mean(axis=-1)


def _interval(point: float, samples: np.ndarray) -> Interval:
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return Interval(float(point), float(low), float(high))
