from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from adaptivespec.config import DEFAULT_MODEL, ModelConfig
from adaptivespec.errors import ConfigError
from adaptivespec.settings import load


def test_flags_override_environment_which_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'port = 7000\nhost = "0.0.0.0"\n[engine]\nmax_batch = 4\n[engine.models]\ntarget = "/m"\n'
    )
    config = load(path, {"ADAPTIVESPEC_PORT": "7100", "ADAPTIVESPEC_MAX_BATCH": "8"}, {"port": 7200})
    assert (config.port, config.host, config.engine.max_batch, config.engine.models.target) == (
        7200,
        "0.0.0.0",
        8,
        "/m",
    )
    assert load(path, {"ADAPTIVESPEC_PORT": "7100"}, {"port": None}).port == 7100


def test_the_example_config_is_valid() -> None:
    config = load(Path(__file__).parents[1] / "ops" / "config.example.toml", {}, {})
    models = config.engine.models
    assert config.port == 8000 and models.target == DEFAULT_MODEL
    assert models.proposers == ("auto",)  # no draft given: the loader picks a cached head or ngram


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("prot = 1\n", {}, "unknown .* setting 'prot'; known: "),
        ("port = [\n", {}, "not valid TOML"),
        ("", {"ADAPTIVESPEC_PORT": "eighty"}, "expected int"),
        ('backend = "tpu"\n', {}, "backend must be one of"),
        ("", {"ADAPTIVESPEC_OVERLAP": "sideways"}, "overlap must be one of"),
        ('admin_token = "short"\n', {}, "at least 16 characters"),
        ('fleet = "maybe"\n', {}, "fleet must be one of"),
        ("fleet_refresh_seconds = 0\n", {}, "fleet_refresh_seconds must be > 0"),
        ('host_id = ""\n', {}, "host_id must be 1 to 256 characters"),
    ],
)
def test_bad_settings_name_the_problem(tmp_path: Path, text: str, env: dict[str, str], message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(path, env, {})


def test_an_empty_admin_token_means_none() -> None:
    """The shipped env file has `ADAPTIVESPEC_ADMIN_TOKEN=`: a fresh install must start, without a token."""
    config = load(None, {"ADAPTIVESPEC_ADMIN_TOKEN": ""}, {})
    assert config.admin_token is None
    with pytest.raises(ConfigError, match="16 characters"):
        load(None, {"ADAPTIVESPEC_ADMIN_TOKEN": "short"}, {})


def test_allowed_hosts_come_as_a_comma_list() -> None:
    config = load(None, {"ADAPTIVESPEC_ALLOWED_HOSTS": "gpu-7.internal, api.example.com"}, {})
    assert config.allowed_hosts == ("gpu-7.internal", "api.example.com")
    assert {"gpu-7.internal", "localhost", "127.0.0.1"} <= config.admin_host_names


def test_a_fleet_pools_on_postgresql_unless_told_otherwise() -> None:
    auto = load(None, {}, {})
    assert auto.pools_with_fleet("postgresql") and not auto.pools_with_fleet("sqlite")
    on = load(None, {"ADAPTIVESPEC_FLEET": "on", "ADAPTIVESPEC_HOST_ID": "gpu-7"}, {})
    assert on.pools_with_fleet("sqlite") and on.host_id == "gpu-7"
    assert not load(None, {}, {"fleet": "off"}).pools_with_fleet("postgresql")


def test_the_step_settings_default_to_packed_attention_and_no_compile() -> None:
    models = load(None, {}, {}).engine.models
    assert (models.attention, models.compile) == ("packed-gqa", "off")
    chosen = load(None, {"ADAPTIVESPEC_ATTENTION": "sdpa", "ADAPTIVESPEC_COMPILE": "on"}, {}).engine.models
    assert (chosen.attention, chosen.compile) == ("sdpa", "on")


@pytest.mark.parametrize(
    ("variable", "message"), [("ATTENTION", "attention must be"), ("COMPILE", "compile must")]
)
def test_bad_step_settings_name_the_key_and_the_choices(variable: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(None, {f"ADAPTIVESPEC_{variable}": "fast"}, {})


def test_the_example_config_names_every_key_with_its_default() -> None:
    """Every configuration key is in ops/config.example.toml (set to its default, or commented
    out where the default is "unset"), in the section it belongs to."""
    import dataclasses
    import re
    import tomllib

    from adaptivespec.config import EngineConfig, ModelConfig, ServeConfig

    text = (Path(__file__).parents[1] / "ops" / "config.example.toml").read_text()
    sections: dict[str, set[str]] = {"": set()}
    current = ""
    for line in text.splitlines():
        header = re.fullmatch(r"\[([a-z.]+)\]", line.strip())
        if header:
            current = header.group(1)
            sections[current] = set()
        key = re.match(r"#?\s?([a-z_]+) = ", line)
        if key:
            sections[current].add(key.group(1))
    expected = {
        "": ServeConfig,
        "engine": EngineConfig,
        "engine.models": ModelConfig,
    }
    for section, kind in expected.items():
        names = {f.name for f in dataclasses.fields(kind)} - {"engine", "models"}
        assert sections[section] == names, (section, names ^ sections[section])
    values = tomllib.loads(text)
    for section, kind in expected.items():
        table = values
        for part in filter(None, section.split(".")):
            table = table[part]
        fields = {f.name: f for f in dataclasses.fields(kind)}
        for name, value in table.items():
            if isinstance(value, dict):
                continue
            default = fields[name].default  # as declared: __post_init__ may resolve "auto"
            assert value == (list(default) if isinstance(default, tuple) else default), (section, name)


def test_bad_suffix_settings_are_refused_with_their_key() -> None:
    with pytest.raises(ConfigError, match="suffix_min_prob"):
        ModelConfig(suffix_min_prob=1.5)
    with pytest.raises(ConfigError, match="suffix_max_depth"):
        ModelConfig(suffix_max_depth=0)
    with pytest.raises(ConfigError, match="suffix_cached_requests"):
        ModelConfig(suffix_cached_requests=-1)


def test_several_drafters_come_comma_separated_and_resolve_once() -> None:
    both = ModelConfig(proposer="ngram, suffix")
    assert both.proposers == ("ngram", "suffix") and both.proposer == "ngram,suffix"
    assert ModelConfig(target="demo").proposers == ("draft",)  # auto: the demo's draft
    assert ModelConfig(target="demo", proposer="ngram,draft").draft == "demo"
    assert replace(both).proposers == both.proposers  # resolving is idempotent
    for bad, message in (
        ("ngram,ngram", "twice"),
        ("auto,ngram", "'auto' stands alone"),
        ("ngram,eagle", "one of"),
        ("ngram,draft", "needs a draft model"),
    ):
        with pytest.raises(ConfigError, match=message):
            ModelConfig(proposer=bad)
