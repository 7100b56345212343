"""The openvino runtime's logits read in OpenVINO's own output memory against copied out, one
runner, alternating each round (12 rounds of 8 steps at a batch refilled each round):

    python docs/data/xeon-quick/burst-prefill/share_outputs_ab.py METHOD K BATCH OUT.json
"""

import json
import statistics
import sys
import time

import torch

from adaptivespec.bench.machine import machine
from adaptivespec.bench.traffic_mixes import prompts
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SamplingParams

torch.set_num_threads(2)
G = SamplingParams(max_tokens=1 << 20, temperature=0.0)
config = EngineConfig(
    models=ModelConfig(proposer="ngram,suffix", runtime="openvino"), max_batch=16, max_context=2048, threads=2
)
loaded = load_runner(config, progress=False)
runner = loaded.runner
pool = [p[-400:] for p in prompts("chat", loaded.tokenizer, 32, 0)]
method, k, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
req = runner.target.request
orig = req.infer
mode = {"share": False}


class R:
    def infer(self, inputs, share_inputs=True, share_outputs=False):
        return orig(inputs, share_inputs=share_inputs, share_outputs=mode["share"])


runner.target.request = R()
res = {False: [], True: []}
for rnd in range(12):
    runner.forget_history()
    runner.prefill(0, [PrefillItem(pool[(rnd + r) % len(pool)], G, 0) for r in range(batch)])
    for share in (False, True) if rnd % 2 == 0 else (True, False):
        mode["share"] = share
        ts = []
        for _ in range(8):
            t = time.perf_counter()
            runner.decode(batch, k, method if k else None)
            ts.append(time.perf_counter() - t)
        res[share].append(statistics.median(ts))
ratios = [a / b for a, b in zip(res[False], res[True], strict=True)]
json.dump(
    {
        "machine": machine(runner.hardware_key),
        "method": method,
        "k": k,
        "batch": batch,
        "copied_s": res[False],
        "shared_s": res[True],
        "copied_over_shared": ratios,
    },
    open(sys.argv[4], "w"),
    indent=1,
)
median = statistics.median
print(
    f"{method} K{k} b{batch}: copied over shared, per round {median(ratios):.4f}",
    f"[{min(ratios):.4f}, {max(ratios):.4f}]",
)
