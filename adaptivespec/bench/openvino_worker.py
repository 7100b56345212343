"""Serves `bench workload` traffic with OpenVINO GenAI's continuous-batching pipeline.

Run by `openvino_peer.py` with the Python of a separate environment that has
`openvino-genai` (optimum-intel pins an older transformers than ours), so this file imports
nothing from adaptivespec: `python openvino_worker.py SPEC.json OUT.json`. The spec names the
converted model, the requests (arrival, prompt ids, max tokens), whether to draft by prompt
lookup, and the precision to compute in: f32 unless told otherwise, since OpenVINO's CPU
plugin would run fp32 weights in bf16 where the CPU has it. The output has, per request,
when it was sent, when each streamed piece arrived and its tokens, on this process's clock.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np
import openvino as ov
import openvino_genai as ov_genai


def _config(max_tokens: int, lookup_k: int) -> Any:
    config = ov_genai.GenerationConfig()
    config.max_new_tokens = max_tokens
    config.ignore_eos = True
    config.do_sample = False
    config.apply_chat_template = False
    if lookup_k:
        config.num_assistant_tokens = lookup_k
        config.max_ngram_size = 3
    return config


def serve(spec: dict[str, Any]) -> dict[str, Any]:
    scheduler = ov_genai.SchedulerConfig()
    scheduler.cache_size = spec.get("cache_gb", 4)
    scheduler.max_num_batched_tokens = spec.get("max_batched_tokens", 512)
    scheduler.max_num_seqs = spec.get("max_seqs", 32)
    scheduler.dynamic_split_fuse = True
    # OpenVINO runs fp32 weights in bf16 on CPUs that have it, unless told not to; ours are fp32.
    properties: dict[str, Any] = {"INFERENCE_PRECISION_HINT": spec.get("precision", "f32")}
    if spec.get("kv_precision"):  # its CPU plugin keeps the KV cache in u8 on x86 unless told
        properties["KV_CACHE_PRECISION"] = spec["kv_precision"]
    if spec.get("threads"):  # the same threads as ours; 0 leaves OpenVINO's own choice
        properties["INFERENCE_NUM_THREADS"] = spec["threads"]
    if spec["lookup_k"]:
        properties["prompt_lookup"] = True
    pipe = ov_genai.ContinuousBatchingPipeline(spec["model_dir"], scheduler, "CPU", properties)
    requests = spec["requests"]
    order = sorted(range(len(requests)), key=lambda i: requests[i]["arrival"])
    sent: dict[int, float] = {}
    times: dict[int, list[float]] = {i: [] for i in range(len(requests))}
    tokens: dict[int, list[int]] = {i: [] for i in range(len(requests))}
    handles: dict[int, Any] = {}
    began = time.perf_counter()
    while order or handles:
        now = time.perf_counter() - began
        while order and requests[order[0]]["arrival"] <= now:
            i = order.pop(0)
            ids = ov.Tensor(np.array([requests[i]["prompt"]], dtype=np.int64))
            handles[i] = pipe.add_request(i, ids, _config(requests[i]["max_tokens"], spec["lookup_k"]))
            sent[i] = time.perf_counter() - began
        if not handles:
            time.sleep(max(0.0, requests[order[0]]["arrival"] - now))
            continue
        pipe.step()
        stamp = time.perf_counter() - began
        for i, handle in list(handles.items()):
            if handle.can_read():
                for output in handle.read().values():
                    if output.generated_ids:
                        times[i].append(stamp)
                        tokens[i].extend(int(t) for t in output.generated_ids)
            if handle.get_status() != ov_genai.GenerationStatus.RUNNING and not handle.can_read():
                del handles[i]
    return {
        "openvino_genai": ov_genai.__version__,
        "openvino": ov.__version__ if hasattr(ov, "__version__") else ov.get_version(),
        "served": [
            {"sent": sent[i], "chunk_times": times[i], "tokens": tokens[i]} for i in range(len(requests))
        ],
    }


if __name__ == "__main__":
    with open(sys.argv[1]) as source:
        result = serve(json.load(source))
    with open(sys.argv[2], "w") as sink:
        json.dump(result, sink)
