#!/usr/bin/env bash
# A virtual environment holding `speculators` (vLLM's EAGLE-3 format and model), in which the
# tests load the heads adaptivespec writes with speculators' own `Eagle3DraftModel`.
#
# Its own environment: speculators 0.9.0 pins transformers <= 5.19 and pulls torchvision,
# torchaudio and hs-connectors' GPU transfer stack. Only the parts that define and load the
# model are installed: speculators and hs-connectors without their dependencies, the CPU torch
# wheel, and the pure-Python libraries speculators imports.
#
#   ops/install-speculators.sh DIR   (then DIR/bin/python imports speculators)
set -euo pipefail
DIR=${1:?usage: ops/install-speculators.sh DIR}
python3 -m venv "$DIR"
PY="$DIR/bin/python"
"$PY" -m pip install --quiet torch==2.13.0
"$PY" -m pip install --quiet --no-deps speculators==0.9.0 hs-connectors==0.9.0
"$PY" -m pip install --quiet "transformers>=5.0,<=5.19.0" "datasets>=4.0,<=5.1.0" "loguru>=0.7.2,<=0.7.3" \
    pydantic pydantic-settings safetensors click httpx huggingface-hub rich typer "tqdm<=4.70.1" psutil \
    protobuf openai aiohttp "numpy>=2.0,<=2.5.4"
"$PY" -c "from speculators.models.eagle3 import Eagle3DraftModel" && echo "speculators installed in $DIR"
