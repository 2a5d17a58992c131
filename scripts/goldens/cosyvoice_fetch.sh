#!/usr/bin/env bash
# Fetches the upstream CosyVoice code (not a PyPI package) at the commit the CosyVoice3 goldens
# were computed with, into the reference environment's source folder.
# Usage: scripts/goldens/cosyvoice_fetch.sh [SOURCE] [DEST]
#   SOURCE  git URL or local mirror (default https://github.com/FunAudioLLM/CosyVoice)
#   DEST    checkout folder (default ../refsrc/CosyVoice)
# Its Python dependencies beyond the reference venv's are installed by scripts/reference-venv.sh.
set -euo pipefail
PIN=ace7c47f41bbd303aa6bf1ea80e6f9fbd595cd40
here=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:-https://github.com/FunAudioLLM/CosyVoice}
dest=${2:-$here/../refsrc/CosyVoice}
if [ ! -d "$dest/.git" ]; then
    git clone --quiet --no-checkout "$src" "$dest"
fi
git -C "$dest" fetch --quiet origin "$PIN" 2>/dev/null || true
git -C "$dest" checkout --quiet "$PIN"
echo "CosyVoice at $PIN in $dest  (goldens: COSYVOICE_SRC=$dest)"
