"""The `hf` runner: batched speculative decoding on transformers models.

One decode step is: propose K drafts per row, verify [last token + drafts] in ONE target
forward over the whole batch, accept per row, append. Each row writes its KV at its own
columns, so ragged acceptance needs no rollback beyond forgetting the rejected columns.
A drafting step also has the cheap drafters that did not run draft for a few rows, to be
scored against the output later (shadow_drafts.py); a step at K = 0 touches no drafter.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import cast

import numpy as np
import torch
from transformers import PreTrainedModel

from adaptivespec.engine.cached_model import CachedModel, ForwardClock
from adaptivespec.engine.packed_linear import packed_layers
from adaptivespec.engine.proposers import Proposal, Proposer
from adaptivespec.engine.ragged import RaggedLayout
from adaptivespec.engine.row_sampling import RowSampling
from adaptivespec.engine.rows import RowState, upload
from adaptivespec.engine.runner import DecodeOutput, PrefillItem, PrefillOutput
from adaptivespec.engine.sampling import BatchSampling, SamplingParams, next_tokens
from adaptivespec.engine.segments import SegmentLayout
from adaptivespec.engine.shadow_drafts import HostDrafter, ShadowDrafts
from adaptivespec.engine.target_passes import TargetPasses
from adaptivespec.engine.thread_governor import ThreadGovernor
from adaptivespec.engine.verification import verify

WARM_UP = SamplingParams(max_tokens=4, temperature=0.0)


class HFRunner:
    def __init__(
        self,
        target: PreTrainedModel,
        proposers: Sequence[Proposer],
        *,
        max_batch: int,
        max_context: int,
        max_spec_tokens: int,
        eos_token_ids: frozenset[int],
        model_key: str,
        hardware_key: str,
        clock: ForwardClock,
        threads: ThreadGovernor | None = None,
        passes: TargetPasses | None = None,
    ) -> None:
        """`passes`: how the target's forwards run (openvino_target.py); None: with torch, on
        the slot cache (cached_model.py)."""
        # The drafters by method, in the order given: the first drafts when a step names none.
        self.proposers = {proposer.method: proposer for proposer in proposers}
        if len(self.proposers) != len(proposers):
            raise ValueError(f"two drafters of one method: {[p.method for p in proposers]}")
        self.methods = tuple(self.proposers)
        self.max_batch = max_batch
        self.max_spec_tokens = max_spec_tokens if proposers else 0
        self.eos_token_ids = eos_token_ids
        self.model_key = model_key
        self.hardware_key = hardware_key
        self.clock = clock
        # Resizes torch's team to the CPUs other processes leave free (None: the count is pinned).
        self.threads = threads
        # Verify writes up to column len-1+K; the last column is the pad sink (see ragged.py).
        self.cache_len = max_context + max_spec_tokens + 1
        self.cached: CachedModel | None = None  # the torch runtime's target, when it runs
        self.target: TargetPasses
        if passes is None:
            self.target = self.cached = CachedModel(target, max_batch, self.cache_len, clock)
        else:
            self.target = passes
        self.runtime = self.target.runtime  # "torch" or "openvino"
        self.vocab_rows = int(cast(torch.nn.Embedding, target.get_input_embeddings()).num_embeddings)
        self.device = self.target.device
        self.rows = RowState.allocate(max_batch, self.cache_len, self.device)
        self.row_sampling = RowSampling(max_batch, self.device)
        # The cheap drafters also draft beside the one a step runs, scored later (shadow_drafts.py).
        host_drafters = [p for p in proposers if isinstance(p, HostDrafter)]
        self.shadow = ShadowDrafts(host_drafters, self.max_spec_tokens)

    @property
    def models(self) -> list[PreTrainedModel]:
        """The transformers models the step runs: the target, then any draft models."""
        drafts = [cached.model for cached in self._cached_models() if cached is not self.cached]
        return [self.target.model, *drafts]

    def compile(self) -> None:
        """Compiles the step's passes, then runs each once on throwaway rows.

        Each compiled graph costs tens of seconds on a small CPU, so all of them are built
        here, before serving, rather than inside some request's step.
        """
        for cached in self._cached_models():
            cached.compile()
        for batch in sorted({1, min(2, self.max_batch)}):  # dynamo specializes batch 1 only
            self._warm_up(batch)

    def run_compiled(self, on: bool) -> None:
        """Switches between the compiled passes and the eager ones (side-by-side benchmarks)."""
        for cached in self._cached_models():
            if cached.compiled is not None:
                cached.compiled.enabled = on

    def _cached_models(self) -> list[CachedModel]:
        drafts = [getattr(proposer, "draft", None) for proposer in self.proposers.values()]
        own = [] if self.cached is None else [self.cached]
        return own + [draft for draft in drafts if isinstance(draft, CachedModel)]

    @torch.inference_mode()
    def _warm_up(self, batch: int) -> None:
        prompt = list(range(1, 9))
        self.prefill(0, [PrefillItem(prompt, WARM_UP, seed=0)] * batch)
        self.decode(batch, 0)  # the target: one token per row
        if self.max_spec_tokens == 0:
            return
        # After a K = 0 step each draft catches up by two tokens, then drafts one at a time.
        for method in self.methods:
            self.decode(batch, min(2, self.max_spec_tokens), method)
        # The target's verify pass, whatever the drafter found for this text.
        drafts = self.rows.last_tokens(batch).expand(batch, 2)
        n_drafts = np.full(batch, 2, dtype=np.int64)
        proposal = Proposal(drafts, upload(n_drafts, self.device), n_drafts)
        self._verify(batch, proposal, self._sampling(slice(0, batch)), None)

    @property
    def kv_bytes(self) -> int:
        return self.target.cache.nbytes + sum(proposer.nbytes for proposer in self.proposers.values())

    def describe(self) -> str:
        forwards = (
            f"{packed_layers(self.models)} linear layers packed for oneDNN"
            if self.cached is not None
            else "the target's forwards on OpenVINO (paged attention)"
        )
        return (
            f"hf runner on {self.hardware_key}: KV cache preallocated for {self.max_batch} rows x "
            f"{self.cache_len} positions = {self.kv_bytes / 2**20:.1f} MiB; {forwards}"
        )

    @torch.inference_mode()
    def prefill(self, row_start: int, items: list[PrefillItem]) -> PrefillOutput:
        self._settle_threads()
        began = time.perf_counter()
        chunks, starts = [item.chunk for item in items], [item.start for item in items]
        done = self._open_rows(row_start, items)
        logits = self.target.prefill(row_start, chunks, starts)  # [n, V]
        for proposer in self.proposers.values():
            proposer.prefill(row_start, chunks, starts)
        tokens: list[int] = []
        if done:
            ends = np.array([item.stop for item in items[:done]], dtype=np.int64)
            first = next_tokens(logits[:done], self._sampling(slice(row_start, row_start + done), ends))
            tokens = first.tolist()  # the prefill's one read of the device
        first_tokens = self._close_rows(row_start, items, tokens)
        self.clock.settle()
        return PrefillOutput(first_tokens, time.perf_counter() - began)

    @property
    def fuses_prompts(self) -> bool:
        return self.target.runs_segments

    @torch.inference_mode()
    def decode_with_prompts(self, batch: int, items: list[PrefillItem]) -> tuple[DecodeOutput, PrefillOutput]:
        """A plain step over rows [0, batch) and the items' chunks into rows batch, batch + 1, ...,
        in one forward of the target (segments.py). The tokens are those of `prefill` into those
        rows followed by `decode(batch, 0)` over the rows before them."""
        self._settle_threads()
        began = time.perf_counter()
        done = self._open_rows(batch, items)
        starts = np.array([item.start for item in items], dtype=np.int64)
        counts = np.array([item.stop - item.start for item in items], dtype=np.int64)
        layout = SegmentLayout.build(self.rows.host_lens[:batch], starts, counts, self.device)
        chunks = [item.chunk for item in items]
        ids = torch.cat([self.rows.last_tokens(batch)[:, 0], upload(np.concatenate(chunks), self.device)])
        logits = self.target.forward_segments(ids.unsqueeze(0), layout)  # [batch + chunks, V]
        for proposer in self.proposers.values():
            proposer.prefill(batch, chunks, starts.tolist())
        decoded = next_tokens(logits[:batch], self._sampling(slice(0, batch)))  # [batch]
        ends = np.array([item.stop for item in items[:done]], dtype=np.int64)
        first = next_tokens(logits[batch : batch + done], self._sampling(slice(batch, batch + done), ends))
        read = torch.cat([decoded, first]).tolist()  # the step's one read of the device
        self._append_one(0, read[:batch])
        first_tokens = self._close_rows(batch, items, read[batch:])
        self.clock.settle()
        seconds = time.perf_counter() - began
        step = DecodeOutput(
            [[t] for t in read[:batch]], [0] * batch, [0] * batch, 0, "", 0, 0.0, seconds, seconds
        )
        return step, PrefillOutput(first_tokens, seconds)

    def _open_rows(self, row_start: int, items: list[PrefillItem]) -> int:
        """Rows whose prompt completes now get its tokens and sampling; returns how many
        (the first ones: only the last item may stop short)."""
        self.shadow.forget_rows(range(row_start, row_start + len(items)))
        self._retire([row_start + r for r, item in enumerate(items) if item.start == 0])
        done = 0
        for r, item in enumerate(items):
            if item.completes:
                self.rows.write_prompt(row_start + r, item.prompt)
                self.row_sampling.set(row_start + r, item)
                done += 1
        return done

    def _close_rows(self, row_start: int, items: list[PrefillItem], first: list[int]) -> list[int | None]:
        """After the chunks went in: what each row's cache holds, and the completed rows' first
        tokens appended; returns each item's first token, None where its prompt goes on."""
        self.rows.set_lens(row_start, [item.stop for item in items])
        if first:
            self._append_one(row_start, first)
        return [*first, *[None] * (len(items) - len(first))]

    def _append_one(self, row_start: int, tokens: list[int]) -> None:
        n = len(tokens)
        self.rows.append(row_start, np.asarray(tokens, dtype=np.int64)[:, None], np.ones(n, np.int64))

    @torch.inference_mode()
    def decode(self, batch: int, k: int, method: str | None = None) -> DecodeOutput:
        self._settle_threads()
        shadow = self.shadow.score(self.rows, batch)  # bookkeeping of earlier steps: not this step's time
        began, began_mark = time.perf_counter(), self.clock.mark()
        sampling = self._sampling(slice(0, batch))
        old_lens = self.rows.host_lens[:batch].copy()
        k = min(k, self.max_spec_tokens)
        proposer = self._proposer(method) if k > 0 else None
        # Built before the drafter's forwards, with its layouts (see DraftModelProposer.propose).
        ahead = proposer is not None and proposer.full_width
        verify_layout = self._verify_layout(batch, k + 1) if ahead else None
        proposal = self._propose(proposer, batch, k, sampling)
        if proposer is not None:  # the drafting arm's time: a step at K = 0 does no proposer work
            self.shadow.draft(self.rows, batch, proposer.method)
        drafted_mark = self.clock.mark()
        if proposal is None:
            host_tokens, accepted = self._plain_step(batch, sampling)
        else:
            host_tokens, accepted = self._verify(batch, proposal, sampling, verify_layout)
        kept = accepted.tolist()
        emitted = [row[: a + 1] for row, a in zip(host_tokens.tolist(), kept, strict=True)]
        self.rows.append(0, host_tokens, accepted + 1)
        if proposal is not None and proposer is not None:
            proposer.commit(batch, old_lens, accepted)
        self.clock.settle()
        step_seconds = time.perf_counter() - began
        draft_seconds = self.clock.between(began_mark, drafted_mark)
        catch_up = None if proposal is None else proposal.catch_up
        return DecodeOutput(
            tokens=emitted,
            drafted=[0] * batch if proposal is None else proposal.host_n_drafts.tolist(),
            accepted=kept,
            k=k,
            method="" if proposer is None else proposer.method,
            width=0 if proposal is None else proposal.drafts.shape[1],
            verified_width=self._verified_width(proposal),
            draft_seconds=draft_seconds,
            verify_seconds=step_seconds - draft_seconds,
            step_seconds=step_seconds,
            catch_up_tokens=0 if catch_up is None else catch_up.tokens,
            catch_up_seconds=0.0 if catch_up is None else self.clock.between(catch_up.began, catch_up.ended),
            shadow=shadow,
        )

    def move_rows(self, srcs: list[int], dsts: list[int]) -> None:
        if not srcs:
            return
        upto = int(self.rows.host_lens[srcs].max())
        self._retire([dst for dst in dsts if dst not in srcs])  # holes: their requests are over
        src, dst = upload(srcs, self.device), upload(dsts, self.device)
        self.target.cache.move_rows(src, dst, upto)
        self.rows.move(srcs, dsts)
        for proposer in self.proposers.values():
            proposer.move_rows(srcs, dsts, upto)
        self.shadow.move(srcs, dsts)
        self.row_sampling.move(srcs, dsts, src, dst)

    def _retire(self, rows: list[int]) -> None:
        """Before these rows take other requests: the drafters see what the ended ones wrote."""
        if rows:
            for proposer in self.proposers.values():
                proposer.retire_rows(self.rows, rows)

    def forget_history(self) -> None:
        """The drafter forgets earlier requests (benchmarks replaying them to each contender);
        the rows must be prefilled again before the next step."""
        for proposer in self.proposers.values():
            proposer.forget()
        self.shadow.forget()

    def close(self) -> None:
        """Done with this runner: its drafters let go of the target (another runner may share it)."""
        for proposer in self.proposers.values():
            proposer.close()

    def _settle_threads(self) -> None:
        # Outside the step's time: a resize is the machine's doing, not the arm's.
        if self.threads is not None:
            self.threads.settle()

    def _proposer(self, method: str | None) -> Proposer | None:
        """The drafter a step names (None: the first); a drafter this runner lacks is an error
        of the caller's, never a silent plain step."""
        if method is None:
            return next(iter(self.proposers.values()), None)
        proposer = self.proposers.get(method)
        if proposer is None:
            raise ValueError(f"no {method!r} drafter here; this runner drafts with {self.methods}")
        return proposer

    def _propose(
        self, proposer: Proposer | None, batch: int, k: int, sampling: BatchSampling
    ) -> Proposal | None:
        if proposer is None:
            return None  # K = 0 never touches a drafter; nor does a step another one drafts
        proposal = proposer.propose(self.rows, batch, k, sampling)
        width = int(proposal.host_n_drafts.max())
        if width == 0:
            return None
        if width < k:
            drafts = proposal.drafts[:, :width]
            proposal = Proposal(drafts, proposal.n_drafts, proposal.host_n_drafts, proposal.catch_up)
        return proposal

    # Each of the two steps below reads the device once: every row's tokens, and how many of
    # them it keeps, come back as host arrays ([B, W] and [B] int64).
    def _plain_step(self, batch: int, sampling: BatchSampling) -> tuple[np.ndarray, np.ndarray]:
        lens = self.rows.host_lens[:batch]
        layout = RaggedLayout.build(lens - 1, np.ones(batch, dtype=np.int64), self.cache_len, self.device)
        logits = self.target.forward(0, self.rows.last_tokens(batch), layout, last_only=True, step=True)
        token = next_tokens(logits[:, -1], sampling).cpu().numpy()  # [B]
        return token[:, None], np.zeros(batch, dtype=np.int64)

    def _verify(
        self, batch: int, proposal: Proposal, sampling: BatchSampling, layout: RaggedLayout | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """`layout`: one built for K + 1 tokens a row, or None: this step builds its own."""
        ids = torch.cat([self.rows.last_tokens(batch), proposal.drafts], dim=1)  # [B, K+1]
        width = ids.shape[1]
        if layout is None:
            layout = self._verify_layout(batch, width)
        counts = proposal.host_n_drafts + 1  # a target that skips pads verifies these only
        logits = self.target.forward(0, ids, layout, last_only=False, step=True, counts=counts)
        return verify(logits, proposal.drafts, proposal.host_n_drafts, sampling)

    def _verified_width(self, proposal: Proposal | None) -> float | None:
        """Drafts per row the verify computed, where that is not its width on every row."""
        if proposal is None or not self.target.skips_pads:
            return None
        return float(proposal.host_n_drafts.mean())

    def _verify_layout(self, batch: int, width: int) -> RaggedLayout:
        """Each row's last token and its drafts, `width` in all, from the row's last column."""
        counts = np.full(batch, width, dtype=np.int64)
        return RaggedLayout.build(self.rows.host_lens[:batch] - 1, counts, self.cache_len, self.device)

    def _sampling(self, rows: slice, positions: np.ndarray | None = None) -> BatchSampling:
        """`positions`: the index each row's next token takes (default: the rows' lengths)."""
        return self.row_sampling.of(
            rows, self.rows.host_lens[rows].copy() if positions is None else positions
        )
