"""train-draft keeps to its budget: the teacher stops at its share, training takes what is left,
and a resumed run follows the plan of the run it resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from adaptivespec.engine.eagle3_format import read_weights
from adaptivespec.train import head_trainer
from adaptivespec.train.budget import RESERVE, Budget, Plan
from adaptivespec.train.head_trainer import TrainSettings
from adaptivespec.train.train_draft import DataSettings, train_draft

from ..conftest import CORPUS, TinyPair

TIGHT = Budget(seconds=1e-3)  # past at once: one group, one epoch
LOOSE = Budget(seconds=1e6)  # never reached: every group, every epoch


def test_the_teacher_makes_a_group_only_while_its_share_holds_one_more() -> None:
    budget = Budget(seconds=100.0, teacher_share=0.5)
    assert budget.another_group_fits(spent=0.0, groups_made=0)  # the first, whatever it costs
    assert budget.another_group_fits(spent=25.0, groups_made=1)  # 25 + 25 <= 50
    assert not budget.another_group_fits(spent=26.0, groups_made=1)
    assert not Budget(seconds=1.0).another_group_fits(spent=5.0, groups_made=1)


def test_training_takes_the_rest_of_the_budget_within_its_bounds() -> None:
    budget = Budget(seconds=100.0)
    rest = int(100 * (1 - RESERVE)) - 40
    assert budget.training_steps(spent=40.0, step_seconds=1.0, least=5, most=1000) == rest
    assert budget.training_steps(spent=40.0, step_seconds=1.0, least=5, most=20) == 20
    assert budget.training_steps(spent=99.0, step_seconds=1.0, least=5, most=1000) == 5
    with pytest.raises(ValueError):
        Budget(seconds=0.0)
    with pytest.raises(ValueError):
        Budget(seconds=10.0, teacher_share=1.0)


def test_a_plan_is_kept_as_it_is_made(tmp_path: Path) -> None:
    plan = Plan(tmp_path / "plan.json")
    assert (plan.groups, plan.steps, plan.groups_made) == (None, None, 0)
    plan.made_group(2.5)
    plan.made_group(1.5)
    plan.close_teacher(2)
    plan.fix_steps(17)
    again = Plan(tmp_path / "plan.json")
    assert (again.teacher_seconds, again.groups_made, again.groups, again.steps) == (4.0, 2, 2, 17)


def _data(tmp_path: Path) -> DataSettings:
    text = tmp_path / "traffic.txt"
    text.write_text("".join(CORPUS[:4]))
    # 24 prompts in 3 groups of 8 (2 shards of 4 each)
    return DataSettings(prompts=24, new_tokens=8, batch=4, group=2, draft_vocab=200, text=text)


def _plan(out: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((out.with_name(out.name + ".work") / "plan.json").read_text())
    return loaded


def test_a_tight_budget_stops_the_teacher_and_trains_one_epoch(tiny_pair: TinyPair, tmp_path: Path) -> None:
    data, fit = _data(tmp_path), TrainSettings(epochs=3)
    tight = train_draft(str(tiny_pair.target), tmp_path / "tight", data, fit, progress=False, budget=TIGHT)
    loose = train_draft(str(tiny_pair.target), tmp_path / "loose", data, fit, progress=False, budget=LOOSE)
    assert (tight / "config.json").is_file() and (loose / "config.json").is_file()
    per_group = data.batch * data.group
    assert _plan(tight)["groups"] == 1 and _plan(loose)["groups"] == 3
    assert len(list((tmp_path / "tight.work").glob("shard-*.pt"))) == per_group // data.batch
    # one epoch of 8 sequences at 8 a batch; every epoch of 24 sequences
    assert _plan(tight)["steps"] == 1 and _plan(loose)["steps"] == 3 * 3


def test_a_resumed_run_follows_the_plan_it_resumes(
    tiny_pair: TinyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, fit = _data(tmp_path), TrainSettings(epochs=1, batch_sequences=2, checkpoint_seconds=0.0)
    whole = train_draft(str(tiny_pair.target), tmp_path / "whole", data, fit, progress=False, budget=TIGHT)

    real_step = head_trainer.HeadTrainer.train_step
    calls = {"n": 0}

    def interrupted(self: head_trainer.HeadTrainer, batch: object, total: int) -> dict[str, float]:
        calls["n"] += 1
        if calls["n"] == 6:  # four timed on a copy, then the head's second step
            raise KeyboardInterrupt
        return real_step(self, batch, total)  # type: ignore[arg-type]

    monkeypatch.setattr(head_trainer.HeadTrainer, "train_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_draft(str(tiny_pair.target), tmp_path / "resumed", data, fit, progress=False, budget=TIGHT)
    monkeypatch.setattr(head_trainer.HeadTrainer, "train_step", real_step)
    planned = _plan(tmp_path / "resumed")
    # resumed with a budget that would have made every group and step: the plan holds
    target = str(tiny_pair.target)
    resumed = train_draft(target, tmp_path / "resumed", data, fit, progress=False, budget=LOOSE)
    assert _plan(resumed) == planned and planned["groups"] == 1 and planned["steps"] == 4
    ours, theirs = read_weights(resumed), read_weights(whole)
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=1e-6, msg=name)


def test_training_re_paces_itself_at_its_own_pace(tiny_pair: TinyPair, tmp_path: Path) -> None:
    data, fit = _data(tmp_path), TrainSettings(epochs=8, batch_sequences=2)
    out = train_draft(str(tiny_pair.target), tmp_path / "paced", data, fit, progress=False, budget=LOOSE)
    plan = _plan(out)
    # 24 sequences, 12 steps an epoch: re-paced after 20 of 96, and the loose budget holds them all
    assert plan["repaced"] is True and plan["steps"] == 96
    tight = train_draft(str(tiny_pair.target), tmp_path / "tight", data, fit, progress=False, budget=TIGHT)
    assert _plan(tight)["repaced"] is False  # one epoch (4 steps): over before the re-pace
