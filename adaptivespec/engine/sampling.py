"""Sampling parameters and the vectorised samplers the runner applies to a whole batch.

Randomness is drawn per row from that request's own generator, on the device, then all
sampling is done by inverse-CDF lookups on the batch at once, so a seeded request gives the
same tokens whatever else shares its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    generators: Sequence[torch.Generator]  # B generators, one per row, on the device (Philox on cuda)
    all_greedy: bool
    any_top_p: bool  # some row keeps less than the whole distribution

    def uniforms(self, per_row: int, device: torch.device) -> torch.Tensor:
        """[B, per_row] uniforms, each row from its own generator."""
        draws = [torch.rand(per_row, generator=g, device=g.device) for g in self.generators]
        if not draws:
            return torch.zeros(0, per_row, device=device)
        return torch.stack(draws).to(device, non_blocking=True)


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


def sample_from(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: probs [..., V], uniforms [...] -> token ids [...]."""
    cdf = probs.cumsum(dim=-1)
    total = cdf[..., -1:]
    target = (uniforms.unsqueeze(-1) * total).contiguous()
    # The first index whose cdf exceeds the target: a zero-probability token is never picked, u = 0 included.
    index = torch.searchsorted(cdf.contiguous(), target, side="right").squeeze(-1)
    return index.clamp(max=probs.shape[-1] - 1)


def next_tokens(logits: torch.Tensor, sampling: BatchSampling) -> torch.Tensor:
    """logits [B, V] -> one token per row: argmax for greedy rows, a sample for the others."""
    argmax = logits.argmax(dim=-1)
    if sampling.all_greedy:
        return argmax
    probs = probabilities(logits.unsqueeze(1), sampling).squeeze(1)
    sampled = sample_from(probs, sampling.uniforms(1, logits.device).squeeze(1))
    return torch.where(sampling.greedy.to(logits.device), argmax, sampled)
