"""Exceptions that cross module boundaries; each message says what to do next."""


class AdaptiveSpecError(Exception):
    """Base class, so callers can catch everything this package raises on purpose."""


class ConfigError(AdaptiveSpecError, ValueError):
    """A configuration value is invalid."""


class InvalidRequestError(AdaptiveSpecError, ValueError):
    """A request cannot be served as given (bad prompt, bad sampling parameters)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class QueueFullError(AdaptiveSpecError):
    """The engine's waiting queue is at its limit; retry later."""


class EngineStoppedError(AdaptiveSpecError):
    """The engine is not running (not started yet, or draining)."""


class ModelLoadError(AdaptiveSpecError):
    """A model or tokenizer could not be loaded, or the target and draft do not match."""
