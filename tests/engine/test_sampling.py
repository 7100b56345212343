from __future__ import annotations

import pytest
import torch

from adaptivespec.engine.sampling import SamplingParams, last_argmax
from adaptivespec.errors import InvalidRequestError


@pytest.mark.parametrize("seed", [2**64, -1])
def test_seeds_outside_the_generator_range_are_refused(seed: int) -> None:
    with pytest.raises(InvalidRequestError, match=r"\[0, 2\^64\)"):
        SamplingParams(seed=seed)
    torch.Generator().manual_seed(2**64 - 1)  # the largest accepted seed is one torch takes
    assert SamplingParams(seed=2**64 - 1).seed == 2**64 - 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_last_argmax_takes_what_torch_takes(dtype: torch.dtype) -> None:
    """The CPU float32 fast path and the fallback both give torch's ids: the first on a tie,
    over strided views too, as int64."""
    logits = torch.randn(4, 3, 97, generator=torch.Generator().manual_seed(0)).to(dtype)
    logits[1, 2, 5] = logits[1, 2, 60] = 50.0  # a tie: the first one wins
    logits[2, 0, :] = 0.0  # all equal: index 0
    for view in (logits, logits[:, 1:], logits[:, 0], logits.transpose(0, 1)):
        got = last_argmax(view)
        assert got.dtype == torch.int64
        assert torch.equal(got, view.argmax(dim=-1))
    assert last_argmax(logits)[1, 2] == 5
    with torch.inference_mode():
        inferred = torch.randn(2, 1, 11)
        assert torch.equal(last_argmax(inferred), inferred.argmax(dim=-1))
