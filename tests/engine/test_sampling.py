from __future__ import annotations

import pytest
import torch

from adaptivespec.engine.sampling import SamplingParams, sample_from
from adaptivespec.errors import InvalidRequestError


def test_a_zero_probability_token_is_never_drawn_even_at_u_zero() -> None:
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0]])
    for u in (0.0, 1e-12, 0.5, 0.999999):
        drawn = sample_from(probs, torch.full((2,), u))
        assert probs.gather(1, drawn.unsqueeze(1)).min() > 0, u
    assert sample_from(probs, torch.zeros(2)).tolist() == [1, 2]


@pytest.mark.parametrize("seed", [2**64, -1])
def test_seeds_outside_the_generator_range_are_refused(seed: int) -> None:
    with pytest.raises(InvalidRequestError, match=r"\[0, 2\^64\)"):
        SamplingParams(seed=seed)
    torch.Generator().manual_seed(2**64 - 1)  # the largest accepted seed is one torch takes
    assert SamplingParams(seed=2**64 - 1).seed == 2**64 - 1
