"""Large zeroed host buffers, on transparent huge pages where the kernel offers them, and
faulted in when they are made.

A KV cache of gigabytes allocated the usual way takes its page faults either when it is
zeroed (at load, one 4 KiB page at a time) or, if never written at load, inside the first
forwards that reach each page, where they stall the step that pays them. Asking for huge
pages (Linux's `madvise(MADV_HUGEPAGE)`; most distributions leave THP at "madvise") makes
the faults 512 times fewer, and writing the zeros here takes them all at load, off the
serving path. Where the call is missing or refused, the buffer is an ordinary one, still
written at load.
"""

from __future__ import annotations

import contextlib
import math
import mmap

import torch


def zeroed(dims: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of zeros, shaped `dims`, every page of it already mapped."""
    nbytes = math.prod(dims) * torch.empty(0, dtype=dtype).element_size()
    anonymous = getattr(mmap, "MAP_ANONYMOUS", None)
    if nbytes == 0 or anonymous is None:
        return torch.zeros(dims, dtype=dtype)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | anonymous)
    with contextlib.suppress(AttributeError, OSError):  # no THP here: ordinary pages
        region.madvise(mmap.MADV_HUGEPAGE)
    tensor = torch.frombuffer(region, dtype=dtype).view(dims)  # holds `region` open
    tensor.zero_()  # an anonymous page reads as zero already; the write maps it now
    return tensor
