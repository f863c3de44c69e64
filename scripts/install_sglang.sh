#!/usr/bin/env bash
# Install the REAL sglang 0.5.23 wheel on a CPU-only Python 3.11 that already has
# torch 2.13.0+cpu, so that contracts/adapters/sglang/env.py can import and call
# its DSpark code (sglang_dspark.md section 4.2, tier 1 + tier 2 modules).
#
#   bash scripts/install_sglang.sh              # install + verify (two fresh import processes, ~30-60 s)
#   bash scripts/install_sglang.sh --no-verify  # install only
#   PYTHON=/path/to/python bash scripts/install_sglang.sh   # another interpreter
#
# Policy
# - Every package goes in with `pip install --no-deps --only-binary=:all:` and an
#   exact `==` pin. Nothing is resolved, so nothing can pull torch, torchvision,
#   flashinfer or any CUDA package (the sglang wheel itself declares
#   torch==2.14.1, flashinfer_python[cu13], sglang-kernel, nvidia-*, ...; those
#   requirements stay unsatisfied on purpose and `pip check` reports them).
# - torch is NOT installed here. It must already be 2.13.0+cpu (CI: install the
#   CPU wheel first, e.g. `python -m pip install torch==2.13.0` from the local
#   wheel dir). torch brings filelock, fsspec, jinja2, MarkupSafe, networkx,
#   sympy, mpmath, setuptools and typing_extensions; huggingface_hub needs
#   filelock/fsspec from that set, which the script checks are present.
# - torchvision is never installed: the only torchvision wheels on reach are
#   linked against CUDA torch and break `import transformers` with
#   "operator torchvision::nms does not exist". sglang_env.py installs an
#   import-time stand-in instead.
# - Idempotent: a second run finds every pin satisfied and changes nothing.
# - The pins are the versions pip's resolver picked on 2026-11 for this set of
#   top-level requirements (with the versions already installed on the dev
#   machine preferred), i.e. a consistent closure: afterwards `pip check` only
#   complains about sglang's own (deliberately skipped) requirements.
#   All 81 files (80 pins + the sglang wheel) were checked to resolve from the public
#   Python package index alone (an isolated `pip install --dry-run` against it).
# Needs network access to PyPI (or a mirror holding these exact files) and
# glibc >= 2.34 (the sglang wheel is manylinux_2_34_x86_64, cp311).
set -euo pipefail

PYTHON="${PYTHON:-python}"
SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0+cpu"
VERIFY=1
for arg in "$@"; do
  case "$arg" in
    --no-verify) VERIFY=0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install_sglang.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
