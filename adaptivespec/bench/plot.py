"""PNG plots for benchmark reports (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def goodput_by_batch(
    path: Path, title: str, series: Mapping[str, Mapping[str, float]], bucket_sizes: Mapping[str, int]
) -> None:
    """One line per policy: goodput (tok/s) against the bucket's batch size, log-scaled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9, 5.5))
    for name, by_bucket in series.items():
        xs = [bucket_sizes[b] for b in by_bucket]
        style = (
            {"linewidth": 2.5, "color": "black", "linestyle": "--"} if name == "oracle" else {"marker": "o"}
        )
        axes.plot(xs, list(by_bucket.values()), label=name, **style)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("batch size (decoding sequences)")
    axes.set_ylabel("goodput (tokens/s)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
