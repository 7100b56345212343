"""OpenVINO GenAI's time to first token at `bench workload --quick`'s light load (0.5 requests/s,
10 requests, seed 0), each request timed from when the peer's worker added it and from its
arrival as scheduled: the worker adds a request only between its steps.

    python docs/data/xeon-quick/ttft-arrival/peer_added_late.py OVENV/bin/python OUT.json
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from adaptivespec.bench.openvino_peer import WORKER, OpenVINO
from adaptivespec.bench.traffic import Lengths, TrafficShape, requests
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.loader import load_runner

ROUNDS = 3


def main() -> None:
    python, out = Path(sys.argv[1]), Path(sys.argv[2])
    loaded = load_runner(EngineConfig(models=ModelConfig(runtime="openvino"), threads=2), progress=False)
    corpus = loaded.tokenizer.encode("\n".join(held_out_documents()), add_special_tokens=False)
    traffic = requests(TrafficShape(Lengths(16, 512), Lengths(16, 128)), 0.5, 10, corpus, 0)
    peer = OpenVINO.prepare(python, loaded.target.path, 32, "f32")
    spec = {
        "model_dir": str(peer.model_dir),
        "lookup_k": 0,
        "threads": 2,
        "max_seqs": 32,
        "kv_precision": "f32",
        "requests": [{"arrival": r.arrival, "prompt": r.prompt, "max_tokens": r.max_tokens} for r in traffic],
    }
    rounds = []
    for turn in range(ROUNDS):
        with tempfile.TemporaryDirectory() as scratch:
            spec_path, result_path = Path(scratch) / "spec.json", Path(scratch) / "out.json"
            spec_path.write_text(json.dumps(spec))
            subprocess.run([str(python), str(WORKER), str(spec_path), str(result_path)], check=True)
            served = json.loads(result_path.read_text())["served"]
        from_added = [(s["chunk_times"][0] - s["sent"]) * 1e3 for s in served]
        from_arrival = [(s["chunk_times"][0] - r.arrival) * 1e3 for s, r in zip(served, traffic, strict=True)]
        late = [(s["sent"] - r.arrival) * 1e3 for s, r in zip(served, traffic, strict=True)]
        rounds.append({"from_added_ms": from_added, "from_arrival_ms": from_arrival, "added_late_ms": late})
        print(
            f"round {turn + 1}: TTFT p50 from the add {np.percentile(from_added, 50):.1f} ms, "
            f"from the arrival {np.percentile(from_arrival, 50):.1f} ms; added late by "
            f"{statistics.median(late):.1f} ms at the median, {max(late):.1f} at most",
            flush=True,
        )
    prompts = [len(r.prompt) for r in traffic]
    out.write_text(json.dumps({"prompt_tokens": prompts, "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
