from __future__ import annotations

import pytest

from adaptivespec.engine.prefill_pacer import (
    FIRST_CHUNK,
    PACE,
    SMALLEST_CHUNK,
    STALL_STREAMS,
    PrefillCost,
    PrefillPacer,
)

FULL = STALL_STREAMS  # streams decoding: PACE's own case
PROMPT = 300  # a waiting prompt's tokens: only how many wait counts while streams decode


def _fed(pacer: PrefillPacer, sizes: list[int], fixed: float, per_token: float) -> None:
    for tokens in sizes:
        pacer.prefilled(tokens, fixed + per_token * tokens)


def test_a_step_prefills_what_fits_in_its_share_of_a_decode_step() -> None:
    pacer = PrefillPacer(ceiling=512)
    assert pacer.budget(decoding=0, queued=[PROMPT] * 3) == 512  # nothing to protect
    assert pacer.budget(decoding=FULL, queued=[PROMPT] * 1) == FIRST_CHUNK  # nothing measured yet
    pacer.decoded(0.200, FULL)
    _fed(pacer, [FIRST_CHUNK], fixed=0.05, per_token=0.002)  # one size seen, and it fits 20 shares
    assert pacer.budget(decoding=FULL, queued=[PROMPT] * 20) > FIRST_CHUNK  # so bigger chunks are tried
    _fed(pacer, [16, 64, 32, 128, 48, 96], fixed=0.05, per_token=0.002)  # 50 ms of weights, 2 ms a token
    pacer.decoded(0.200, FULL)
    fixed, per_token = pacer.cost.line()
    assert fixed == pytest.approx(0.05) and per_token == pytest.approx(0.002)
    assert (
        abs(pacer.budget(decoding=FULL, queued=[PROMPT] * 1) - (PACE * 0.200 - 0.05) / 0.002) <= 1
    )  # 35 tokens
    # A queue of prompts gets a larger share per step, up to the ceiling.
    assert abs(pacer.budget(decoding=FULL, queued=[PROMPT] * 3) - (3 * PACE * 0.200 - 0.05) / 0.002) <= 1
    assert pacer.budget(decoding=FULL, queued=[PROMPT] * 50) == 512


def test_until_two_sizes_are_seen_only_a_size_known_to_fit_is_trusted() -> None:
    cost = PrefillCost()
    for _ in range(5):
        cost.add(512, 1.0)  # a burst fed big chunks; a step's share is now much smaller
    assert cost.line() is None
    pacer = PrefillPacer(ceiling=512, cost=cost)
    pacer.decoded(0.130, FULL)
    assert (
        pacer.budget(decoding=FULL, queued=[PROMPT] * 1) == SMALLEST_CHUNK
    )  # a probe, not 512 / 1 s * 91 ms
    assert pacer.budget(decoding=FULL, queued=[PROMPT] * 20) == 512  # 20 shares of 91 ms: 512 tokens fit
    _fed(pacer, [SMALLEST_CHUNK], fixed=0.06, per_token=0.0018)
    line = pacer.cost.line()
    assert line is not None and line[1] > 0  # the probe gave the fit its second size


def test_a_cost_that_grows_faster_than_the_tokens_still_paces_by_its_slope() -> None:
    """Late chunks of a long prompt attend to more columns, so cost is convex in the tokens and
    the fitted line crosses zero above the origin: the pacer keeps the slope, not the floor."""
    pacer = PrefillPacer(ceiling=512)
    pacer.decoded(0.035, FULL)
    for tokens, seconds in ((162, 0.26), (327, 0.58), (235, 0.46), (182, 0.31)):
        pacer.prefilled_beside_step(tokens, 0.035 + seconds, FULL)
    fixed, per_token = pacer.beside_step.line()
    assert fixed == 0.0 and per_token > 0
    budget = pacer.budget(decoding=5, queued=[PROMPT] * 1, fused=True)
    shares = STALL_STREAMS / 5
    assert SMALLEST_CHUNK < budget <= PACE * shares * 0.035 / per_token + 1  # not a 16-token probe


def test_a_fixed_chunk_is_not_measured() -> None:
    pacer = PrefillPacer(ceiling=100, fixed=300)
    assert pacer.budget(decoding=FULL, queued=[PROMPT] * 1) == 100


