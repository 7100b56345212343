#!/usr/bin/env bash
# Installs arctic-inference, Snowflake's suffix trees (what vLLM's `suffix` method imports),
# which `--proposer suffix` drafts with.
#
# It ships as an sdist with a C++ extension. pip's isolated build would fetch the newest torch
# (a multi-GB CUDA build) only for its setup.py's `import torch`, so it is built here, in this
# environment, against the torch already installed. CMake looks for Python on PATH: this
# interpreter's directory goes first, so that it finds the nanobind installed beside it.
#
#   PYTHON=/path/to/venv/bin/python ops/install-suffix.sh   (default: python3 on PATH)
set -euo pipefail
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "install torch first: $PYTHON -m pip install torch==2.13.0" >&2
    exit 1
fi
if ! command -v g++ >/dev/null; then
    echo "arctic-inference builds C++20: install a compiler first (apt-get install g++)" >&2
    exit 1
fi
BIN=$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')")
"$PYTHON" -m pip install --quiet setuptools wheel ninja cmake "nanobind==2.9.2" grpcio-tools
PATH="$BIN:$PATH" "$PYTHON" -m pip install --quiet --no-build-isolation --no-deps "arctic-inference==0.3.0"
"$PYTHON" -c "from arctic_inference.suffix_decoding import SuffixDecodingCache" && echo "arctic-inference installed: --proposer suffix is available"
