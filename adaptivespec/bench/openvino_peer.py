"""OpenVINO GenAI as a `bench workload` peer: the same model, converted once, in its own Python.

optimum-intel pins an older transformers than ours, so OpenVINO lives in a separate
environment, named by `--openvino-python`: the model directory we serve is exported there
with `optimum-cli export openvino` (fp32 weights, as ours), and `openvino_worker.py` serves
the same requests with its continuous-batching pipeline, with or without prompt lookup.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaptivespec.bench.traffic import Request, Served
from adaptivespec.engine.model_cache import cache_dir

WORKER = Path(__file__).with_name("openvino_worker.py")


@dataclass(frozen=True, slots=True)
class OpenVINO:
    python: Path  # the environment's interpreter; optimum-cli sits beside it
    model_dir: Path  # the exported model
    max_seqs: int
    # Its KV cache: "f32" as ours, or "u8", what OpenVINO's CPU plugin picks on x86 unless told.
    kv_precision: str = "f32"

    @staticmethod
    def check(python: Path | None) -> None:
        """Refuses an environment that cannot run the peer, before any model loads."""
        setup = "the README's `bench workload` part shows how to set that environment up"
        if python is None:
            raise SystemExit(f"the openvino engines need --openvino-python: {setup}")
        if not python.is_file():
            raise SystemExit(f"--openvino-python {python} does not exist; {setup}")
        probe = [str(python), "-c", "import openvino_genai, optimum.intel"]
        try:
            found = subprocess.run(probe, check=False, capture_output=True, text=True, timeout=120)
        except OSError as exc:  # not executable, or not a program at all
            raise SystemExit(f"--openvino-python {python} does not run ({exc}); {setup}") from exc
        if found.returncode != 0:
            last = (found.stderr.strip().splitlines() or ["no error text"])[-1]
            raise SystemExit(
                f"--openvino-python {python} cannot import openvino_genai and optimum-intel ({last}); {setup}"
            )

    @classmethod
    def prepare(cls, python: Path, source_dir: str, max_seqs: int, kv_precision: str = "f32") -> OpenVINO:
        """Exports the model on first use; later runs reuse the export (`check` comes first)."""
        tag = hashlib.sha256(str(Path(source_dir).resolve()).encode()).hexdigest()[:12]
        out = cache_dir() / "openvino" / f"{Path(source_dir).name}-{tag}-fp32"
        if not (out / "openvino_model.xml").exists():
            print(f"exporting {source_dir} to OpenVINO (fp32) in {out} ...", flush=True)
            cli = python.parent / "optimum-cli"
            command = [str(cli), "export", "openvino", "--model", source_dir]
            command += ["--task", "text-generation-with-past", "--weight-format", "fp32", str(out)]
            subprocess.run(command, check=True)
        return cls(python, out, max_seqs, kv_precision)

    def serve(
        self, traffic: list[Request], lookup_k: int, threads: int
    ) -> tuple[list[Served], dict[str, str]]:
        """`threads`: OpenVINO's inference threads (0: its own choice)."""
        spec = {
            "model_dir": str(self.model_dir),
            "lookup_k": lookup_k,
            "threads": threads,
            "max_seqs": self.max_seqs,
            "kv_precision": self.kv_precision,
            "requests": [
                {"arrival": r.arrival, "prompt": r.prompt, "max_tokens": r.max_tokens} for r in traffic
            ],
        }
        with tempfile.TemporaryDirectory() as scratch:
            spec_path, out_path = Path(scratch) / "spec.json", Path(scratch) / "out.json"
            spec_path.write_text(json.dumps(spec))
            subprocess.run([str(self.python), str(WORKER), str(spec_path), str(out_path)], check=True)
            result = json.loads(out_path.read_text())
        return served_from(traffic, result), {
            "openvino_genai": result["openvino_genai"],
            "openvino": result["openvino"],
        }


def served_from(traffic: list[Request], result: dict[str, Any]) -> list[Served]:
    """The worker's streams, each timed from its request's arrival as scheduled (the worker's
    clock starts at the first arrival), as ours are. Not from when the worker added it: the
    worker adds a request only between steps, so a request that arrived during a step was
    added when the step ended, and timed from there its TTFT left out the wait for that step,
    which ours counts (docs/decisions.md, 2026-12-06, sixth entry)."""
    return [
        Served(request, request.arrival, s["chunk_times"], s["tokens"])
        for request, s in zip(traffic, result["served"], strict=True)
    ]