def test_a_burst_paces_its_second_wave_from_what_the_first_cost() -> None:
    """The first wave is fed while nothing decodes; it is measured all the same."""
    blind, learned = PrefillPacer(ceiling=512), PrefillPacer(ceiling=512)
    learned.prefilled(512, 0.25)  # 16 prompts of 32 tokens into an idle engine
    for pacer in (blind, learned):
        pacer.decoded(0.036, 16)  # then those 16 streams decode
    assert blind.budget(decoding=FULL, queued=[PROMPT] * 16) == FIRST_CHUNK
    # 16 waiting prompts' shares are 0.40 s, and 512 tokens took 0.25 s: the rest goes in at once.
    assert learned.budget(decoding=FULL, queued=[PROMPT] * 16) == 512
    assert learned.budget(decoding=FULL, queued=[PROMPT] * 1) == SMALLEST_CHUNK  # one share: a probe


def test_chunks_inside_a_decode_step_are_paced_by_what_they_add_to_it() -> None:
    pacer = PrefillPacer(ceiling=512)
    pacer.decoded(0.100, FULL)
    _fed(pacer, [16, 64, 128], fixed=0.05, per_token=0.002)  # forwards of their own
    # Nothing measured inside a step yet: priced as a forward of its own (50 ms and 2 ms a
    # token), which can only cost more, so a chunk that fits alone fits beside a step.
    assert pacer.budget(decoding=FULL, queued=[PROMPT] * 4, fused=True) == pacer.budget(
        decoding=FULL, queued=[PROMPT] * 4
    )
    for tokens in (32, 96, 64, 160):  # a step of 100 ms that carried them: 0.4 ms a token more
        pacer.prefilled_beside_step(tokens, 0.100 + 0.0004 * tokens, FULL)
    fixed, per_token = pacer.beside_step.line()
    assert fixed == pytest.approx(0.0, abs=1e-9) and per_token == pytest.approx(0.0004)
    assert (
        abs(pacer.budget(decoding=FULL, queued=[PROMPT] * 1, fused=True) - PACE * 0.100 / 0.0004) <= 1
    )  # 175
    assert pacer.budget(decoding=FULL, queued=[PROMPT] * 1) == SMALLEST_CHUNK  # alone, 10 tokens would fit
    assert pacer.step_seconds == pytest.approx(0.100)  # the steps that carried chunks are not its measure


