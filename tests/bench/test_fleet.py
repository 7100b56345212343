"""`bench fleet` on a real PostgreSQL: its shape and that every host's steps reached the database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptivespec.cli import main
from adaptivespec.store.fleet import FleetRepository
from adaptivespec.store.repository import Store


def test_bench_fleet_report_shape(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fleet.json"
    args = ["bench", "fleet", "--hosts", "3", "--db", postgres_url, "--hardware", "l4"]
    args += ["--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--steps-per-bucket", "40"]
    assert main([*args, "--refresh-seconds", "0.5", "--window", "10", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["hosts"] == 3 and report["window"] == 10
    assert set(report["lone"]) == {"steps_to_095", "ratio_to_oracle"}
    fleet = report["fleet"]
    assert len(fleet["steps_to_095_per_host"]) == 3 == len(report["lone_per_host"]["steps_to_095"])
    assert all(0 <= steps <= 14 * 40 for steps in fleet["steps_to_095_per_host"])
    levels = len(report["levels"])
    assert levels == 14 and report["levels"][0] == 1
    for per_host in (fleet, report["lone_per_host"]):  # each host's sum, split by load level
        by_level = per_host["steps_to_095_by_level"]
        assert [len(steps) for steps in by_level] == [levels] * 3
        summed = per_host.get("steps_to_095_per_host", per_host.get("steps_to_095"))
        assert [sum(steps) for steps in by_level] == summed
    assert 0.5 < fleet["ratio_to_oracle"] <= 1.05 and 0.5 < report["lone"]["ratio_to_oracle"] <= 1.05
    assert report["db_writes_per_s"] > 0 and report["db_rows_per_s"] >= report["db_writes_per_s"]
    assert report["refresh_latency_ms"] > 0 and report["flush_latency_ms"]["p99"] > 0
    worst, lone_steps = max(fleet["steps_to_095_per_host"]), report["lone_per_host"]["steps_to_095"]
    assert report["holds"] == (worst <= 0.5 * report["lone"]["steps_to_095"])
    assert report["holds_against_lone_mean"] == (worst <= 0.5 * sum(lone_steps) / len(lone_steps))
    assert "each host in at most half" in capsys.readouterr().out

    store = Store(postgres_url, migrate=False)
    hosts = [h for h in FleetRepository(store.engine).hosts() if h.model_key == report["run_key"]]
    store.close()
    assert sorted(h.host_id for h in hosts) == ["bench-host-0", "bench-host-1", "bench-host-2"]
    assert all(h.steps == 14 * 40 for h in hosts)  # every step of every host, flushed


def test_bench_fleet_hosts_can_join_one_after_another(tmp_path: Path, postgres_url: str) -> None:
    out = tmp_path / "join.json"
    args = [
        "bench",
        "fleet",
        "--hosts",
        "2",
        "--db",
        postgres_url,
        "--hardware",
        "h100-sxm",
        "--stagger",
        "join",
    ]
    args += [
        "--target",
        "llama-3.1-8b",
        "--draft",
        "llama-3.2-1b",
        "--steps-per-bucket",
        "30",
        "--window",
        "10",
    ]
    assert main([*args, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["stagger"] == "join" and len(report["fleet"]["steps_to_095_per_host"]) == 2
    store = Store(postgres_url, migrate=False)
    hosts = {h.host_id: h for h in FleetRepository(store.engine).hosts() if h.model_key == report["run_key"]}
    store.close()
    assert {h.steps for h in hosts.values()} == {14 * 30}  # the late host ran the whole schedule too


def test_bench_fleet_over_seeds_judges_the_means(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "seeds.json"
    args = ["bench", "fleet", "--hosts", "2", "--db", postgres_url, "--hardware", "l4", "--stagger", "none"]
    args += ["--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--steps-per-bucket", "20"]
    assert main([*args, "--window", "5", "--seeds", "3,4", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert report["seeds"] == [3, 4] and [run["scenario"]["seed"] for run in runs] == [3, 4]
    per_run = [run["fleet"]["steps_to_095_per_host"] for run in runs]
    assert report["fleet"]["steps_to_095_per_host"] == [(a + b) / 2 for a, b in zip(*per_run, strict=True)]
    lone = [steps for run in runs for steps in run["lone_per_host"]["steps_to_095"]]
    assert report["lone"]["steps_to_095"] == sum(lone) / len(lone)
    assert report["holds"] == all(r <= 0.5 for r in report["ratio_per_host"])
    assert "single runs where each host" in capsys.readouterr().out


@pytest.mark.parametrize("seeds", ["3", "3,3", "3,4,3"])
def test_bench_fleet_needs_two_different_seeds_to_judge_means(
    seeds: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "fleet", "--db", f"sqlite:///{tmp_path / 'f.db'}", "--hardware", "l4"]
    assert main([*args, "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--seeds", seeds]) == 2
    assert "--seeds needs two or more different seeds, each once" in capsys.readouterr().err
    assert not (tmp_path / "f.db").exists()  # refused before anything ran


def test_bench_fleet_runs_on_virtual_time_whatever_the_machines_speed(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which hosts are live, and when a flush or refresh lands, is read on the virtual clock:
    a database (or a machine) several times slower gives the very same learning."""
    import time

    args = ["bench", "fleet", "--hosts", "2", "--db", postgres_url, "--hardware", "l4", "--seed", "3"]
    args += ["--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--steps-per-bucket", "12"]
    args += ["--refresh-seconds", "0.5", "--window", "10"]

    def learned(name: str) -> dict[str, object]:
        out = tmp_path / name
        assert main([*args, "--json", str(out)]) == 0
        report = json.loads(out.read_text())
        return {key: report[key] for key in ("lone", "lone_per_host", "fleet", "holds")}

    quick = learned("quick.json")
    real_flush, real_pooled = FleetRepository.flush, FleetRepository.pooled

    def slow_flush(self: FleetRepository, *a: object, **k: object) -> int:
        time.sleep(0.004)
        return real_flush(self, *a, **k)  # type: ignore[arg-type]

    def slow_pooled(self: FleetRepository, *a: object, **k: object) -> object:
        time.sleep(0.004)
        return real_pooled(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(FleetRepository, "flush", slow_flush)
    monkeypatch.setattr(FleetRepository, "pooled", slow_pooled)
    assert learned("slow.json") == quick
    store = Store(postgres_url, migrate=False)
    hosts = [h for h in FleetRepository(store.engine).hosts() if h.host_id.startswith("bench-host")]
    store.close()
    assert hosts and all(h.last_flush_at.startswith("2026-01-01") for h in hosts)  # virtual seconds
