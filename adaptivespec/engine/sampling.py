"""Sampling parameters and the coupled sampler the runner applies to a whole batch.

A sampled token is the Gumbel-max of the row's (temperature- and top-p-adjusted) log
probabilities, computed as an exponential race (argmax p / E), under noise drawn from (the
request's seed, the token's position) alone: a counter-based draw that depends on nothing
else. So the token at a position is the same whatever else shares the batch, whatever K the
controller picks, and whether it was proposed by a drafter or sampled by the target: a draft
is kept when it equals the target's own Gumbel-max token, and the output equals the K = 0
output token for token. Each token is an exact sample of the target's distribution (the
Gumbel-max trick), so the text is distributed exactly as the target's. A draft model proposes
the Gumbel-max of its own distribution under the same noise, which is what makes its drafts
agree when the two distributions do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from adaptivespec.errors import InvalidRequestError

# Below this a temperature divides logits into overflow (float32 gives 0 or inf, then NaN),
# and the distribution is a point mass on the argmax anyway: such requests decode greedily.
GREEDY_BELOW = 1e-5
SAMPLING_DTYPE = torch.float32  # temperatures, top_p and probabilities, whatever the model's dtype
MAX_STOPS = 16  # stop strings are matched on the event loop, per row and step: bounded work
MAX_STOP_CHARS = 256
SEED_LIMIT = 2**64  # torch generators take seeds in [0, 2^64)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise InvalidRequestError(
                f"max_tokens must be a positive integer, got {self.max_tokens!r}", "max_tokens"
            )
        if not (self.temperature >= 0.0) or self.temperature == float("inf"):
            raise InvalidRequestError(
                f"temperature must be a finite number >= 0, got {self.temperature!r}", "temperature"
            )
        if not (0.0 < self.top_p <= 1.0):
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}", "top_p")
        if any(not isinstance(s, str) or s == "" for s in self.stop):
            raise InvalidRequestError("stop strings must be non-empty strings", "stop")
        if len(self.stop) > MAX_STOPS or any(len(s) > MAX_STOP_CHARS for s in self.stop):
            raise InvalidRequestError(
                f"at most {MAX_STOPS} stop strings of at most {MAX_STOP_CHARS} characters each", "stop"
            )
        if self.seed is not None and not (isinstance(self.seed, int) and 0 <= self.seed < SEED_LIMIT):
            raise InvalidRequestError(f"seed must be an integer in [0, 2^64), got {self.seed!r}", "seed")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def check_fits(self, dtype: torch.dtype) -> None:
        """Refuses values that `dtype`, the runner's sampling dtype, cannot hold: a temperature
        past its largest finite value, a top_p that rounds to 0. Checked at intake, so such a
        request never reaches a step it shares with others."""
        info = torch.finfo(dtype)
        if not self.greedy and self.temperature > info.max:
            raise InvalidRequestError(
                f"temperature {self.temperature!r} is beyond what {dtype} holds ({info.max:.3g}); "
                "use a temperature of at most 2, as the OpenAI API does",
                "temperature",
            )
        if self.top_p < 1.0 and torch.tensor(self.top_p, dtype=dtype).item() <= 0.0:
            raise InvalidRequestError(
                f"top_p {self.top_p!r} rounds to 0 in {dtype}; use a top_p of at least {info.tiny:.3g}",
                "top_p",
            )


@dataclass(frozen=True, slots=True)
class BatchSampling:
    """Sampling settings of the rows [0, B) of one forward.

    The flags are known on the host, so that choosing a path never reads the device.
    """

    temperature: torch.Tensor  # [B] float, on the device; 1.0 where greedy (unused there)
    top_p: torch.Tensor  # [B] float, on the device
    greedy: torch.Tensor  # [B] bool, on the device
    seeds: Sequence[int]  # B request seeds, in [0, 2^64)
    positions: np.ndarray  # [B] int64: the sequence index of the first token this forward samples
    host_greedy: np.ndarray  # [B] bool
    all_greedy: bool
    any_top_p: bool  # some row keeps less than the whole distribution
    _memo: dict[tuple[int, int, int], torch.Tensor] = field(default_factory=dict)  # one step's noise

    def noise(self, width: int, vocab: int, device: torch.device, offset: int = 0) -> torch.Tensor:
        """[B, width, vocab] Exp(1) draws: row r, column j from (seeds[r], positions[r] + offset + j)
        alone. The token argmax(p / E) is the Gumbel-max of log p (-log E is Gumbel), for one
        logarithm per token instead of two. Greedy rows get ones (their tokens are argmaxes).
        Drawn on the host's generator, the same on every device; a step's drafter and verifier
        share what they both draw."""
        out = torch.ones(len(self.seeds), width, vocab)
        for row in np.flatnonzero(~self.host_greedy):
            for j in range(width):
                out[row, j] = self._exponential(int(row), int(self.positions[row]) + offset + j, vocab)
        return out.to(device, non_blocking=True)

    def _exponential(self, row: int, position: int, vocab: int) -> torch.Tensor:
        key = (row, position, vocab)
        if key not in self._memo:
            generator = torch.Generator().manual_seed(noise_key(self.seeds[row], position))
            uniform = torch.rand(vocab, generator=generator).clamp_min_(torch.finfo(torch.float32).tiny)
            self._memo[key] = uniform.log_().neg_()
        return self._memo[key]


_MASK64 = (1 << 64) - 1


def noise_key(seed: int, position: int) -> int:
    """A 64-bit key from (seed, position): SplitMix64's finalizer over both, so that nearby
    seeds and positions give unrelated streams."""
    z = (seed * 0x9E3779B97F4A7C15 + position + 1) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def probabilities(logits: torch.Tensor, sampling: BatchSampling) -> torch.Tensor:
    """logits [B, T, V] -> probabilities [B, T, V] in float32, after temperature and top_p."""
    temperature = sampling.temperature.to(logits.device).view(-1, 1, 1)
    probs = torch.softmax(logits.to(SAMPLING_DTYPE) / temperature, dim=-1)
    if sampling.any_top_p:
        probs = _top_p_filter(probs, sampling.top_p.to(logits.device).view(-1, 1, 1))
    return probs


def _top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


def choices(
    logits: torch.Tensor, sampling: BatchSampling, width: int | None = None, offset: int = 0
) -> torch.Tensor:
    """logits [B, T, V] -> the token each row takes at each of its T positions [B, T]: the
    argmax for greedy rows, the Gumbel-max under the row's noise for the others. `width`:
    the vocabulary the noise is drawn over (the target's, when a draft's logits are narrower);
    `offset`: positions past the rows' `positions` (a drafter's j-th draft)."""
    argmax = last_argmax(logits)
    if sampling.all_greedy:
        return argmax
    vocab = logits.shape[-1]
    races = sampling.noise(logits.shape[1], width or vocab, logits.device, offset)[..., :vocab]
    sampled = last_argmax(probabilities(logits, sampling) / races)  # p = 0: never picked
    return torch.where(sampling.greedy.to(logits.device).unsqueeze(1), argmax, sampled)


def last_argmax(x: torch.Tensor) -> torch.Tensor:
    """x [..., V] -> the index of each row's largest value [...] (int64; the first on a tie).

    On the CPU, float32 goes through numpy's reduction: torch's keeps an index beside every
    value and runs several times slower, and at a verify's width (B x (K + 1) rows of the
    vocabulary) it costs a measurable share of a step (docs/results.md). Same ties, same ids."""
    if x.device.type == "cpu" and x.dtype == torch.float32:
        return torch.from_numpy(
            np.ascontiguousarray(x.detach().numpy().argmax(axis=-1)).astype(np.int64, copy=False)
        )
    return x.argmax(dim=-1)


def next_tokens(logits: torch.Tensor, sampling: BatchSampling) -> torch.Tensor:
    """logits [B, V] -> one token per row, at each row's `positions`."""
    return choices(logits.unsqueeze(1), sampling)[:, 0]
