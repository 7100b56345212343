"""Learned tables in vLLM's, TensorRT-LLM's and SGLang's formats, checked against their rules."""

from __future__ import annotations

import importlib.util
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from adaptivespec.cli import main
from adaptivespec.controller import exports
from adaptivespec.controller.buckets import BATCH_BUCKETS, CONTEXT_BUCKETS, Bucket
from adaptivespec.controller.controller import Controller
from adaptivespec.controller.exports import ExportError, KTable
from adaptivespec.sim import specs
from adaptivespec.sim.costmodel import StepCostModel
from adaptivespec.sim.loop import SimLoop
from adaptivespec.sim.workload import Phase, Range, Workload
from adaptivespec.store.repository import Store

SHORT = CONTEXT_BUCKETS[0]
ISSUE_TABLE = {"1": 4, "2": 4, "3-4": 4, "5-8": 4, "9-12": 4, "13-16": 4, "17-24": 1, "25-32": 1, "33-48": 1}
ISSUE_TABLE |= {"49-64": 1, "65-96": 0, "97-128": 0, "129-192": 0, "193-256": 0, "257-384": 0, "385-512": 0}


def _vllm_k(entries: list[list[int]], batch: int) -> int:
    """vLLM's documented lookup: the range holding the batch; a gap takes the previous K; past
    the last range, the last K."""
    k = entries[0][2]
    for lo, hi, value in entries:
        if batch < lo:
            return k
        k = value
        if batch <= hi:
            return k
    return k


def _trtllm_k(schedule: dict[str, int], batch: int) -> int:
    """TensorRT-LLM: the first upper bound >= the batch; above the largest key, K = 0."""
    for bound in sorted(int(key) for key in schedule):
        if batch <= bound:
            return schedule[str(bound)]
    return 0


def test_the_vllm_export_is_the_issue_example_with_its_method() -> None:
    config, notes = exports.vllm(KTable.from_labels(SHORT, ISSUE_TABLE), "smollm2-135m+ngram2-3:float32")
    assert config == {
        "method": "ngram",
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 3,
        "num_speculative_tokens": 4,
        "speculative_token_schedule": [[1, 16, 4], [17, 64, 1], [65, 512, 0]],
    }
    assert len(notes) == 1 and exports.RELEASED_FIELD in notes[0]  # how to export for vLLM 0.33.0
    released, _ = exports.vllm(KTable.from_labels(SHORT, ISSUE_TABLE), field=exports.RELEASED_FIELD)
    assert released[exports.RELEASED_FIELD] == config["speculative_token_schedule"]
    drafted, notes = exports.vllm(KTable.from_labels(SHORT, ISSUE_TABLE), "llama-8b+llama-1b:bf16")
    assert drafted["method"] == "draft_model" and drafted["model"] == "llama-1b" and "model" in notes[0]
    unknown, notes = exports.vllm(KTable.from_labels(SHORT, ISSUE_TABLE))
    assert "method" not in unknown and "method" in notes[0]


