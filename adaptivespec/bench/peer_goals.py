"""Where ours stands against OpenVINO GenAI at one rate of `bench workload`: each goal's ratio,
read off the engines' medians over the rounds, and whether it is met.

The goals are what a CPU user weighs in choosing a server (issue 30):
- with speculation off, ours serves at least as many tokens a second as OpenVINO plain, with
  its ITL p50 and TTFT p50 at most a margin above OpenVINO's;
- with the controller, ours is at least `adaptive_over_best` times as fast as OpenVINO's best
  configuration run (plain, or its prompt lookup) where the load is light, and never slower
  than OpenVINO plain anywhere.

"As fast" is each stream's own decode speed (TPOT p50) where the load was light for every
engine compared (requests in the system on average at most `light_concurrency`): there
throughput only follows the arrivals, and speculation shows in the streams. Elsewhere, and in
the burst, it is throughput. Nothing is rounded in anyone's favour: a ratio of 0.995 is below 1.0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import astuple, dataclass
from math import inf
from typing import Any

PLAIN = "openvino"
CONFIGURATIONS = (PLAIN, "openvino-spec")  # OpenVINO as run: plain, and with its prompt lookup
COMPARED = ("ours-off", "ours-adaptive", *CONFIGURATIONS)  # whose load decides if a rate is light


@dataclass(frozen=True, slots=True)
class PeerGoals:
    off_throughput: float = 1.0  # ours-off over OpenVINO plain, at least
    off_itl_p50: float = 1.2  # ours-off over OpenVINO plain, at most
    off_ttft_p50: float = 1.2  # ours-off over OpenVINO plain, at most
    adaptive_over_best: float = 1.3  # ours-adaptive over OpenVINO's best, at a light load
    adaptive_over_plain: float = 1.0  # ours-adaptive over OpenVINO plain, everywhere
    light_concurrency: float = 4.0  # requests in the system, on average, for a load to be light

    def __post_init__(self) -> None:
        if min(astuple(self)) <= 0:
            raise ValueError("every goal and the light load's bound must be positive")


def against_peer(
    engines: Mapping[str, Mapping[str, Any]], burst: bool, goals: PeerGoals = PeerGoals()
) -> dict[str, Any] | None:
    """One rate's verdict from each engine's medians (`traffic.over_rounds`), or None where
    OpenVINO plain did not run. A part whose engine did not run is left out."""
    plain = engines.get(PLAIN)
    if plain is None:
        return None
    # Streams compare only where every compared engine's streams had a second token to time.
    # Another engine's load (a static-batching server queues) says nothing of these.
    compared = [e for name, e in engines.items() if name in COMPARED]
    light = not burst and all(
        e["mean_concurrency"] <= goals.light_concurrency and e["tpot_p50_ms"] > 0 for e in compared
    )
    verdict: dict[str, Any] = {"light": light, "speed": "tpot_p50" if light else "throughput"}
    off = engines.get("ours-off")
    if off is not None:
        ratios = {
            "throughput": _ratio(off["throughput_tok_s"], plain["throughput_tok_s"]),
            "itl_p50": _ratio(off["itl_p50_ms"], plain["itl_p50_ms"]),
            "ttft_p50": _ratio(off["ttft_p50_ms"], plain["ttft_p50_ms"]),
        }
        met = (
            ratios["throughput"] >= goals.off_throughput
            and ratios["itl_p50"] <= goals.off_itl_p50
            and ratios["ttft_p50"] <= goals.off_ttft_p50
        )
        verdict["off"] = {**ratios, "met": met}
    adaptive = engines.get("ours-adaptive")
    if adaptive is not None:
        speed = {name: _speed(e, light) for name, e in engines.items() if name in CONFIGURATIONS}
        best = max(speed, key=lambda name: speed[name])
        ours = _speed(adaptive, light)
        over_best, over_plain = _ratio(ours, speed[best]), _ratio(ours, speed[PLAIN])
        met = over_plain >= goals.adaptive_over_plain and (not light or over_best >= goals.adaptive_over_best)
        verdict["adaptive"] = {
            "best_peer": best,
            "over_best": over_best,
            "over_plain": over_plain,
            "met": met,
        }
    return verdict


def summary_line(rate: float | None, verdict: Mapping[str, Any]) -> str:
    """The verdict as one line of the run's output."""
    shown = "burst" if rate is None else f"{rate:g}/s"
    parts = [f"against OpenVINO at {shown} ({'light load' if verdict['light'] else 'throughput'}):"]
    off = verdict.get("off")
    if off is not None:
        parts.append(
            f"off {off['throughput']:.2f}x tok/s, ITL p50 {off['itl_p50']:.2f}x, TTFT p50 "
            f"{off['ttft_p50']:.2f}x ({_met(off)});"
        )
    adaptive = verdict.get("adaptive")
    if adaptive is not None:
        parts.append(
            f"adaptive {adaptive['over_best']:.2f}x {adaptive['best_peer']}, {adaptive['over_plain']:.2f}x "
            f"{PLAIN} ({_met(adaptive)})"
        )
    return " ".join(parts)


def _met(part: Mapping[str, Any]) -> str:
    return "met" if part["met"] else "not met"


def _speed(engine: Mapping[str, Any], light: bool) -> float:
    """Higher is faster: a stream's tokens a second where the load is light, else throughput."""
    return 1e3 / engine["tpot_p50_ms"] if light else float(engine["throughput_tok_s"])


def _ratio(ours: float, theirs: float) -> float:
    """ours / theirs; two zeros (no gap to time on either side) are a tie."""
    if theirs == 0:
        return 1.0 if ours == 0 else inf
    return ours / theirs
