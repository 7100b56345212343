"""Drafting with an EAGLE-3 head: the target's own hidden states, one small layer, a chain of K.

Head column c holds the pair (token c + 1, the target's states at column c), at rotary
position c + 1, as speculators trains it. A row of L tokens has had its first L - 1 through
the target, so the head can hold columns [0, L - 2]; it then drafts token L from column L - 2,
and each further draft from the previous one, feeding back its own output state. Draft
columns are never kept: verification brings the target's states for the tokens it accepts,
and the next step's first forward rewrites those columns with them, as vLLM's proposer does.

So a drafting step leaves a row behind by what it accepted plus the bonus token, which
the next first forward takes. A row that sat out K = 0 steps is further behind, and so is a
row whose prompt just went in: the head does not run on prompts as they are fed (the target's
states are kept for it all the same), so that a prompt, like a step at K = 0, costs nothing
where the controller keeps speculation off. Both are caught up when the head next drafts, in
forwards of their own, timed apart (`Proposal.catch_up`) and so charged to the arm that drafts.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from adaptivespec.engine.cached_model import ForwardClock
from adaptivespec.engine.eagle3_format import read_spec, read_weights
from adaptivespec.engine.eagle3_head import Eagle3Head, embedding_rows
from adaptivespec.engine.hidden_tap import HiddenTap
from adaptivespec.engine.kvcache import CacheShape, SlotKVCache
from adaptivespec.engine.packed_linear import can_pack, pack_linears
from adaptivespec.engine.proposers import CatchUp, Proposal
from adaptivespec.engine.ragged import RaggedLayout
from adaptivespec.engine.rows import RowState, upload
from adaptivespec.engine.sampling import BatchSampling, choices, last_argmax
from adaptivespec.errors import ModelLoadError

# A row missing more columns than this is caught up in a forward of its own (catch_up_groups).
ALONE = 16


class Eagle3Proposer:
    def __init__(
        self,
        head: Eagle3Head,
        target: PreTrainedModel,
        name: str,
        *,
        max_batch: int,
        cache_len: int,
        clock: ForwardClock,
    ) -> None:
        self.name = name
        self.method = "eagle3"
        self.full_width = True
        if head.spec.aux_layers is None:
            raise ValueError("the head's auxiliary layers must be resolved against the target")
        self.head = head
        self.embed = head.embedding(target)
        self.target_width = int(target.get_output_embeddings().weight.shape[0])
        param = next(head.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.cache = SlotKVCache(
            CacheShape.from_config(head.config, max_batch, cache_len), self.dtype, self.device
        )
        self.tap = HiddenTap(target, head.spec.aux_layers, max_batch, cache_len)
        self.clock = clock
        self.cached = np.zeros(max_batch, dtype=np.int64)  # [max_batch] head columns holding true pairs
        self.fresh = np.zeros(max_batch, dtype=np.int64)  # [max_batch] row length the head last kept up with

    @property
    def nbytes(self) -> int:
        return self.cache.nbytes + self.tap.nbytes

    @property
    def cache_len(self) -> int:
        return self.cache.shape.max_len

    def prefill(self, row_start: int, chunks: list[list[int]], starts: list[int]) -> None:
        """Nothing runs: a new request's row holds no head columns until it is caught up."""
        for r, start in enumerate(starts):
            if start == 0:
                self.cached[row_start + r] = 0
        self.fresh[row_start : row_start + len(chunks)] = 0  # behind: the next draft catches up

    def propose(self, rows: RowState, batch: int, k: int, sampling: BatchSampling) -> Proposal:
        lens = rows.host_lens[:batch]
        idle = bool((lens > self.fresh[:batch]).any())  # it sat out K = 0 steps
        caught_up = self._catch_up(rows, batch) if idle else None
        cached = self.cached[:batch]
        first = RaggedLayout.build(cached, lens - 1 - cached, self.cache_len, self.device)
        one = np.ones(batch, dtype=np.int64)
        steps = [RaggedLayout.build(lens - 1 + j, one, self.cache_len, self.device) for j in range(k - 1)]
        ids = rows.tokens[:batch].gather(1, first.gather_index + 1)  # token c + 1 beside column c
        state, logits = self._forward(0, ids, first, self.tap.read(self._rows(batch), first.cols))
        drafts: list[torch.Tensor] = []
        for j in range(k):
            drafts.append(token := self._choose(logits, sampling, j))
            if j + 1 < k:
                state, logits = self._forward(0, token.unsqueeze(1), steps[j], state=state)
        self.cached[:batch] = lens - 1
        n_drafts = torch.full((batch,), k, dtype=torch.long, device=self.device)
        return Proposal(torch.stack(drafts, dim=1), n_drafts, np.full(batch, k, dtype=np.int64), caught_up)

    def _choose(self, logits: torch.Tensor, sampling: BatchSampling, offset: int) -> torch.Tensor:
        """logits [B, 1, Vd] -> each row's draft [B], a target id: the argmax, or for sampled rows
        the draw under the noise the target will use at that position, over the target's ids."""
        if sampling.all_greedy:  # the maps keep the ids' order: no need to widen the logits
            return self.head.to_target_ids(last_argmax(logits[:, 0]))
        full = self.head.target_logits(logits, self.target_width)  # [B, 1, V]
        return choices(full, sampling, self.target_width, offset=offset)[:, 0]

    def _catch_up(self, rows: RowState, batch: int) -> CatchUp:
        """Every column a row missed but its last, which drafting's first forward takes as usual.
        A row far behind (a prompt) goes alone, the others together, so that no row rides as
        padding beside a whole prompt."""
        lens, cached = rows.host_lens[:batch], self.cached[:batch]
        missed = np.maximum(lens - 2 - cached, 0)
        began = self.clock.mark()
        for start, stop in catch_up_groups(missed):
            layout = RaggedLayout.build(cached[start:stop], missed[start:stop], self.cache_len, self.device)
            ids = rows.tokens[start:stop].gather(1, layout.gather_index + 1)
            aux = self.tap.read(self._rows(stop - start, start), layout.cols)
            self._forward(start, ids, layout, aux)
        ended = self.clock.mark()
        self.cached[:batch] = cached + missed
        return CatchUp(int(missed.sum()), began, ended)

    def _forward(
        self,
        row_start: int,
        ids: torch.Tensor,
        layout: RaggedLayout,
        aux: torch.Tensor | None = None,
        *,
        state: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [n, T] at the layout's columns, beside the target's states there (aux, or read from
        the tap for rows from row_start) or the head's own `state` [n, 1, hidden] -> the last
        position's state [n, 1, hidden] and draft logits [n, 1, Vd]."""
        began = self.clock.mark()
        if state is None:
            if aux is None:
                aux = self.tap.read(self._rows(ids.shape[0], row_start), layout.cols)
            state = self.head.fuse(aux)
        self.cache.bind(row_start, layout.cols, layout.read_len)
        out, logits = self.head(self.embed(ids), state, layout.positions + 1, layout.mask, self.cache)
        self.clock.add(began, self.clock.mark())
        return out[:, -1:], logits[:, -1:]

    def _rows(self, n: int, start: int = 0) -> torch.Tensor:
        return torch.arange(start, start + n, device=self.device).unsqueeze(1)  # [n, 1]

    def commit(self, batch: int, old_lens: np.ndarray, accepted: np.ndarray) -> None:
        self.fresh[:batch] = old_lens + accepted + 1

    def move_rows(self, srcs: list[int], dsts: list[int], upto: int) -> None:
        src, dst = upload(srcs, self.device), upload(dsts, self.device)
        self.cache.move_rows(src, dst, upto)
        self.tap.move_rows(src, dst, upto)
        self.cached[dsts] = self.cached[srcs]
        self.fresh[dsts] = self.fresh[srcs]

    def retire_rows(self, rows: RowState, indices: list[int]) -> None:
        return None  # it learns nothing across requests

    def forget(self) -> None:
        return None  # it learns nothing across requests

    def close(self) -> None:
        self.tap.close()  # the target's forwards stop keeping states for it


def catch_up_groups(missed: np.ndarray, alone: int = ALONE) -> list[tuple[int, int]]:
    """Runs of rows [start, stop) to catch up in one forward each: a row missing more than
    `alone` columns by itself, the rows between such rows together (padded to the longest of
    them), runs missing nothing left out."""
    groups: list[tuple[int, int]] = []
    start = 0
    for r, count in enumerate(missed.tolist()):
        if count > alone:
            groups += [(start, r), (r, r + 1)]
            start = r + 1
    groups.append((start, len(missed)))
    return [(a, b) for a, b in groups if b > a and missed[a:b].any()]


def load_head(path: str, target: PreTrainedModel, *, linear: str = "torch") -> Eagle3Head:
    """A speculators EAGLE-3 directory as a head for `target`, on its device and in its dtype;
    `linear` "packed" packs its linears for oneDNN on a CPU, as the target's are."""
    text = target.config.get_text_config()
    spec = read_spec(path).with_aux_layers(int(text.num_hidden_layers))
    hidden = int(spec.layer_config.get("hidden_size", -1))
    if hidden != int(text.hidden_size):
        raise ModelLoadError(
            f"the EAGLE-3 head in {path} is {hidden} wide but the target's hidden states are "
            f"{int(text.hidden_size)}: it was trained for another target"
        )
    vocab = int(spec.layer_config.get("vocab_size", -1))
    if vocab != embedding_rows(target):
        raise ModelLoadError(
            f"the EAGLE-3 head in {path} maps drafts into a vocabulary of {vocab} ids, the target "
            f"has {embedding_rows(target)}: it was trained for another target"
        )
    head = Eagle3Head(spec)
    head.load_weights(read_weights(path))
    param = next(target.parameters())
    head.to(device=param.device, dtype=param.dtype)
    head.eval()
    if linear == "packed" and can_pack(param.device, param.dtype):
        pack_linears(head)
    return head