def test_fewer_streams_share_the_same_stall_and_the_prompt_goes_in_sooner() -> None:
    pacer = PrefillPacer(ceiling=4096)
    pacer.decoded(0.100, FULL)
    _fed(pacer, [16, 64, 32, 128], fixed=0.0, per_token=0.001)
    full = pacer.budget(decoding=FULL, queued=[PROMPT] * 1)
    assert abs(full - PACE * 0.100 / 0.001) <= 1  # 60 tokens: 60 ms of stall for each of 32 streams
    # A quarter of the streams: four times the stall each, the same stream-seconds in all.
    assert abs(pacer.budget(decoding=FULL // 4, queued=[PROMPT] * 1) - 4 * full) <= 2
    assert pacer.budget(decoding=1, queued=[PROMPT] * 1) == pytest.approx(
        STALL_STREAMS * full, abs=STALL_STREAMS
    )
    assert pacer.budget(decoding=2 * FULL, queued=[PROMPT] * 1) == full  # more streams than that: PACE holds


def test_a_light_load_is_allowed_the_stall_a_full_house_would_take_in_stream_seconds() -> None:
    """Three streams step in 30 ms where 32 would take 86 ms: their share is sized by the full
    house's step, read off the line through the batch sizes seen, not by their own."""
    pacer = PrefillPacer(ceiling=4096)
    for batch in (1, 2, 3, 4, 5, 6, 3):
        pacer.decoded(0.024 + 0.002 * batch, batch)  # a line: 24 ms of weights, 2 ms a stream
    _fed(pacer, [16, 64, 32, 128], fixed=0.0, per_token=0.001)
    assert pacer.steps.at(FULL) == pytest.approx(0.024 + 0.002 * FULL)
    shares = STALL_STREAMS / 3
    full_house = PACE * shares * (0.024 + 0.002 * FULL) / 0.001
    assert abs(pacer.budget(decoding=3, queued=[PROMPT] * 1) - full_house) <= 1  # 917 tokens, not ~350
    assert (
        pacer.budget(decoding=FULL, queued=[PROMPT] * 1) < full_house / shares + 1
    )  # a full house: its own step
    # One batch size alone gives no line: the full house is that step plus a token's forward
    # (the prefills' slope) for each stream more.
    alone = PrefillPacer(ceiling=4096)
    alone.decoded(0.030, 3)
    _fed(alone, [16, 64, 32, 128], fixed=0.0, per_token=0.001)
    extrapolated = 0.030 + 0.001 * (FULL - 3)
    assert abs(alone.budget(decoding=3, queued=[PROMPT] * 1) - PACE * shares * extrapolated / 0.001) <= 1
    # Nothing to extrapolate with yet: the recent steps' time.
    blind = PrefillPacer(ceiling=4096)
    blind.decoded(0.030, 3)
    blind.prefilled(64, 0.064)
    assert abs(blind.budget(decoding=3, queued=[PROMPT] * 1) - PACE * shares * 0.030 / 0.001) <= 1


def test_the_full_house_step_is_capped_by_the_streams() -> None:
    """A line steeper than any step with a fixed part (noise, or a slow speculative step at one
    size) does not size a stall beyond the recent step scaled by the streams."""
    pacer = PrefillPacer(ceiling=100_000)
    pacer.decoded(0.001, 1)
    pacer.decoded(0.050, 2)
    _fed(pacer, [16, 64, 32, 128], fixed=0.0, per_token=0.001)
    recent = pacer.step_seconds
    assert recent is not None
    shares = STALL_STREAMS / 2
    assert pacer.budget(decoding=2, queued=[PROMPT] * 1) <= PACE * shares * recent * shares / 0.001 + 1


def test_an_idle_step_feeds_a_prompt_apart_when_its_tokens_cost_more_than_a_forward() -> None:
    """Nothing decodes. Fed together, prompts reach their first token together; fed apart, the
    first sooner by the second's tokens and the second later by a forward's fixed part. So a
    prompt joins the forward only while its tokens cost at most that fixed part."""
    pacer = PrefillPacer(ceiling=512)
    assert pacer.budget(decoding=0, queued=[131, 200]) == 512  # nothing fitted yet: up to the ceiling
    _fed(pacer, [16, 64, 128, 256], fixed=0.020, per_token=0.0006)  # a CPU: 20 ms, 0.6 ms a token
    assert pacer.budget(decoding=0, queued=[131, 200]) == 131  # 200 tokens cost 120 ms > 20: the first alone
    assert pacer.budget(decoding=0, queued=[131, 30, 20, 200]) == 131 + 30 + 20  # 18 and 12 ms ride along
    assert pacer.budget(decoding=0, queued=[600, 10]) == 512  # the ceiling still bounds one prompt's chunk
    assert pacer.budget(decoding=0, queued=[]) == 512
    gpu = PrefillPacer(ceiling=512)
    _fed(gpu, [16, 64, 128, 256], fixed=0.012, per_token=0.00002)  # weights dominate
    assert gpu.budget(decoding=0, queued=[131, 200, 150]) == 481  # all together: 4 ms of tokens < 12 ms


def test_what_a_chunk_adds_is_measured_over_a_plain_step_of_the_same_batch() -> None:
    """Steps of 2 and 8 streams measured; a step of 8 that carried 100 tokens took 40 ms more
    than a plain step of 8, not 40 ms plus what the 6 streams more cost over a step of 2."""
    pacer = PrefillPacer(ceiling=512)
    pacer.decoded(0.020, 2)
    pacer.decoded(0.032, 8)  # the recent step, whatever its batch, is now between the two
    for tokens in (50, 100, 150):
        pacer.prefilled_beside_step(tokens, 0.032 + 0.0004 * tokens, 8)
    fixed, per_token = pacer.beside_step.line()
    assert fixed == pytest.approx(0.0, abs=1e-9) and per_token == pytest.approx(0.0004)
    # A batch not measured: the line through the step times by batch.
    pacer.prefilled_beside_step(200, 0.026 + 0.0004 * 200, 5)
    assert pacer.beside_step.line()[1] == pytest.approx(0.0004)


def test_before_two_chunk_sizes_are_seen_beside_a_step_their_cost_per_token_prices_any_size() -> None:
    """Chunks add nothing to a step with no tokens, so one size seen (a burst's 512-token
    chunks) prices a smaller chunk in proportion: no 16-token probe."""
    pacer = PrefillPacer(ceiling=512)
    pacer.decoded(0.030, 7)
    for _ in range(2):
        pacer.prefilled_beside_step(512, 0.030 + 0.300, 7)
    assert pacer.beside_step.line() is None
    per_token = 0.300 / 512
    # The full house extrapolated from the 7-stream step, a token's cost for each stream more.
    full_house = 0.030 + per_token * (STALL_STREAMS - 7)
    expected = PACE * 2 * STALL_STREAMS / 7 * full_house / per_token  # 418 tokens
    assert abs(pacer.budget(decoding=7, queued=[PROMPT] * 2, fused=True) - expected) <= 1
