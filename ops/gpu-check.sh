#!/usr/bin/env bash
# One prepared check for a host with a GPU, in under 10 minutes:
#   1. the engine tests on the device (there the host-synchronisation test also counts
#      every synchronising call through torch.cuda.set_sync_debug_mode);
#   2. the decode step against batch and K, in bf16 on cuda (`bench steps`);
#   3. packed GQA attention against transformers' SDPA, with the outputs (`bench variants`);
#   4. the compiled step against the eager one, with compile time (cuda only: on a 2-core CPU
#      compiling takes about 5 minutes, measured apart with `bench variants --compare compile`);
#   5. the serving workload on the default model (`bench workload --quick`).
# Everything lands in one folder (--out), ready to be recorded in docs/results.md.
#
#   ops/gpu-check.sh [--device cuda|cpu] [--out DIR] [--smoke]
#
# --device cpu runs the same steps on a CPU (float32), so that the script cannot rot.
# --smoke keeps every size at its smallest and skips the tests; CI runs it after the suite.
set -euo pipefail
cd "$(dirname "$0")/.."

device=cuda
out=""
smoke=0
while [ $# -gt 0 ]; do
    case "$1" in
        --device) device="${2:-}"; shift 2 ;;
        --out) out="${2:-}"; shift 2 ;;
        --smoke) smoke=1; shift ;;
        -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu-check: unknown argument '$1'; see ops/gpu-check.sh --help" >&2; exit 2 ;;
    esac
done
case "$device" in
    cuda | cpu) ;;
    *) echo "gpu-check: --device must be cuda or cpu, got '$device'" >&2; exit 2 ;;
esac
if [ "$device" = cuda ] && ! python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    echo "gpu-check: torch sees no CUDA GPU; install a CUDA build of torch, or run with --device cpu" >&2
    exit 1
fi
out="${out:-gpu-check-$device-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
export TRANSFORMERS_VERBOSITY=error

# Sizes per device: a GPU has room for large batches; a 2-core CPU needs the check to stay short.
if [ "$smoke" = 1 ]; then
    dtype=float32 batches=1,2 ks=0,2 context=64 steps=2 variant_batches=2 variant_ks=2 repeats=1
    workload=(--requests 3 --rates 2 --no-burst --long-prompt 0 --engines ours-off,ours-adaptive)
elif [ "$device" = cuda ]; then
    dtype=bfloat16 batches=1,8,32,64,128 ks=0,2,4 context=256 steps=16 variant_batches=1,8,64 variant_ks=0,4 repeats=3
    workload=()
else
    dtype=float32 batches=1,8 ks=0,4 context=256 steps=8 variant_batches=1,8 variant_ks=0,4 repeats=3
    workload=()
fi
model=(--target smollm2-135m-instruct --device "$device" --dtype "$dtype")

stage() { echo; echo "== $1 ($SECONDS s)"; }

stage "machine"
python3 - "$device" <<'EOF' | tee "$out/machine.txt"
import platform, sys
import torch
import transformers

print(f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}")
if sys.argv[1] == "cuda":
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}")
else:
    print(f"cpu: {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads")
EOF

if [ "$smoke" = 0 ]; then
    stage "engine tests on $device"
    ADAPTIVESPEC_TEST_DEVICE="$device" python3 -m pytest -q tests/engine 2>&1 | tee "$out/tests.txt"
fi

stage "decode step against batch and K ($dtype)"
adaptivespec bench steps "${model[@]}" --draft "" --batches "$batches" --ks "$ks" \
    --context "$context" --steps "$steps" --json "$out/steps.json" 2>&1 | tee "$out/steps.txt"

stage "packed GQA attention against SDPA"
adaptivespec bench variants --compare attention "${model[@]}" --batches "$variant_batches" \
    --ks "$variant_ks" --context "$context" --steps "$steps" --repeats "$repeats" \
    --json "$out/attention.json" 2>&1 | tee "$out/attention.txt"

if [ "$device" = cuda ] && [ "$smoke" = 0 ]; then
    stage "compiled step against eager (includes compiling)"
    adaptivespec bench variants --compare compile "${model[@]}" --batches "$variant_batches" \
        --ks "$variant_ks" --context "$context" --steps "$steps" --repeats "$repeats" \
        --json "$out/compile.json" 2>&1 | tee "$out/compile.txt"
fi

stage "serving workload on the default model"
# --runtime torch: what a GPU host runs; on a CPU (--smoke) auto would take OpenVINO instead.
adaptivespec bench workload --quick "${model[@]}" --runtime torch "${workload[@]}" --json "$out/workload.json" 2>&1 \
    | tee "$out/workload.txt"

stage "done: results in $out/"
