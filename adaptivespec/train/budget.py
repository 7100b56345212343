"""train-draft's wall-clock budget, and the plan a run makes to keep to it.

The teacher's text and the training steps cost time that differs by CPU class (bf16
arithmetic or not): fixed amounts that fit the budget on one class overrun it on a slower
one. So the amounts are caps, and the budget decides within them:
- the teacher continues its prompts group by group and stops before a group that would
  take it past its share of the budget (at least one group is made);
- training then takes as many steps as the rest of the budget holds (at least one epoch, at
  most the epochs asked for): first at the pace of a few steps timed on a copy of the
  trainer, so that the learning-rate schedule has a length from its first step; then, a
  tenth of the way in, at the pace its own steps kept, checkpoints included (a copy's few
  steps read 15-30% off the run's pace: batches differ in width). The schedule is a cosine,
  so moving its end that early changes the rate by a few percent at most.

The plan is written to the work folder as it is made: a resumed run follows the plan of
the run it resumes and builds the head that run would have built.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path

from adaptivespec.train.head_trainer import HeadTrainer
from adaptivespec.train.teacher import Shard

TIMED_STEPS = 6  # training steps timed on a copy (the first one warms up and is not counted)
# Training re-paces itself after this share of its planned steps, and no fewer than this many.
REPACE_FRACTION, REPACE_LEAST = 0.1, 20
# What the budget keeps back from training for writing the head, loading and a slow step.
RESERVE = 0.05


@dataclass(frozen=True, slots=True)
class Budget:
    seconds: float  # the whole command's
    teacher_share: float = 0.6  # of the budget, at most, for writing and recording the teacher's text

    def __post_init__(self) -> None:
        if self.seconds <= 0 or not 0 < self.teacher_share < 1:
            raise ValueError(f"a budget needs positive seconds and a teacher share in (0, 1): {self}")

    def another_group_fits(self, spent: float, groups_made: int) -> bool:
        """Whether the teacher, `spent` seconds into `groups_made` groups, may make one more."""
        if groups_made == 0:
            return True
        return spent + spent / groups_made <= self.teacher_share * self.seconds

    def training_steps(self, spent: float, step_seconds: float, least: int, most: int) -> int:
        """The steps that fit in what `spent` seconds leave, within [least, most]."""
        left = self.seconds * (1 - RESERVE) - spent
        return max(least, min(most, int(left / max(step_seconds, 1e-9))))


class Plan:
    """What a run decided, kept in the work folder: the teacher's groups and time, training's steps."""

    def __init__(self, path: Path) -> None:
        self.path = path
        raw = json.loads(path.read_text()) if path.exists() else {}
        self.teacher_seconds: float = float(raw.get("teacher_seconds", 0.0))
        self.groups_made: int = int(raw.get("groups_made", 0))  # groups this plan timed
        self.groups: int | None = raw.get("groups")  # the teacher's last word: groups it made in all
        self.steps: int | None = raw.get("steps")  # training's steps, first fixed before its first
        self.repaced: bool = bool(raw.get("repaced", False))  # ... and fixed again at its own pace

    def made_group(self, seconds: float) -> None:
        self.teacher_seconds += seconds
        self.groups_made += 1
        self._save()

    def close_teacher(self, groups: int) -> None:
        self.groups = groups
        self._save()

    def fix_steps(self, steps: int, repaced: bool = False) -> None:
        self.steps = steps
        self.repaced = repaced
        self._save()

    def _save(self) -> None:
        staging = self.path.with_suffix(".partial")
        staging.write_text(
            json.dumps(
                {
                    "teacher_seconds": self.teacher_seconds,
                    "groups_made": self.groups_made,
                    "groups": self.groups,
                    "steps": self.steps,
                    "repaced": self.repaced,
                }
            )
        )
        staging.rename(self.path)


def repace_after(steps: int) -> int:
    """The step after which training re-paces itself, of a plan of `steps`."""
    return max(REPACE_LEAST, int(REPACE_FRACTION * steps))


def seconds_per_step(trainer: HeadTrainer, shards: list[Shard]) -> float:
    """A training step's seconds, timed on a copy of the trainer (the head itself is untouched).
    Only a first guess: batches differ in width, and the run re-paces itself at its own steps'."""
    trial = copy.deepcopy(trainer)
    total = trainer.total_steps(shards)
    times = []
    for batch, _ in zip(trainer.batches(shards, epoch=0), range(TIMED_STEPS), strict=False):
        began = time.perf_counter()
        trial.train_step(batch, total)
        times.append(time.perf_counter() - began)
    counted = times[1:] or times  # the first step warms up
    return sum(counted) / len(counted)
