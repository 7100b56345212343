from __future__ import annotations

import pytest
import torch

from adaptivespec.engine.host_memory import zeroed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_buffer_is_zeros_of_its_shape_and_takes_writes(dtype: torch.dtype) -> None:
    dims = (3, 4, 1024, 64)  # 3 MiB in f32, 1.5 MiB in 16 bits: above and below a huge page
    buffer = zeroed(dims, dtype)
    assert buffer.shape == dims and buffer.dtype == dtype and buffer.is_contiguous()
    assert not buffer.any()
    buffer[1, 0, 7] = 2.5
    assert buffer.sum().item() == pytest.approx(2.5 * 64)


def test_buffers_do_not_share_memory_and_outlive_their_maker() -> None:
    first, second = (zeroed((4, 1 << 20), torch.float32) for _ in range(2))  # 16 MiB each
    first.fill_(1.0)
    assert not second.any()
    view = first.numpy()  # what the openvino runtime hands OpenVINO
    view[0, 0] = 7.0
    assert first[0, 0].item() == 7.0


def test_an_empty_buffer() -> None:
    assert zeroed((0, 8), torch.float32).shape == (0, 8)
