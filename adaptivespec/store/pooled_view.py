"""What a fleet learned, read from its pooled totals: the decisions each host would reach
from every host's measurements, for `thresholds` and `--export` on a fleet's database.

Hosts of a fleet write their statistics into the fleet tables, not into the decision rows, so
the pooled view is rebuilt here the way a daemon builds it on refresh: a fresh controller, the
pooled evidence folded in, and its decisions read out.
"""

from __future__ import annotations

from sqlalchemy import Engine

from adaptivespec.controller import exports
from adaptivespec.controller.controller import SIM_METHODS, Controller, ControllerConfig
from adaptivespec.controller.report import CellDecision
from adaptivespec.store.fleet import FleetKey, FleetRepository
from adaptivespec.store.rows import ThresholdRow

READER = "adaptivespec-thresholds"  # a host id that owns no rows: the view is every host's
EVERYONE = 10.0**9  # seconds: every host that ever flushed counts as live (only probe shares use it)


def pooled_thresholds(engine: Engine) -> list[ThresholdRow]:
    """One row per (model, hardware, context bucket) the fleet measured; [] without a fleet."""
    repository = FleetRepository(engine)
    hosts = repository.hosts()
    keys = sorted({(h.model_key, h.hardware_key) for h in hosts})
    rows: list[ThresholdRow] = []
    for model, hardware in keys:
        view = repository.pooled(FleetKey(READER, model, hardware), live_seconds=EVERYONE)
        # The drafters as the model key names them (the runner's order), else as the rows do.
        named = sorted({method for (_, _, method, k) in view.totals.arms if k > 0 and method})
        methods = exports.drafters_in(model) or tuple(named) or SIM_METHODS
        controller = Controller(model, hardware, ControllerConfig(), methods)
        controller.fold(view)
        updated = max(h.last_flush_at for h in hosts if (h.model_key, h.hardware_key) == (model, hardware))
        rows.extend(_rows(controller, updated))
    return rows


def _rows(controller: Controller, updated_at: str) -> list[ThresholdRow]:
    by_ctx: dict[int, list[CellDecision]] = {}
    for decision in controller.decisions():
        by_ctx.setdefault(decision.ctx_bucket, []).append(decision)
    keys = (controller.model_key, controller.hardware_key)
    return [
        ThresholdRow.of(
            keys,
            ctx,
            cells,
            samples=sum(c.fleet_samples for c in cells),
            version=controller.version,
            updated_at=updated_at,
            rewards={c.batch_bucket: _rewards(controller, (ctx, c.batch_bucket)) for c in cells},
        )
        for ctx, cells in sorted(by_ctx.items())
    ]


def _rewards(controller: Controller, key: tuple[int, int]) -> dict[tuple[str, int], float]:
    """Each measured arm's expected tokens per row per second in one cell."""
    cell = controller.cells[key]
    predicted = cell.predictions(controller.acceptance_of(key[0]))
    return {(arm.method, arm.k): reward * cell.evidence.scale for arm, reward in predicted.items()}
