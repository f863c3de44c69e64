#!/usr/bin/env bash
# The GPU check, as one prepared script for a CUDA machine (H200/B300 with a CUDA torch and triton installed):
#   1. the GPU tests: compiled Triton vs torch at production shapes, FlashInfer cross-checks, CUDA-graph replay
#      (pytest -m b300 tests/gpu, the contract suite file left to step 2);
#   2. the contracts on CUDA: dspark-contracts check --device cuda --backend triton (table, JSON, HTML);
#   3. the benchmarks: Triton greedy and sampling verify at bs=1024, gamma=5, V=129280 against torch eager and
#      FlashInfer, as time and as a fraction of a device-to-device copy's bandwidth measured in the same run.
# Results land in ${OUT_DIR:-bench_results}/ (logs, JUnit XML, contracts.json/.html, verify.json, summary.md).
#
#   bash scripts/gpu_check.sh            run it (exit 0: every step passed; 3: no CUDA device, nothing ran)
#   bash scripts/gpu_check.sh --dry-run  print the steps' commands, run nothing (works without CUDA)
#
# It installs nothing and needs no network: it runs from this checkout (PYTHONPATH=.), with the machine's own
# torch. Needed: torch (CUDA build), triton, numpy, pytest, hypothesis; pytest-benchmark for step 3; FlashInfer
# is optional (without it the FlashInfer cells read "n/a" and its cross-checks skip). Each step has a time limit
# (seconds; TESTS_S, CONTRACTS_S, BENCH_S) so the whole check fits a short device lease.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${OUT_DIR:-bench_results}"
TESTS_S="${TESTS_S:-300}" CONTRACTS_S="${CONTRACTS_S:-420}" BENCH_S="${BENCH_S:-240}"
PY="${PYTHON:-python}"
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "gpu_check: unknown argument '$1' (use --dry-run or nothing)" >&2; exit 2 ;;
esac

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 DSPARK_BENCH_JSON="$OUT_DIR/verify.json"
unset TRITON_INTERPRET  # compiled kernels: the interpreter is the CPU check's business

STEP_TESTS=(timeout "$TESTS_S" "$PY" -m pytest -m b300 -q -p no:cacheprovider tests/gpu
            --ignore=tests/gpu/test_contracts_cuda.py --junitxml="$OUT_DIR/gpu-tests.xml")
STEP_CONTRACTS=(timeout "$CONTRACTS_S" "$PY" -m contracts.cli check --device cuda --backend triton --progress
                --json "$OUT_DIR/contracts.json" --html "$OUT_DIR/contracts.html")
STEP_BENCH=(timeout "$BENCH_S" "$PY" -m pytest -m bench -q -p no:cacheprovider tests/gpu/test_bench_verify.py
            -k gpu --benchmark-json="$OUT_DIR/benchmark.json")

if [ "$DRY" -eq 1 ]; then
  for step in STEP_TESTS STEP_CONTRACTS STEP_BENCH; do
    declare -n cmd="$step"
    echo "+ ${cmd[*]}"
  done
  exit 0
fi

# No CUDA: one line, exit 3, before anything is written. One probe (torch takes seconds to import): the torch
# version on its first line, the device name on its second (none without CUDA, or when CUDA cannot name it).
probe=$("$PY" -c 'import torch
print("torch", torch.__version__)
print(torch.cuda.get_device_name() if torch.cuda.is_available() else "")' 2>/dev/null)
have=$(sed -n 1p <<<"$probe")
cuda=$(sed -n 2p <<<"$probe")
if [ -z "$cuda" ]; then
  echo "gpu_check: no CUDA device visible to ${have:-python (no torch)}: nothing ran (the CPU checks are 'pytest -m cpu'" \
    "and 'dspark-contracts check --backend triton')" >&2
  exit 3
fi
missing=$("$PY" -c '
import importlib.util as u
print(" ".join(m for m in ("triton", "numpy", "pytest", "hypothesis") if u.find_spec(m) is None))')
if [ -n "$missing" ]; then
  echo "gpu_check: missing Python packages: $missing (pip install them; torch must stay the CUDA build)" >&2
  exit 4
fi
mkdir -p "$OUT_DIR"
GPU_NAME="$cuda" "$PY" -c "import os, torch, triton; print('gpu_check:', os.environ['GPU_NAME'], '| torch', torch.__version__,
      'cuda', torch.version.cuda, '| triton', triton.__version__)" | tee "$OUT_DIR/env.txt"

run_step() {  # name, then the command array's name; logs to $OUT_DIR/<name>.log, records the exit code
  local name=$1
  declare -n cmd="$2"
  echo "gpu_check: ${name}: ${cmd[*]}" >&2
  local t0=$SECONDS
  "${cmd[@]}" 2>&1 | tee "$OUT_DIR/${name}.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 124 ] && echo "gpu_check: ${name}: stopped at its time limit" >&2
  echo "gpu_check: ${name}: exit ${rc} after $((SECONDS - t0)) s" >&2
  printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" >> "$OUT_DIR/steps.tsv"
  return "$rc"
}

: > "$OUT_DIR/steps.tsv"
run_step gpu-tests STEP_TESTS; tests_rc=$?
run_step contracts STEP_CONTRACTS; contracts_rc=$?
if "$PY" -c 'import pytest_benchmark' 2>/dev/null; then
  run_step bench STEP_BENCH; bench_rc=$?
else
  echo "gpu_check: bench: pytest-benchmark is not installed (pip install pytest-benchmark); skipped" >&2
  bench_rc=1
fi

# The README table: per op, the median time and the fraction of the measured copy bandwidth.
"$PY" tests/gpu/bench_summary.py "$OUT_DIR/verify.json" | tee "$OUT_DIR/summary.md"

echo "gpu_check: gpu tests rc=$tests_rc, contracts rc=$contracts_rc, benchmarks rc=$bench_rc; results in $OUT_DIR/" >&2
[ "$tests_rc" -eq 0 ] && [ "$contracts_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
