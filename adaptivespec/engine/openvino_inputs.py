"""The arrays an OpenVINO request reads its inputs from, owned for the request's whole life.

Each input is a buffer of ours with an `ov.Tensor` over it, handed to the request once: a pass
writes its values into the buffer's front and sets the tensor's shape to them. Against a fresh
array and tensor handed over every pass, that is fewer objects made on the host between two
forwards, when the forward has just left the caches cold and each small operation costs several
times what it does alone (docs/results.md). And the request never points at memory that is gone:
a fresh tensor over a temporary array leaves the request holding that array's address after the
pass returns.

A pass longer than a buffer grows it (twice over, at least), and the request is handed the new
tensor; so a buffer is as long as the longest pass so far.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class PassInputs:
    def __init__(self, request: Any, ports: dict[str, int]) -> None:
        """`ports`: the index on the request of each input a pass sets. Each buffer takes its
        input's element type and rank from the model: 0-d for a scalar, 1-d otherwise."""
        import openvino as ov

        self._request = request
        self._ports = ports
        self._tensor = ov.Tensor
        self._buffers: dict[str, np.ndarray] = {}
        self._tensors: dict[str, Any] = {}
        for name, index in ports.items():
            port = request.model_inputs[index]
            dtype = port.get_element_type().to_dtype()
            scalar = port.get_partial_shape().rank.get_length() == 0
            self._bind(name, np.zeros((), dtype) if scalar else np.zeros(64, dtype))

    def put(self, name: str, values: np.ndarray) -> None:
        """The next pass reads `values` for input `name` (a 1-d array, or a scalar's 0-d one)."""
        buffer = self._buffers[name]
        if buffer.ndim == 0:
            buffer[()] = values
            return
        n = len(values)
        if n > len(buffer):
            buffer = np.zeros(max(n, 2 * len(buffer)), buffer.dtype)
            self._bind(name, buffer)
        buffer[:n] = values
        self._tensors[name].set_shape([n])

    def _bind(self, name: str, buffer: np.ndarray) -> None:
        tensor = self._tensor(buffer, shared_memory=True)
        self._request.set_input_tensor(self._ports[name], tensor)
        self._buffers[name] = buffer
        self._tensors[name] = tensor
