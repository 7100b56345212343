"""The `hf` runner: batched speculative decoding on transformers models.

One decode step is: propose K drafts per row, verify [last token + drafts] in ONE target
forward over the whole batch, accept per row, append. Each row writes its KV at its own
columns, so ragged acceptance needs no rollback beyond forgetting the rejected columns.
"""

from __future__ import annotations

import time
from typing import cast

import torch
from transformers import PreTrainedModel

from adaptivespec.engine.cached_model import CachedModel, ForwardClock
from adaptivespec.engine.proposers import Proposal, Proposer
from adaptivespec.engine.ragged import RaggedLayout
from adaptivespec.engine.rows import RowState
from adaptivespec.engine.runner import DecodeOutput, PrefillItem, PrefillOutput
from adaptivespec.engine.sampling import BatchSampling, next_tokens
from adaptivespec.engine.verification import Verdict, verify


class HFRunner:
    def __init__(
        self,
        target: PreTrainedModel,
        proposer: Proposer | None,
        *,
        max_batch: int,
        max_context: int,
        max_spec_tokens: int,
        eos_token_ids: frozenset[int],
        model_key: str,
        hardware_key: str,
        clock: ForwardClock,
    ) -> None:
        self.proposer = proposer
        self.max_batch = max_batch
        self.max_spec_tokens = max_spec_tokens if proposer is not None else 0
        self.eos_token_ids = eos_token_ids
        self.model_key = model_key
        self.hardware_key = hardware_key
        self.clock = clock
        # Verify writes up to column len-1+K; the last column is the pad sink (see ragged.py).
        self.cache_len = max_context + max_spec_tokens + 1
        self.target = CachedModel(target, max_batch, self.cache_len, clock)
        self.vocab_rows = int(cast(torch.nn.Embedding, target.get_input_embeddings()).num_embeddings)
        self.device = self.target.device
        self.rows = RowState.allocate(max_batch, self.cache_len, self.device)
        self._temperature = torch.ones(max_batch)
        self._top_p = torch.ones(max_batch)
        self._greedy = torch.ones(max_batch, dtype=torch.bool)
        self._generators = [torch.Generator() for _ in range(max_batch)]

    @property
    def kv_bytes(self) -> int:
        return self.target.cache.nbytes + (self.proposer.nbytes if self.proposer is not None else 0)

    def describe(self) -> str:
        return (
            f"hf runner on {self.hardware_key}: KV cache preallocated for {self.max_batch} rows x "
            f"{self.cache_len} positions = {self.kv_bytes / 2**20:.1f} MiB"
        )

    @torch.inference_mode()
    def prefill(self, row_start: int, items: list[PrefillItem]) -> PrefillOutput:
        began = time.perf_counter()
        chunks, starts = [item.chunk for item in items], [item.start for item in items]
        for r, item in enumerate(items):
            if item.completes:
                self.rows.tokens[row_start + r, : len(item.prompt)] = torch.tensor(
                    item.prompt, device=self.device
                )
                self._set_sampling(row_start + r, item)
        logits = self.target.prefill(row_start, chunks, starts)  # [n, V]
        if self.proposer is not None:
            self.proposer.prefill(row_start, chunks, starts)
        ends = torch.tensor([item.stop for item in items], dtype=torch.long, device=self.device)
        self.rows.lens[row_start : row_start + len(items)] = ends  # what the cache holds so far
        done = sum(1 for item in items if item.completes)  # only the last item may stop short
        rows = slice(row_start, row_start + done)
        first = next_tokens(logits[:done], self._sampling(rows))
        self.rows.tokens[rows].scatter_(1, ends[:done].unsqueeze(1), first.unsqueeze(1))
        self.rows.lens[rows] += 1
        tokens: list[int | None] = list(first.tolist())
        return PrefillOutput(tokens + [None] * (len(items) - done), time.perf_counter() - began)

    @torch.inference_mode()
    def decode(self, batch: int, k: int) -> DecodeOutput:
        began = time.perf_counter()
        sampling = self._sampling(slice(0, batch))
        old_lens = self.rows.lens[:batch].clone()
        k = min(k, self.max_spec_tokens)
        proposal = self._propose(batch, k, sampling)
        drafted_at = time.perf_counter()
        if proposal is None:
            verdict = self._plain_step(batch, sampling)
            drafted = [0] * batch
        else:
            verdict = self._verify(batch, proposal, sampling, old_lens)
            drafted = proposal.n_drafts.tolist()
        counts = verdict.accepted + 1
        self.rows.append(batch, verdict.tokens, counts)
        emitted, accepted = verdict.tokens.tolist(), verdict.accepted.tolist()
        done = time.perf_counter()
        return DecodeOutput(
            tokens=[row[: a + 1] for row, a in zip(emitted, accepted, strict=True)],
            drafted=drafted,
            accepted=accepted,
            k=k,
            width=0 if proposal is None else proposal.drafts.shape[1],
            draft_seconds=drafted_at - began,
            verify_seconds=done - drafted_at,
            step_seconds=done - began,
        )

    def move_rows(self, srcs: list[int], dsts: list[int]) -> None:
        if not srcs:
            return
        src = torch.tensor(srcs, dtype=torch.long, device=self.device)
        dst = torch.tensor(dsts, dtype=torch.long, device=self.device)
        upto = int(self.rows.lens[src].max())
        self.target.cache.move_rows(src, dst, upto)
        self.rows.move(src, dst)
        if self.proposer is not None:
            self.proposer.move_rows(src, dst, upto)
        for s, d in zip(srcs, dsts, strict=True):
            self._temperature[d], self._top_p[d], self._greedy[d] = (
                self._temperature[s],
                self._top_p[s],
                self._greedy[s],
            )
            self._generators[d], self._generators[s] = self._generators[s], self._generators[d]

    def _propose(self, batch: int, k: int, sampling: BatchSampling) -> Proposal | None:
        if k <= 0 or self.proposer is None:
            return None  # K = 0 never touches the drafter
        proposal = self.proposer.propose(self.rows, batch, k, sampling)
        width = int(proposal.n_drafts.max())
        if width == 0:
            return None
        if width < k:
            probs = None if proposal.probs is None else proposal.probs[:, :width]
            proposal = Proposal(proposal.drafts[:, :width], proposal.n_drafts, probs)
        return proposal

    def _last_tokens(self, batch: int) -> torch.Tensor:
        return self.rows.tokens[:batch].gather(1, (self.rows.lens[:batch] - 1).unsqueeze(1))  # [B, 1]

    def _plain_step(self, batch: int, sampling: BatchSampling) -> Verdict:
        lens = self.rows.lens[:batch]
        layout = RaggedLayout.build(lens - 1, torch.ones_like(lens), self.cache_len)
        logits = self.target.forward(0, self._last_tokens(batch), layout, last_only=True)
        token = next_tokens(logits[:, -1], sampling)
        return Verdict(torch.zeros_like(lens), token.unsqueeze(1))

    def _verify(
        self, batch: int, proposal: Proposal, sampling: BatchSampling, old_lens: torch.Tensor
    ) -> Verdict:
        lens = self.rows.lens[:batch]
        ids = torch.cat([self._last_tokens(batch), proposal.drafts], dim=1)  # [B, K+1]
        layout = RaggedLayout.build(lens - 1, torch.full_like(lens, ids.shape[1]), self.cache_len)
        logits = self.target.forward(0, ids, layout, last_only=False)
        verdict = verify(logits, proposal.probs, proposal.drafts, proposal.n_drafts, sampling)
        if self.proposer is not None:
            self.proposer.commit(batch, old_lens, verdict.accepted)
        return verdict

    def _set_sampling(self, row: int, item: PrefillItem) -> None:
        params = item.params
        self._greedy[row] = params.greedy
        self._temperature[row] = 1.0 if params.greedy else params.temperature
        self._top_p[row] = params.top_p
        self._generators[row].manual_seed(item.seed)

    def _sampling(self, rows: slice) -> BatchSampling:
        return BatchSampling(
            self._temperature[rows], self._top_p[rows], self._greedy[rows], self._generators[rows]
        )
