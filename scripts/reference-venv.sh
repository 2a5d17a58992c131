#!/usr/bin/env bash
# Builds the throwaway PyTorch reference environment used only to regenerate test goldens.
# Never a dependency of ttscli. Usage: scripts/reference-venv.sh [VENV_DIR]   (default: ../refvenv)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$here/../refvenv}
shared=${TTSCLI_SHARED:-$here/../shared}
python3 -m venv "$venv"
. "$venv/bin/activate"
pip install -q -U pip
pip install -q torch==2.13.0
pip install -q --no-deps qwen-tts==0.1.1 chatterbox-tts==0.1.7
pip install -q -r "$here/scripts/reference-requirements.txt"
pip install -q --no-deps torchaudio==2.11.1
pip install -q --no-deps conformer==0.3.2 diffusers==0.29.0 s3tokenizer==0.3.0
echo "reference venv ready: $venv  (import scripts/reference_stubs.py before qwen_tts / chatterbox)"
