"""Serving traffic for `bench workload`: seeded arrivals, request lengths, and what each request saw.

Arrivals are a Poisson process at a given rate, or a burst (everyone at time 0). Prompt and
output lengths are drawn log-uniformly between bounds, so most requests are short and a few
are long, as in chat traffic; a JSON file may give other bounds or observed lengths instead.
Every engine is fed the same requests, and is judged by the same summary.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class Lengths:
    """Log-uniform between low and high (inclusive), or drawn from `samples` when it is given."""

    low: int
    high: int
    samples: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"lengths need 1 <= low <= high, got [{self.low}, {self.high}]")

    @classmethod
    def parse(cls, value: object, name: str) -> Lengths:
        """[low, high] for a range, or {"samples": [...]} for observed lengths."""
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
            return cls(value[0], value[1])
        if isinstance(value, dict) and isinstance(value.get("samples"), list) and value["samples"]:
            samples = tuple(int(v) for v in value["samples"])
            return cls(min(samples), max(samples), samples)
        raise ValueError(f'{name} must be [low, high] or {{"samples": [n, ...]}}, got {value!r}')

    def draw(self, rng: np.random.Generator, count: int) -> list[int]:
        if self.samples:
            return [int(v) for v in rng.choice(self.samples, size=count)]
        logs = rng.uniform(math.log(self.low), math.log(self.high + 1), size=count)
        return [min(self.high, int(v)) for v in np.exp(logs)]


@dataclass(frozen=True, slots=True)
class TrafficShape:
    prompt: Lengths = Lengths(16, 1500)
    output: Lengths = Lengths(16, 512)

    @classmethod
    def from_file(cls, path: Path) -> TrafficShape:
        """{"prompt_tokens": ..., "output_tokens": ...}, each as `Lengths.parse` reads it."""
        try:
            spec = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read the length distribution {path}: {exc}") from exc
        if not isinstance(spec, dict):
            raise ValueError(f"{path} must hold a JSON object with prompt_tokens and output_tokens")
        default = cls()
        return cls(
            Lengths.parse(spec["prompt_tokens"], "prompt_tokens")
            if "prompt_tokens" in spec
            else default.prompt,
            Lengths.parse(spec["output_tokens"], "output_tokens")
            if "output_tokens" in spec
            else default.output,
        )

    @property
    def longest(self) -> int:
        """Context a request may need: the longest prompt plus the longest output."""
        return self.prompt.high + self.output.high


@dataclass(frozen=True, slots=True)
class Request:
    arrival: float  # seconds after the start of the run
    prompt: list[int]
    max_tokens: int


def requests(
    shape: TrafficShape,
    rate: float | None,
    count: int,
    corpus: list[int],
    seed: int,
    *,
    prompts: list[list[int]] | None = None,
) -> list[Request]:
    """`count` requests arriving at `rate` per second (None: all at once), prompts cut from
    `corpus`, or taken in turn from `prompts` (a named mix, traffic_mixes.py) when given.

    The seed fixes the lengths and prompts, not the arrivals alone, so every rate serves the
    same requests in the same order, only spaced differently.
    """
    rng = np.random.default_rng(seed)
    lengths = shape.prompt.draw(rng, count)
    outputs = shape.output.draw(rng, count)
    if prompts is None:
        if len(corpus) <= shape.prompt.high:
            raise ValueError(
                f"the prompt corpus has {len(corpus)} tokens; prompts need up to {shape.prompt.high}"
            )
        starts = rng.integers(0, len(corpus) - shape.prompt.high, size=count)
        chosen = [corpus[int(s) : int(s) + n] for s, n in zip(starts, lengths, strict=True)]
    else:
        chosen = [prompts[i % len(prompts)] for i in range(count)]
        longest = max(len(p) for p in chosen)
        if longest > shape.prompt.high:
            raise ValueError(f"a prompt of the mix has {longest} tokens, above {shape.prompt.high}")
    gaps = np.random.default_rng([seed, 1]).exponential(1.0 / rate, size=count) if rate else np.zeros(count)
    arrivals = np.cumsum(gaps) - gaps[0]  # the first request arrives at time 0
    return [Request(float(at), p, m) for at, p, m in zip(arrivals, chosen, outputs, strict=True)]


@dataclass(slots=True)
class Served:
    """What one request saw: when each piece of its stream arrived, and its tokens."""

    request: Request
    sent: float  # when it was submitted, on the run's clock
    chunk_times: list[float]  # when each streamed piece arrived
    tokens: list[int]

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.sent

    @property
    def gaps(self) -> list[float]:
        """Inter-token latency as clients see it: the gap between consecutive streamed pieces."""
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]

    @property
    def seconds_per_token(self) -> float:
        """Time per output token after the first (TPOT), which is what an ITL target bounds."""
        after = len(self.tokens) - 1
        return (self.chunk_times[-1] - self.chunk_times[0]) / after if after > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Targets:
    ttft_s: float
    tpot_s: float


@dataclass(frozen=True, slots=True)
class Summary:
    requests: int
    duration_s: float
    throughput_tok_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    # Each stream's own decode speed: the median request's time per output token after its
    # first. A client reads its stream's speed from this, whatever the pieces it came in; at a
    # light load, where throughput only follows the arrivals, it is where speculation shows.
    tpot_p50_ms: float
    # Requests in the system on average, waiting or decoding (Little's law: their time in it
    # over the run's): the batch an engine ran at, read alike from any engine's streams.
    mean_concurrency: float
    goodput_rps: float  # requests per second that met both targets
    met_targets: float  # share of requests that met both targets
    mismatches: int  # requests whose tokens differ from the reference engine's


def summarize(served: list[Served], targets: Targets, reference: list[list[int]] | None) -> Summary:
    began = min(s.sent for s in served)
    ended = max(s.chunk_times[-1] for s in served)
    duration = ended - began
    gaps = [g for s in served for g in s.gaps] or [0.0]  # every request a single piece
    ttfts = [s.ttft for s in served]
    good = sum(1 for s in served if s.ttft <= targets.ttft_s and s.seconds_per_token <= targets.tpot_s)
    mismatches = 0
    if reference is not None:
        mismatches = sum(1 for s, ref in zip(served, reference, strict=True) if s.tokens != ref)
    return Summary(
        requests=len(served),
        duration_s=duration,
        throughput_tok_s=sum(len(s.tokens) for s in served) / duration,
        ttft_p50_ms=percentile_ms(ttfts, 50),
        ttft_p99_ms=percentile_ms(ttfts, 99),
        itl_p50_ms=percentile_ms(gaps, 50),
        itl_p99_ms=percentile_ms(gaps, 99),
        tpot_p50_ms=percentile_ms([s.seconds_per_token for s in served if len(s.tokens) > 1] or [0.0], 50),
        mean_concurrency=sum(s.chunk_times[-1] - s.sent for s in served) / duration,
        goodput_rps=good / duration,
        met_targets=good / len(served),
        mismatches=mismatches,
    )


def over_rounds(rounds: list[Summary]) -> dict[str, Any]:
    """One engine's summaries over the rounds of a rate: each figure's median, beside its
    range and every round's summary. Mismatches are the most any round had."""
    if not rounds:
        raise ValueError("no rounds were run")
    median: dict[str, Any] = {}
    ranges: dict[str, list[float]] = {}
    for f in fields(Summary):
        values = [getattr(s, f.name) for s in rounds]
        if f.name == "mismatches":
            median[f.name] = max(values)
        elif f.name == "requests":
            median[f.name] = values[0]
        else:
            median[f.name] = statistics.median(values)
            ranges[f.name] = [min(values), max(values)]
    return {**median, "ranges": ranges, "rounds": [asdict(s) for s in rounds]}


def percentile_ms(values: list[float], percentile: float) -> float:
    """A percentile of durations in seconds, in milliseconds."""
    if not values:
        raise ValueError("no durations were measured; give the run more requests or steps")
    return float(np.percentile(values, percentile)) * 1000.0
