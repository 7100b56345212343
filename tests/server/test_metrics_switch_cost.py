from dataclasses import replace

from prometheus_client import generate_latest

from adaptivespec.engine.runner import ShadowScore
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.server.metrics import Metrics

STEP = StepTelemetry("m", "h", 8, 2, 300.0, 16, 10, 18, 0.004, 0.01, 0.014, 0.0, 2, (6, 4), method="draft")


def test_a_switch_shows_its_catch_up_by_the_arm_that_made_it() -> None:
    metrics = Metrics()
    metrics.observe(STEP)  # a drafting step in step with its drafter: no switch cost
    assert "catch_up_seconds_total{" not in generate_latest(metrics.registry).decode()
    metrics.observe(replace(STEP, catch_up_tokens=40, catch_up_seconds=0.003))
    metrics.observe(replace(STEP, k=4, catch_up_tokens=8, catch_up_seconds=0.001))
    metrics.observe(replace(STEP, method="eagle3", catch_up_tokens=5, catch_up_seconds=0.002))
    text = generate_latest(metrics.registry).decode()
    assert 'adaptivespec:spec_decode_catch_up_seconds_total{k="2",method="draft"} 0.003' in text
    assert 'adaptivespec:spec_decode_catch_up_tokens_total{k="2",method="draft"} 40.0' in text
    assert 'adaptivespec:spec_decode_catch_up_tokens_total{k="4",method="draft"} 8.0' in text
    assert 'adaptivespec:spec_decode_catch_up_tokens_total{k="2",method="eagle3"} 5.0' in text


def test_shadow_drafts_show_what_a_drafter_that_did_not_run_would_have_kept() -> None:
    metrics = Metrics()
    shadow = (ShadowScore("ngram", 4, 3, (2, 1, 1, 0)),)
    metrics.observe(replace(STEP, shadow=shadow))
    metrics.observe(replace(STEP, shadow=shadow))
    text = generate_latest(metrics.registry).decode()
    assert 'adaptivespec:spec_decode_shadow_rows_total{method="ngram"} 6.0' in text
    assert 'adaptivespec:spec_decode_shadow_kept_tokens_total{method="ngram"} 8.0' in text
