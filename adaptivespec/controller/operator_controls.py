"""What operators set: overrides and the freeze, and which of them changed here since the
last save, so that a save writes only this host's own changes (hosts of a fleet share them).

A fleet's hosts read the shared controls on every refresh (`adopt`); a save that took a state
built before such a read must not write the old value back over another host's change. So a
save writes the freeze, or the overrides, only when an operator changed them on this host
since the last save: the same take-and-give-back as the dirty cells.
"""

from __future__ import annotations

import logging

from adaptivespec.controller.overrides import Override
from adaptivespec.controller.state import ControlChanges
from adaptivespec.errors import ConfigError

log = logging.getLogger(__name__)

MAX_OVERRIDES = 64


class OperatorControls:
    def __init__(self, largest_k: int, methods: tuple[str, ...]) -> None:
        """`largest_k`, `methods`: what the runner can draft, which a pin may not exceed."""
        self._largest_k, self._methods = largest_k, methods
        self.frozen = False
        self.overrides: tuple[Override, ...] = ()
        self._changed = ControlChanges()

    def freeze(self, frozen: bool) -> None:
        self.frozen = frozen
        self._changed |= ControlChanges(frozen=True)

    def set_overrides(self, overrides: tuple[Override, ...]) -> None:
        """Replaces the overrides; a pin may not ask for more drafts, or another drafter, than
        the runner has."""
        if len(overrides) > MAX_OVERRIDES:
            raise ConfigError(f"at most {MAX_OVERRIDES} overrides; clear some first")
        for override in overrides:
            self._check(override)
        self.overrides = overrides
        self._changed |= ControlChanges(overrides=True)

    def _check(self, override: Override) -> None:
        if override.k is not None and override.k > self._largest_k:
            raise ConfigError(f"k must be at most {self._largest_k}, the most drafts this runner makes")
        if override.method is not None and override.method not in self._methods:
            raise ConfigError(f"method must be one of the drafters loaded, {self._methods}")

    def with_override(self, override: Override) -> tuple[Override, ...]:
        """The overrides with `override` added, replacing any of the same scope."""
        return (*(o for o in self.overrides if o.scope != override.scope), override)

    def adopt(self, frozen: bool, overrides: tuple[Override, ...]) -> None:
        """Takes what another host set (or what the store held): not a change of this host's.
        An override this runner cannot apply (more drafts, or a drafter it did not load) is
        left out, with a warning: the other hosts keep it."""
        runnable = []
        for override in overrides:
            try:
                self._check(override)
            except ConfigError as exc:
                log.warning(
                    "override %s (set on another host, or before a restart) does not apply here: %s",
                    override,
                    exc,
                )
            else:
                runnable.append(override)
        self.frozen, self.overrides = frozen, tuple(runnable)

    @property
    def pending(self) -> ControlChanges:
        """What the next save would write, without taking it."""
        return self._changed

    def take_changes(self) -> ControlChanges:
        taken, self._changed = self._changed, ControlChanges()
        return taken

    def give_back(self, changes: ControlChanges) -> None:
        self._changed |= changes