START_S=$(date +%s)
log() { echo "[install_sglang +$(( $(date +%s) - START_S ))s] $*"; }
die() { echo "[install_sglang] ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# The pinned list. "import:" = imported while importing the DSpark modules;
# "declared:" = not imported by those modules, but a declared requirement of a
# package above, installed so that `pip check` stays clean apart from sglang.
# ---------------------------------------------------------------------------
PINS=(
  # ---- tier 1: `import sglang` itself + spec_info, overlap_utils, ragged_verify, kernels ----
  numpy==2.4.6                 # import: everywhere (sglang/srt/utils/common.py)
  orjson==3.8.3                # import: srt/utils/common.py
  psutil==7.2.2                # import: srt/utils/common.py
  pybase64==1.5.1              # import: srt/utils/common.py
  requests==2.34.2             # import: srt/utils/common.py
  urllib3==2.7.0               # import: requests
  idna==3.13                   # import: requests, anyio, yarl, httpx
  certifi==2026.5.20           # import: requests
  charset-normalizer==3.4.7    # import: requests/compat.py (optional there, imported when present)
  triton==3.9.0                # import: srt/utils/common.py; torch._inductor inspects triton.language
                               #   (a stand-in is not enough). CPU-safe, ~286 MB wheel, ~1 GB installed
  packaging==26.2              # import: srt/utils/common.py, transformers
  pillow==13.0.0               # import: srt/utils/common.py (PIL)
  starlette==1.10.0            # import: srt/utils/common.py
  anyio==4.16.0                # import: starlette, httpx, openai
  typing_extensions==4.16.0    # import: everywhere; anyio 4.16 needs >= 4.16.0 (torch may bring 4.15)
  msgspec==0.23.0              # import: srt/platforms/interface.py, runtime_context, per-step structs
  pydantic==2.13.4             # import: sglang/utils.py, srt/utils/msgspec_utils.py
  pydantic_core==2.46.4        # import: pydantic (exact pair of pydantic 2.13.4)
  typing-inspection==0.4.2     # import: pydantic
  annotated-types==0.7.0       # import: pydantic
  pyzmq==27.3.0                # import: srt/utils/network.py (zmq)
  tqdm==4.70.1                 # import: sglang/lang/interpreter.py
  ipython==8.12.3              # import: sglang/utils.py (IPython)
  traitlets==5.15.0            # import: IPython
  stack-data==0.6.3            # import: IPython
  executing==2.2.1             # import: stack_data
  asttokens==3.0.1             # import: stack_data
  pure_eval==0.2.3             # import: stack_data
  Pygments==2.20.0             # import: IPython
  pexpect==4.8.0               # import: IPython
  ptyprocess==0.7.0            # import: pexpect
  pickleshare==0.7.5           # import: IPython
  backcall==0.2.0              # import: IPython
  decorator==5.2.1             # import: IPython
  prompt_toolkit==3.0.52       # import: IPython
  wcwidth==0.7.0               # import: prompt_toolkit
  jedi==0.20.0                 # import: IPython/core/completer.py (optional there)
  parso==0.8.7                 # import: jedi
  matplotlib-inline==0.2.2     # declared: IPython
  aiohttp==3.14.5              # import: sglang/lang/backend/runtime_endpoint.py
  aiohappyeyeballs==2.7.1      # import: aiohttp
  aiosignal==1.4.0             # import: aiohttp
  attrs==26.1.0                # import: aiohttp (NB: the PyPI package "attr" is a different thing)
  frozenlist==1.8.0            # import: aiohttp
  multidict==7.2.1             # import: aiohttp
  propcache==0.5.4             # import: yarl
  yarl==1.25.1                 # import: aiohttp
  # ---- tier 2: dspark_disaggregation, dspark_{draft,verify,planner,config,kv_inject,worker_v2},
  #      decode_schedule_batch_mixin, forward_batch_info, kernels dspark_accept & co ----
  transformers==5.19.0         # import: srt/configs (pinned by the sglang wheel); checks versions of
                               #   tqdm/regex/packaging/filelock/numpy/tokenizers/hub/safetensors/pyyaml at import
  tokenizers==0.23.2           # import: transformers (pinned by the sglang wheel)
  huggingface_hub==1.33.0      # import: transformers (tokenizers 0.23.2 needs < 2.0, transformers >= 1.31)
  safetensors==0.8.0           # import: transformers (runtime check >= 0.8.0)
  regex==2026.5.9              # import: transformers
  PyYAML==6.0.3                # import: transformers, huggingface_hub, gguf
  httpx==0.28.1                # import: huggingface_hub, openai
  httpcore==1.0.9              # import: httpx
  h11==0.16.0                  # import: httpcore, uvicorn
  hf-xet==1.8.0                # declared: huggingface_hub
  typer==0.29.2                # declared: transformers (CLI)
  click==8.5.1                 # import: uvicorn; huggingface_hub needs >= 8.4.2
  rich==15.0.0                 # import: httpx/_main.py (optional there); declared by typer
  shellingham==1.5.4           # declared: typer
  markdown-it-py==4.3.0        # declared: rich
  mdurl==0.1.2                 # declared: markdown-it-py
  dill==0.4.1                  # import: srt/sampling/custom_logit_processor.py via srt/configs
  apache-tvm-ffi==0.1.11       # import: srt/layers/dp_attention.py -> custom_all_reduce_v2 (pinned by the wheel)
  sentencepiece==0.2.1         # import: srt/configs/internvl.py (pinned by the wheel)
  einops==0.8.2                # import: srt/layers/moe/topk.py
  compressed-tensors==0.18.0   # import: srt/layers/quantization via model_config (pinned by the wheel;
                               #   declares torch>=2.10, satisfied by 2.13.0+cpu)
  loguru==0.7.3                # import: compressed_tensors
  gguf==0.19.0                 # import: srt/layers/quantization/gguf.py
  openai==2.8.0                # import: srt/entrypoints/openai/protocol.py (pinned by the wheel)
  distro==1.9.0                # import: openai
  sniffio==1.3.1               # import: openai
  jiter==0.19.0                # declared: openai
  partial-json-parser==0.2.1.1.post7  # import: srt/parser/reasoning_parser.py
  setproctitle==1.3.8          # import: draft_worker_common -> managers/scheduler.py
  uvicorn==0.54.0              # import: managers/scheduler.py -> disaggregation/encoder/receiver.py
  fastapi==0.165.0             # import: same receiver.py
  annotated-doc==0.0.7         # import: fastapi
  opentelemetry-api==1.45.2    # import: fastapi/telemetry (fastapi >= 0.16x imports it eagerly)
)
# Never installed, and verified absent afterwards.
FORBIDDEN_RE='^(torchvision|torchaudio|torchcodec|flashinfer.*|flash-attn.*|nvidia-.*|cuda-.*|cupy.*|sglang-kernel|sgl-.*|xformers|triton-.*)$'
# Present through torch's own requirements; checked, not installed.
FROM_TORCH=(filelock fsspec jinja2 markupsafe networkx sympy mpmath)

# ---------------------------------------------------------------------------
# 1. Preflight: interpreter and torch.
# ---------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null 2>&1 || die "interpreter '$PYTHON' not found"
CHECKS=("$PYTHON" "$REPO_ROOT/scripts/pinned_install.py" --log install_sglang --torch "$TORCH_VERSION")
"${CHECKS[@]}" preflight --from-torch "${FROM_TORCH[@]}" \
  --warn-if-installed "torchvision=sglang_env.py will use it instead of its stand-in. CUDA-linked builds break \`import transformers\` on a CPU torch." \
  || die "preflight failed (see above)"
log "python: $("$PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
log "torch:  $TORCH_VERSION (preflight ok)"

# ---------------------------------------------------------------------------
# 2. The dependency closure, then the wheel itself (both --no-deps), then the post-install inspection:
#    torch untouched, exact versions, nothing CUDA, no new `pip check` problems apart from sglang's own
#    skipped requirements.
# ---------------------------------------------------------------------------
"${CHECKS[@]}" install --dist sglang --version "$SGLANG_VERSION" --forbidden "$FORBIDDEN_RE" \
  --skipped-note "torch==2.14.1, flashinfer, sglang-kernel, ..." --pins "${PINS[@]}" \
  || die "install or post-install inspection failed (see above)"

# ---------------------------------------------------------------------------
# 3. Import check in fresh processes: tier 1 bare, tier 2 through sglang_env.
# ---------------------------------------------------------------------------
if [[ "$VERIFY" == 1 ]]; then
  log "verify: tier-1 import (sglang.srt.managers.overlap_utils, no stand-in)"
  (cd "$REPO_ROOT" && "$PYTHON" -c "import sglang.srt.managers.overlap_utils, sglang.srt.speculative.spec_info") \
    || die "tier-1 import failed"
  if [[ -f "$REPO_ROOT/contracts/adapters/sglang/env.py" ]]; then
    log "verify: tier-2 import (dspark_worker_v2 via contracts.adapters.sglang.env)"
    (cd "$REPO_ROOT" && "$PYTHON" -c "
from contracts.adapters.sglang.env import prepare_sglang_import
prepare_sglang_import()
import sglang.srt.speculative.dspark_components.dspark_worker_v2
import sglang.srt.disaggregation.decode_schedule_batch_mixin
import sglang.kernels.ops.speculative.dspark.dspark_accept
") || die "tier-2 import failed"
  else
    log "verify: contracts/adapters/sglang/env.py not found, tier-2 check skipped"
  fi
fi
log "done in $(( $(date +%s) - START_S )) s"
