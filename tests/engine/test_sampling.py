from __future__ import annotations

import pytest
import torch

from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.errors import InvalidRequestError


@pytest.mark.parametrize("seed", [2**64, -1])
def test_seeds_outside_the_generator_range_are_refused(seed: int) -> None:
    with pytest.raises(InvalidRequestError, match=r"\[0, 2\^64\)"):
        SamplingParams(seed=seed)
    torch.Generator().manual_seed(2**64 - 1)  # the largest accepted seed is one torch takes
    assert SamplingParams(seed=2**64 - 1).seed == 2**64 - 1
