from adaptivespec.controller.verify_widths import VerifyWidths


def _measured(**by_width: list[float]) -> VerifyWidths:
    widths = VerifyWidths()
    for width, times in by_width.items():
        for seconds in times:
            widths.observe(int(width.removeprefix("w")), seconds)
    return widths


def test_a_width_between_the_measured_ones_is_interpolated_and_one_outside_held() -> None:
    widths = _measured(w0=[0.010] * 4, w4=[0.014] * 4, w8=[0.020] * 4)
    assert widths.seconds(2.0) == 0.012
    assert abs(widths.seconds(6.5) - 0.01775) < 1e-12  # type: ignore[operator]
    assert widths.seconds(12.0) == 0.020
    assert VerifyWidths().seconds(3.0) is None


def test_a_narrow_width_measured_slower_than_a_wider_one_met_a_stall() -> None:
    """Its steps all stalled (so even their lower quartile is slow): the wider width caps it,
    and a step there is not priced up to the typical width by the stall."""
    widths = _measured(w1=[0.030] * 4, w5=[0.016] * 4, w8=[0.020] * 4)
    assert widths.seconds(1.0) == 0.016
    assert widths.scale(1, 5.0) == 1.0


def test_a_step_is_scaled_to_its_arms_typical_width() -> None:
    widths = _measured(w0=[0.010] * 4, w8=[0.020] * 4)
    assert widths.scale(0, 4.0) == 1.5  # a plain step (nothing found) of an arm that drafts 4 on average
    assert widths.scale(8, 4.0) == 0.75
    assert widths.scale(8, 8.0) == 1.0
    assert VerifyWidths().scale(2, 5.0) == 1.0  # nothing measured: the step as it is


def test_a_mean_width_counts_at_the_nearest_whole_width_and_is_priced_where_it_lies() -> None:
    """Rows that verified their own drafts: a step of mean width 2.4 measures width 2, and a
    step of mean 6 is priced between the whole widths around it."""
    widths = VerifyWidths()
    for seconds in (0.014, 0.014, 0.014):
        widths.observe(2.4, seconds)
    for width, seconds in ((0, 0.010), (8, 0.018)):
        widths.observe(width, seconds)
    assert widths.seconds(2.0) == 0.014
    assert abs(widths.scale(6.0, 2.0) - 0.014 / (0.014 + 4 / 6 * 0.004)) < 1e-12
