"""Loads ServeConfig from a TOML file, ADAPTIVESPEC_* variables and flags, in rising precedence.

Keys are the ServeConfig fields; `[engine]` and `[engine.models]` tables hold the engine's.
Environment variables are ADAPTIVESPEC_<KEY> (ADAPTIVESPEC_MAX_BATCH for engine.max_batch,
ADAPTIVESPEC_TARGET for engine.models.target). Unknown keys are errors that list the known.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adaptivespec.config import EngineConfig, ModelConfig, ServeConfig
from adaptivespec.errors import ConfigError

_SECTIONS = {"serve": ServeConfig, "engine": EngineConfig, "models": ModelConfig}


def _fields(kind: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(kind) if f.name not in ("engine", "models")}


def load(file: Path | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> ServeConfig:
    layers: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    if file is not None:
        _merge(layers, _from_file(file))
    _merge(layers, _from_env(env))
    _merge(layers, _route(flags, "flag"))
    try:
        models = ModelConfig(**layers["models"])
        engine = EngineConfig(**layers["engine"], models=models)
        return ServeConfig(**layers["serve"], engine=engine)
    except TypeError as exc:
        raise ConfigError(f"bad configuration: {exc}") from exc


def _merge(into: dict[str, dict[str, Any]], layer: dict[str, dict[str, Any]]) -> None:
    for section, values in layer.items():
        into[section].update(values)


def _route(values: Mapping[str, Any], source: str) -> dict[str, dict[str, Any]]:
    """Puts each flat key into the section whose dataclass has that field."""
    routed: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    for key, value in values.items():
        if value is None:
            continue
        section = next((name for name, kind in _SECTIONS.items() if key in _fields(kind)), None)
        if section is None:
            raise ConfigError(f"unknown {source} setting {key!r}; known: {', '.join(sorted(_known()))}")
        routed[section][key] = _coerce(_fields(_SECTIONS[section])[key], value, f"{source} {key}")
    return routed


def _known() -> set[str]:
    return {name for kind in _SECTIONS.values() for name in _fields(kind)}


def _from_file(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    engine = data.pop("engine", {})
    models = engine.pop("models", {}) if isinstance(engine, dict) else {}
    flat = {**data, **(engine if isinstance(engine, dict) else {}), **models}
    return _route(flat, f"{path}:")


def _from_env(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    values = {}
    for key, raw in env.items():
        if key.startswith("ADAPTIVESPEC_"):
            name = key.removeprefix("ADAPTIVESPEC_").lower()
            if name in _known():
                values[name] = raw
    return _route(values, "environment")


def _coerce(field: dataclasses.Field[Any], value: Any, where: str) -> Any:
    kind = str(field.type)
    try:
        if not isinstance(value, str):
            return value
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
        if kind.startswith("tuple"):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value
    except ValueError as exc:
        raise ConfigError(f"{where}: expected {kind}, got {value!r}") from exc
