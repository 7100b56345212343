from adaptivespec.controller.arms import Arm
from adaptivespec.controller.evidence import CellEvidence
from adaptivespec.controller.learning_settings import LearningSettings

SUFFIX_8 = Arm("suffix", 8)


def _verify(width: int) -> float:
    """A verify of `width` drafts a row: 10 ms, and 1 ms more for each draft."""
    return 0.010 + 0.001 * width


def test_an_arm_whose_drafter_often_finds_few_drafts_is_priced_at_its_typical_width() -> None:
    """Half its steps found 8 drafts, half found 1: the arm verifies 4.5 a row on average. Its
    step time was the lower quartile of its steps, that is, its narrowest steps' 11 ms, while
    its tokens count the wide steps' drafts too: it looked 1.3x as fast as it is."""
    evidence = CellEvidence(LearningSettings())
    for step in range(24):
        width = 8 if step % 2 else 1
        evidence.observe(SUFFIX_8, 3.0, _verify(width), _verify(width), width=width)
    assert abs(evidence.times()[SUFFIX_8].mean - _verify(4.5)) < 0.0005


def test_an_arm_that_always_verifies_its_k_is_priced_as_measured() -> None:
    """A draft model drafts K every step: nothing is moved, stalls and all."""
    evidence = CellEvidence(LearningSettings())
    times = [0.020, 0.021, 0.060, 0.019, 0.020, 0.022, 0.020, 0.058]
    for seconds in times:
        assert evidence.observe(Arm("draft", 4), 2.0, seconds, seconds - 0.005, width=4) == seconds
    assert evidence.times()[Arm("draft", 4)].mean == sorted(times)[1]


def test_an_arms_first_steps_are_priced_again_as_its_typical_width_moves() -> None:
    """Its first step found 1 draft, the next three 8: the arm typically verifies 6.25 a row
    (their mean), and every step, the first included, is priced there, at 16.25 ms. A step
    priced once, when it came, would have kept the first at 11 ms: the arm's figure (the
    least of so few steps) for as long as it stayed in the window."""
    evidence = CellEvidence(LearningSettings())
    for width in (1, 8, 8, 8):
        evidence.observe(SUFFIX_8, 3.0, _verify(width), _verify(width), width=width)
    assert abs(evidence.times()[SUFFIX_8].mean - _verify(6.25)) < 1e-9