def _vllm_0_33() -> Any:
    """vLLM 0.33.0's own schedule module (`vllm/v1/spec_decode/dynamic/utils.py`, pure Python),
    which .ci/run extracts from the release's wheel; skipped where it is absent, unless
    ADAPTIVESPEC_REQUIRE_UPSTREAM is set (as CI sets it)."""
    path = os.environ.get("ADAPTIVESPEC_VLLM_SCHEDULE_MODULE")
    if not path or not Path(path).is_file():
        if os.environ.get("ADAPTIVESPEC_REQUIRE_UPSTREAM"):
            pytest.fail("ADAPTIVESPEC_VLLM_SCHEDULE_MODULE must point at vLLM's dynamic/utils.py")
        pytest.skip("vLLM's schedule module is not extracted here (.ci/run does it)")
    spec = importlib.util.spec_from_file_location("vllm_dynamic_sd_utils", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", range(30))
def test_vllms_own_parser_accepts_the_export_and_runs_the_learned_k(seed: int) -> None:
    upstream = _vllm_0_33()
    rng = random.Random(seed)
    visited = rng.sample(BATCH_BUCKETS[:14], rng.randint(1, 14))
    table = KTable.from_labels(SHORT, {b.label: rng.choice([0, 0, 1, 2, 4, 8]) for b in visited})
    config, _ = exports.vllm(table, field=exports.RELEASED_FIELD)
    schedule = config[exports.RELEASED_FIELD]
    upstream.validate_and_normalize_dynamic_sd_schedule(schedule)
    max_batch = BATCH_BUCKETS[13].hi + 64  # past the table too: the tail carries the last K
    dense = upstream.build_dynamic_sd_schedule_lookup(schedule, max_batch, config["num_speculative_tokens"])
    assert dense[1:] == [table.k_at(batch) for batch in range(1, max_batch + 1)]


def test_the_trtllm_export_runs_the_same_k_as_the_table_at_every_batch() -> None:
    table = KTable.from_labels(SHORT, ISSUE_TABLE)
    config, notes = exports.trtllm(table)
    schedule = config["draft_len_schedule"]
    assert isinstance(schedule, dict)
    assert schedule == {"16": 4, "64": 1} | {"1": 4} and notes == []
    assert config["max_draft_len"] == 4 == schedule["1"]  # TensorRT-LLM's own validator rules
    for batch in range(1, 1025):
        expected = next((r.k for r in table.ranges if r.lo <= batch <= r.hi), table.ranges[-1].k)
        assert _trtllm_k(schedule, batch) == expected


def test_trtllm_says_what_it_could_not_express() -> None:
    config, notes = exports.trtllm(KTable.from_labels(SHORT, {"1": 0, "2": 3, "3-4": 2, "5-8": 0}))
    assert config["draft_len_schedule"] == {"1": 3, "2": 3, "4": 2}  # batch 1 raised from 0 to 3
    assert len(notes) == 1 and "batch size 1" in notes[0]
    with pytest.raises(ExportError, match="never paid"):
        exports.trtllm(KTable.from_labels(SHORT, {"1": 0, "2": 0}))


def test_sglang_is_keyed_by_the_batch_size_each_tier_starts_at() -> None:
    config, notes = exports.sglang(KTable.from_labels(SHORT, ISSUE_TABLE))
    assert config == {
        "strategy": "ema",
        "1": {"candidate_steps": [4]},
        "17": {"candidate_steps": [1]},
        "65": {"candidate_steps": [0]},  # SGLang takes 0 as a step: speculation off
    }
    exports.check_sglang(config)
    assert "--speculative-num-steps 4" in notes[0]
    with pytest.raises(ExportError, match="keyed by batch size"):
        exports.check_sglang({"candidate_steps": [1, 4]})  # the flat form SGLang now refuses


@pytest.mark.parametrize("seed", range(40))
def test_random_tables_round_trip_through_vllms_rules(seed: int) -> None:
    rng = random.Random(seed)
    visited = rng.sample(BATCH_BUCKETS[:16], rng.randint(1, 16))
    table = KTable.from_labels(SHORT, {b.label: rng.choice([0, 0, 1, 2, 4, 8]) for b in visited})
    config, _ = exports.vllm(table)
    entries = config["speculative_token_schedule"]
    assert isinstance(entries, list)
    exports.check_vllm(entries, int(str(config["num_speculative_tokens"])))
    assert all(a[2] != b[2] for a, b in zip(entries, entries[1:], strict=False))  # adjacent K merged
    assert all(b[0] == a[1] + 1 for a, b in zip(entries, entries[1:], strict=False))  # contiguous
    for bucket in visited:  # every visited batch size runs its own bucket's K under vLLM's lookup
        own = next(r.k for r in table.ranges if r.lo <= bucket.lo <= r.hi)
        assert _vllm_k(entries, bucket.lo) == _vllm_k(entries, bucket.hi) == own
    if table.max_k == 0:
        return
    trt, _ = exports.trtllm(table)
    schedule = trt["draft_len_schedule"]
    assert isinstance(schedule, dict)
    for batch in range(2, BATCH_BUCKETS[-1].hi + 1):  # the formats agree (TRT raises batch 1 only)
        assert _trtllm_k(schedule, batch) == _vllm_k(entries, batch), batch


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ([[2, 8, 1]], "start at batch size 1"),
        ([[1, 8, 1], [8, 16, 0]], "overlaps"),
        ([[1, 8, 5]], "outside"),
        ([[1, 0, 1]], "start 1 > end 0"),
        ([[1, 8]], "not \\[start_bs"),
    ],
)
def test_the_vllm_rules_refuse_broken_tables(entries: list[list[int]], problem: str) -> None:
    with pytest.raises(ExportError, match=problem):
        exports.check_vllm(entries, 4)


