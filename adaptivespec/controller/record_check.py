"""Whether a step's telemetry is one the controller may learn from: times finite and ordered,
counts consistent (rows keeping j drafts are a subset of those keeping j - 1), the step's own and
those of the drafters scored beside it."""

from __future__ import annotations

import itertools
import math

from adaptivespec.engine.telemetry import StepTelemetry


def valid(record: StepTelemetry) -> bool:
    times = (record.step_seconds, record.draft_seconds, record.verify_seconds, record.catch_up_seconds)
    if not all(math.isfinite(t) and t >= 0 for t in times) or record.step_seconds <= 0:
        return False
    if record.catch_up_tokens < 0 or record.catch_up_seconds >= record.step_seconds:
        return False
    if record.batch_size < 1 or record.k < 0 or record.emitted < 1:
        return False
    if not math.isfinite(record.mean_context_len) or record.mean_context_len < 0:
        return False
    if not 0 <= record.width <= record.k or len(record.kept_at_least) != record.width:
        return False
    verified = record.verified_width
    if verified is not None and not (math.isfinite(verified) and 0 <= verified <= record.width):
        return False
    if not _survival(record.batch_size, record.kept_at_least):
        return False
    for shadow in record.shadow:
        if shadow.k < 1 or len(shadow.kept_at_least) != shadow.k:
            return False
        if not _survival(shadow.rows, shadow.kept_at_least):
            return False
    return 0 <= record.accepted <= record.drafted and sum(record.kept_at_least) == record.accepted


def _survival(rows: int, kept_at_least: tuple[int, ...]) -> bool:
    """Rows keeping j drafts are a subset of those keeping j - 1, and there is at least one row."""
    kept = (rows, *kept_at_least)
    return rows >= 1 and not any(later < 0 or later > earlier for earlier, later in itertools.pairwise(kept))
