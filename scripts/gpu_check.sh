#!/usr/bin/env bash
# The GPU check, as one short script for a GPU runner (an H200/B300 with CUDA torch installed):
# GPU tests (Triton vs torch parity at full shapes, FlashInfer cross-checks, CUDA-graph replay)
# then the GPU benchmarks. Results land in ${OUT_DIR:-bench_results}/.
#
#   bash scripts/gpu_check.sh
#
# It never installs torch: the runner's CUDA build is used as it is.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${OUT_DIR:-bench_results}"
mkdir -p "$OUT_DIR"
python -m pip install -q --no-deps -e . && python -m pip install -q pytest-benchmark pytest-xdist hypothesis flashinfer-python || exit 1
export DSPARK_BENCH_JSON="$OUT_DIR/verify.json" PYTHONUNBUFFERED=1
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
python -m pytest -m b300 -q -p no:cacheprovider tests/gpu --junitxml="$OUT_DIR/gpu-tests.xml" 2>&1 | tee "$OUT_DIR/gpu-tests.log"
tests_rc=${PIPESTATUS[0]}
python -m pytest -m bench -q -p no:cacheprovider tests/gpu --benchmark-json="$OUT_DIR/benchmark.json" 2>&1 | tee "$OUT_DIR/bench.log"
bench_rc=${PIPESTATUS[0]}
echo "gpu tests rc=$tests_rc, benchmarks rc=$bench_rc; results in $OUT_DIR/"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
