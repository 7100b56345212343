"""The target's passes run by OpenVINO: the `openvino` runtime behind the hf runner.

OpenVINO's PagedAttention takes the tokens of every sequence flattened, with each
sequence's past length, where its tokens start, and the cache blocks it owns. That is the
whole of what the runner asks of a target: a prompt chunk, a decode step, a verify of K + 1
tokens a row, or a step and prompt chunks together, are each one call. Each row owns a fixed
run of blocks, so a row's cache is its block list: a rejected draft is forgotten by feeding
the next tokens at the row's own length (the pass overwrites those columns), and moving a
row hands its blocks over instead of copying them.

Where an EAGLE-3 head drafts, the same call also returns the target's states at the head's
reading points for every token fed in, and they go into the head's tap at the row and column
each token wrote: what the torch runtime's hooks do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PretrainedConfig, PreTrainedModel

from adaptivespec.engine.cached_model import ForwardClock
from adaptivespec.engine.hidden_tap import HiddenTap
from adaptivespec.engine.host_memory import zeroed
from adaptivespec.engine.kvcache import CacheShape
from adaptivespec.engine.openvino_export import BLOCK_SIZE, paged_model
from adaptivespec.engine.openvino_inputs import PassInputs
from adaptivespec.engine.ragged import RaggedLayout
from adaptivespec.engine.segments import SegmentLayout

# The paged model's inputs besides the cache: what each pass sets.
PASS_INPUTS = (
    "input_ids",
    "position_ids",
    "past_lens",
    "subsequence_begins",
    "block_indices",
    "block_indices_begins",
    "max_context_len",
    "logits_indices",
)


class BlockTable:
    """Which cache blocks each row owns: row r's columns [32 j, 32 j + 32) live in block table[r, j]."""

    def __init__(self, rows: int, cache_len: int) -> None:
        self.per_row = -(-cache_len // BLOCK_SIZE)
        self.table = np.arange(rows * self.per_row, dtype=np.int32).reshape(rows, self.per_row)

    @property
    def blocks(self) -> int:
        return int(self.table.size)

    def move(self, srcs: list[int], dsts: list[int]) -> None:
        """Each row dst takes row src's blocks, all at once (a row may be both: compaction moves
        a row into a hole and the prompt being fed into that row's old place). The blocks of
        destinations that were not themselves moved go to the sources left behind, so that
        every block keeps exactly one owner."""
        old = self.table.copy()
        self.table[dsts] = old[srcs]
        moved_into, moved_from = set(dsts), set(srcs)
        vacated = [s for s in srcs if s not in moved_into]
        dropped = [d for d in dsts if d not in moved_from]
        self.table[vacated] = old[dropped]

    def of(self, rows: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The blocks rows need to hold columns [0, end): flattened, and where each row's begin."""
        counts = -(-ends // BLOCK_SIZE)
        indices = np.concatenate([self.table[r, :c] for r, c in zip(rows, counts, strict=True)])
        return indices.astype(np.int32), np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


class PagedCache:
    """The blocks' keys and values (f32), shared with OpenVINO without copies."""

    def __init__(self, shape: CacheShape, table: BlockTable) -> None:
        dims = (table.blocks, shape.kv_heads, BLOCK_SIZE, shape.head_dim)
        self.table = table
        self.arrays = {
            f"{kind}_cache.{layer}": zeroed(dims, torch.float32).numpy()
            for layer in range(shape.num_layers)
            for kind in ("key", "value")
        }

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in self.arrays.values())

    def move_rows(self, srcs: torch.Tensor, dsts: torch.Tensor, upto: int) -> None:
        self.table.move(srcs.tolist(), dsts.tolist())


class OpenVINOTarget:
    """What the hf runner asks of its target (cached_model.CachedModel's passes), on OpenVINO."""

    def __init__(
        self,
        model: PreTrainedModel,
        ir: Path,
        *,
        rows: int,
        cache_len: int,
        clock: ForwardClock,
        threads: int,
        tap: HiddenTap | None = None,
    ) -> None:
        """`tap`: where an EAGLE-3 head keeps the target's states at its reading points."""
        import openvino as ov

        config: PretrainedConfig = model.config
        self.model = model  # kept for what reads the model itself (embeddings, eos, benchmarks)
        self.device = torch.device("cpu")
        self.runtime = "openvino"
        self.clock = clock
        shape = CacheShape.from_config(config, rows, cache_len)
        self.cache = PagedCache(shape, BlockTable(rows, cache_len))
        properties: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
        if threads:
            properties["INFERENCE_NUM_THREADS"] = threads
        self.tap = tap
        states = () if tap is None else tap.layers
        compiled = ov.Core().compile_model(paged_model(ir, config, states), "CPU", properties)
        self.request = compiled.create_infer_request()
        for name, array in self.cache.arrays.items():
            self.request.set_tensor(name, ov.Tensor(array, shared_memory=True))
        # A pass's inputs go into buffers the request holds by port: `infer` handed a dict of
        # arrays looks each up by name and wraps it anew, a measurable part of a millisecond a
        # pass (docs/results.md).
        ports = {name: i for i, port in enumerate(compiled.inputs) for name in port.get_names()}
        self._inputs = PassInputs(self.request, {name: ports[name] for name in PASS_INPUTS})

    @property
    def runs_segments(self) -> bool:
        return True

    @property
    def skips_pads(self) -> bool:
        return True

    def forward(
        self,
        row_start: int,
        input_ids: torch.Tensor,
        layout: RaggedLayout,
        last_only: bool,
        step: bool = False,
        *,
        counts: np.ndarray | None = None,
    ) -> torch.Tensor:
        """input_ids [n, T] (a decode or verify pass) -> logits [n, 1 or T, V].

        `counts` [n]: the tokens of each row that matter. A verify whose rows found drafts of
        different lengths feeds each row those only (the sequences go in flattened anyway), and
        a row's positions past its count get its last counted token's logits."""
        n, width = input_ids.shape
        starts = layout.positions[:, 0].numpy()
        rows = np.arange(row_start, row_start + n)
        if counts is not None and not last_only and int(counts.sum()) < n * width:
            fed = np.arange(width) < counts[:, None]  # [n, T]
            flat = self._run(rows, starts, counts, input_ids.numpy()[fed], np.arange(int(counts.sum())))
            # [n, T] index of each position's logits in the flattened tokens, pads at the row's last
            ends = np.cumsum(counts)
            at = np.minimum(ends[:, None] - counts[:, None] + np.arange(width), ends[:, None] - 1)
            return flat[torch.from_numpy(at)]
        counts = np.full(n, width, dtype=np.int64)
        keep = np.arange(n * width)[width - 1 :: width] if last_only else np.arange(n * width)
        logits = self._run(rows, starts, counts, input_ids.numpy().ravel(), keep)
        return logits.reshape(n, 1 if last_only else width, -1)

    def forward_segments(self, ids: torch.Tensor, layout: SegmentLayout) -> torch.Tensor:
        """ids [1, T] laid out as `layout` says -> logits [B + chunks, V], each row's last token."""
        rows = layout.rows[0].numpy()
        firsts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
        counts = np.diff(np.concatenate([firsts, [len(rows)]]))
        starts = layout.cols[0].numpy()[firsts]
        return self._run(rows[firsts], starts, counts, ids[0].numpy(), layout.keep.numpy())

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> torch.Tensor:
        """Row row_start + r's chunk goes in at columns [starts[r], ...) -> each row's last logits [n, V]."""
        counts = np.array([len(chunk) for chunk in chunks], dtype=np.int64)
        ids = np.concatenate([np.asarray(chunk, dtype=np.int64) for chunk in chunks])
        rows = np.arange(row_start, row_start + len(chunks))
        return self._run(rows, np.asarray(starts, dtype=np.int64), counts, ids, np.cumsum(counts) - 1)

    def _run(
        self, rows: np.ndarray, starts: np.ndarray, counts: np.ndarray, ids: np.ndarray, keep: np.ndarray
    ) -> torch.Tensor:
        """Sequence i is row rows[i], its counts[i] tokens going in at columns from starts[i];
        `keep` indexes the flattened tokens whose logits come back ([len(keep), V])."""
        began = self.clock.mark()
        ends = starts + counts
        blocks, block_begins = self.cache.table.of(rows, ends)
        begins = np.concatenate([[0], np.cumsum(counts)])  # [n + 1] where each sequence's tokens start
        # Each token's position: its index in the flat tokens, shifted by its sequence's offset.
        positions = np.arange(begins[-1]) + np.repeat(starts - begins[:-1], counts)
        put = self._inputs.put
        put("input_ids", ids)
        put("position_ids", positions)
        put("past_lens", starts)
        put("subsequence_begins", begins)
        put("block_indices", blocks)
        put("block_indices_begins", block_begins)
        put("max_context_len", ends.max())
        put("logits_indices", keep)
        # The request's own output memory, not a copy: a pass's logits are read (sampled,
        # verified) before the next pass overwrites them.
        outputs = self.request.infer(share_outputs=True)
        logits = outputs[0]  # [len(keep), 1, V]
        if self.tap is not None:  # each state [tokens, 1, hidden], side by side as the tap keeps them
            states = np.concatenate([outputs[i + 1] for i in range(len(self.tap.layers))], axis=-1)
            self.tap.write(
                torch.from_numpy(np.repeat(rows, counts)),
                torch.from_numpy(positions),
                torch.from_numpy(states[:, 0]),
            )
        self.clock.add(began, self.clock.mark())
        return torch.from_numpy(logits[:, 0])
