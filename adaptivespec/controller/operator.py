"""Operator controls: overrides, freeze and reset, each applied live and recorded in the history."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adaptivespec.controller.overrides import Override
from adaptivespec.controller.publication import republish
from adaptivespec.errors import ConfigError

if TYPE_CHECKING:
    from adaptivespec.controller.controller import Controller

MAX_OVERRIDES = 64


def set_overrides(controller: Controller, overrides: tuple[Override, ...], reason: str = "override") -> None:
    """Replaces the overrides; a pin may not ask for more drafts than the runner can make."""
    if len(overrides) > MAX_OVERRIDES:
        raise ConfigError(f"at most {MAX_OVERRIDES} overrides; clear some first")
    largest = max(controller.config.settings.arms)
    for override in overrides:
        if override.k is not None and override.k > largest:
            raise ConfigError(f"k must be at most {largest}, the most drafts this runner makes")
        if override.method is not None and override.method not in controller.methods:
            raise ConfigError(f"method must be one of the drafters loaded, {controller.methods}")
    controller.overrides = overrides
    controller.record_event(f"{reason}: {len(overrides)} active")
    republish(controller)


def add_override(controller: Controller, override: Override, reason: str = "override") -> None:
    """Adds one override, replacing any with the same scope, so repeated pins do not pile up."""
    others = tuple(o for o in controller.overrides if o.scope != override.scope)
    set_overrides(controller, (*others, override), reason)


def freeze(controller: Controller, frozen: bool) -> None:
    """Frozen, the engine runs each cell's decision and nothing is learned or explored."""
    controller.frozen = frozen
    controller.record_event("frozen" if frozen else "unfrozen")
    republish(controller)


def reset(controller: Controller) -> None:
    """Forgets everything learned for this model and hardware (overrides stay)."""
    controller.forget()
    controller.record_event("reset")
    republish(controller)
