"""Shadow drafts: a cheap drafter that did not run drafts beside the one that did, and is scored
once the target's output covers its drafts; a step at K = 0 does no proposer work at all."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import torch

from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.proposers import NgramProposer
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.runner import PrefillItem, ShadowScore
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.shadow_drafts import ROWS_PER_STEP, ShadowDrafts

from ..conftest import TinyPair, engine_config

PROMPT = [5, 6, 7, 8, 5, 6]  # prompt lookup drafts 7, 8, 5, 6 after the last 5, 6


def _rows(*prompts: list[int]) -> RowState:
    rows = RowState.allocate(len(prompts), 64, torch.device("cpu"))
    for row, prompt in enumerate(prompts):
        rows.write_prompt(row, prompt)
    rows.set_lens(0, [len(p) for p in prompts])
    return rows


def _write(rows: RowState, row: int, tokens: list[int]) -> None:
    counts = np.zeros(rows.host_lens.shape[0], dtype=np.int64)
    new = np.zeros((len(counts), len(tokens)), dtype=np.int64)
    new[row], counts[row] = tokens, len(tokens)
    rows.append(0, new, counts)


def test_a_shadow_is_scored_once_the_output_covers_its_drafts() -> None:
    rows = _rows(PROMPT)
    shadow = ShadowDrafts([NgramProposer(3, 1)], horizon=4)
    shadow.draft(rows, 1, running="suffix")
    _write(rows, 0, [7, 8, 9])
    assert shadow.score(rows, 1) == ()  # the fourth position is not written yet
    _write(rows, 0, [1])
    # The output matched the first two drafts (7, 8), not the third (5 against 9).
    assert shadow.score(rows, 1) == (ShadowScore("ngram", 4, 1, (1, 1, 0, 0)),)
    assert shadow.score(rows, 1) == ()  # scored once


def test_the_running_drafter_is_not_shadowed() -> None:
    rows = _rows(PROMPT)
    shadow = ShadowDrafts([NgramProposer(3, 1)], horizon=2)
    shadow.draft(rows, 1, running="ngram")
    _write(rows, 0, [7, 8])
    assert shadow.score(rows, 1) == ()


def test_a_few_rows_a_step_take_turns_and_moves_carry_them() -> None:
    rows = _rows(*[PROMPT] * 6)
    shadow = ShadowDrafts([NgramProposer(3, 1)], horizon=1)
    shadow.draft(rows, 6, running="draft")  # rows 0-3
    shadow.draft(rows, 6, running="draft")  # rows 4, 5, then 0, 1 again
    for row in range(6):
        _write(rows, row, [7 if row % 2 == 0 else 1])
    shadow.forget_rows([1])  # a new request there: its shadows go
    shadow.move([5], [3])  # row 3 finished; row 5's request moves into it
    (score,) = shadow.score(rows, 5)
    # Scored: rows 0 (twice, kept), 2 (kept), 3 (row 5's shadow, missed), 4 (kept).
    assert ROWS_PER_STEP == 4 and score.rows == 5 and score.kept_at_least == (4,)


def test_the_runner_reports_the_other_drafters_shadows_and_none_at_k0(tiny_pair: TinyPair) -> None:
    config = engine_config(tiny_pair, "draft", max_spec_tokens=4)
    config = replace(config, models=replace(config.models, proposer="draft,ngram"))
    runner = load_runner(config, progress=False).runner
    prompts = [[3, 4, 5, 6, 3, 4, 5, 6, 3, 4], [9, 10, 11, 9, 10, 11, 9]]
    params = SamplingParams(max_tokens=64, temperature=0.0)
    runner.prefill(0, [PrefillItem(p, params, seed=0) for p in prompts])
    plain = [runner.decode(2, 0) for _ in range(6)]
    assert all(out.shadow == () for out in plain)
    drafting = [runner.decode(2, 2, "draft") for _ in range(8)]
    scores = [s for out in drafting for s in out.shadow]
    assert scores and {s.method for s in scores} == {"ngram"}
    assert all(s.k == 4 and len(s.kept_at_least) == 4 for s in scores)
    # Both rows drafted for at every step; a step writes at least a token a row, so the shadows
    # of the first three steps are scored within the run.
    assert sum(s.rows for s in scores) >= 2 * 3
    methods = Counter(out.method for out in drafting)
    assert methods == {"draft": 8}