def test_the_context_form_has_the_same_batch_ranges_in_every_context_bucket() -> None:
    tables = [
        KTable.from_labels(CONTEXT_BUCKETS[1], {"1": 2, "3-4": 0}),
        KTable.from_labels(SHORT, {"1": 4, "5-8": 1}),
    ]
    config, notes = exports.vllm_with_context(tables)
    entries = config["speculative_token_schedule"]
    assert entries == [
        [1, 2, 1, 512, 4],
        [3, 4, 1, 512, 4],
        [5, 8, 1, 512, 1],
        [1, 2, 513, 1024, 2],
        [3, 4, 513, 1024, 0],
        [5, 8, 513, 1024, 0],
    ]
    assert isinstance(entries, list)
    exports.check_vllm_with_context(entries, int(str(config["num_speculative_tokens"])))
    with pytest.raises(ExportError, match="same batch ranges"):  # what the old export produced
        exports.check_vllm_with_context([[1, 4, 1, 512, 4], [1, 16, 513, 1024, 2]], 4)


@pytest.mark.parametrize("seed", range(20))
def test_random_context_tables_keep_each_buckets_k(seed: int) -> None:
    rng = random.Random(seed)
    tables = []
    for ctx in rng.sample(CONTEXT_BUCKETS[:6], rng.randint(1, 4)):
        visited = rng.sample(BATCH_BUCKETS[:12], rng.randint(1, 12))
        tables.append(KTable.from_labels(ctx, {b.label: rng.choice([0, 1, 2, 4]) for b in visited}))
    config, _ = exports.vllm_with_context(tables)
    entries = config["speculative_token_schedule"]
    assert isinstance(entries, list)
    exports.check_vllm_with_context(entries, int(str(config["num_speculative_tokens"])))
    for table in tables:
        block = [[lo, hi, k] for lo, hi, c_lo, _, k in entries if c_lo == table.ctx.lo]
        for batch in range(1, BATCH_BUCKETS[11].hi + 1):
            assert _vllm_k(block, batch) == table.k_at(batch)


def test_unknown_buckets_and_empty_tables_are_refused() -> None:
    with pytest.raises(ExportError, match="unknown batch buckets"):
        KTable.from_labels(SHORT, {"7": 1})
    with pytest.raises(ExportError, match="nothing was learned"):
        KTable.from_labels(Bucket(1, 512), {})


def _learned_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/learned.db"
    cost = StepCostModel(specs.hardware("h100-sxm"), specs.model("llama-3.1-8b"), specs.model("llama-3.2-1b"))
    controller = Controller("pair", "sim:h100")
    phases = (Phase(1, 300), Phase(16, 300), Phase(256, 300))
    short = Workload(load=phases, prompt_len=Range(32, 128), output_len=Range(32, 256))  # context <= 512
    SimLoop(cost, short, 0, "pair", "sim:h100").run(controller.live, on_step=controller.ingest)
    store = Store(url)
    store.save(controller.export_state())
    store.close()
    return url


def test_the_cli_exports_a_learned_database_in_every_format(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    url = _learned_store(tmp_path)
    assert main(["thresholds", "--db", url, "--export", "vllm", "--ctx-bucket", "1-512"]) == 0
    captured = capsys.readouterr()
    vllm = json.loads(captured.out)
    exports.check_vllm(vllm["speculative_token_schedule"], vllm["num_speculative_tokens"])
    assert vllm["speculative_token_schedule"][-1][2] == 0  # off at batch 256
    assert 'add "method"' in captured.err  # this key ("pair") names no proposer: said, not guessed
    assert main(["thresholds", "--db", url, "--export", "trtllm"]) == 0
    assert "draft_len_schedule" in json.loads(capsys.readouterr().out)
    assert main(["thresholds", "--db", url, "--export", "sglang"]) == 0
    captured = capsys.readouterr()
    exports.check_sglang(json.loads(captured.out))
    assert "--speculative-adaptive-config" in captured.err
    assert main(["thresholds", "--db", url, "--export", "vllm", "--with-context"]) == 0
    assert json.loads(capsys.readouterr().out)["speculative_token_schedule"][0][2:4] == [1, 512]
    assert main(["thresholds", "--db", url, "--export", "vllm", "--ctx-bucket", "99"]) == 2
    assert "unknown context bucket '99'" in capsys.readouterr().err


def test_the_cli_exports_a_bench_control_report(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    report = tmp_path / "control.json"
    report.write_text(json.dumps({"policies": {"adaptive": {"k_by_bucket": ISSUE_TABLE}}}))
    assert main(["thresholds", "--from", str(report), "--export", "vllm"]) == 0
    assert json.loads(capsys.readouterr().out)["speculative_token_schedule"] == [
        [1, 16, 4],
        [17, 64, 1],
        [65, 512, 0],
    ]
    assert main(["thresholds", "--from", str(report), "--export", "trtllm"]) == 0
    assert json.loads(capsys.readouterr().out)["draft_len_schedule"] == {"1": 4, "16": 4, "64": 1}
    (tmp_path / "bad.json").write_text("{}")
    assert main(["thresholds", "--from", str(tmp_path / "bad.json"), "--export", "vllm"]) == 2
    assert "not a `bench control` JSON report" in capsys.readouterr().err


def test_a_drafter_in_the_model_key_gives_vllm_its_method() -> None:
    key = "smollm2+ngram2-3,suffix:float32"
    assert exports.method_keys(key, "ngram")[0] == {
        "method": "ngram",
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 3,
    }
    assert exports.method_keys(key, "suffix")[0] == {"method": "suffix"}
    assert exports.method_keys("smollm2+suffix:float32")[0] == {"method": "suffix"}
    assert exports.method_keys(key)[0] == {}  # two drafters and none named: said, not guessed
    assert exports.drafters_in(key) == ("ngram", "suffix") and exports.drafters_in("pair") == ()
    assert exports.drafters_in("demo+demo-draft:bfloat16") == ("draft",)


def test_an_eagle3_head_in_the_model_key_gives_vllm_method_eagle3() -> None:
    key = "smollm2+eagle3-0f3a9c,ngram2-3:float32"
    keys, notes = exports.method_keys(key, "eagle3")
    assert keys == {"method": "eagle3", "model": "eagle3-0f3a9c"}
    assert "directory" in notes[0]
    assert exports.drafters_in(key) == ("eagle3", "ngram")


def test_the_copy_drafter_exports_as_prompt_lookup_and_says_what_is_dropped() -> None:
    """vLLM has no per-row choice between prompt lookup and suffix decoding: the export keeps
    prompt lookup with the copy drafter's sizes, and its note names suffix for repetitive traffic."""
    key = "smollm2+eagle3-0f3a9c,copy1-3:float32"
    keys, notes = exports.method_keys(key, "copy")
    assert keys == {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    assert "suffix" in notes[0] and "per row" in notes[0]
    assert exports.drafters_in(key) == ("eagle3", "copy")
    capped = "smollm2+copy1-3u2:float32"  # a 1-gram match drafts at most 2: vLLM drafts K
    keys, notes = exports.method_keys(capped)
    assert keys == {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    assert "1-gram" in notes[1] and exports.drafters_in(capped) == ("copy",)
    assert "1-gram" in exports.method_keys("smollm2+ngram1-3u2:float32")[1][0]
