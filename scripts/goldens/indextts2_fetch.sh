#!/usr/bin/env bash
# Fetches the upstream IndexTTS2 code (index-tts/index-tts, not a PyPI package) at the commit the
# IndexTTS2 goldens were computed with, and its pinned transformers, into the reference
# environment's side folders.
# Usage: scripts/goldens/indextts2_fetch.sh [SOURCE] [DEST] [DEPS]
#   SOURCE  git URL or local mirror (default https://github.com/index-tts/index-tts)
#   DEST    source folder (default ../refsrc/index-tts)
#   DEPS    folder for upstream's pinned packages (default ../refsrc/index-tts-deps)
# Only the Python sources are extracted (git archive): the repository's LFS-era binaries are not
# needed. checkpoints/config.yaml (the real sizes) is no longer tracked at the pin; it is read
# from the last commit that tracked it.
set -euo pipefail
PIN=ee40fa7d6c6b8a2c7f06105f9f1e65775b74868c
CONFIG_COMMIT=2a5ca7523747761981b6aa2e70a4c2371f754a51
here=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:-https://github.com/index-tts/index-tts}
dest=${2:-$here/../refsrc/index-tts}
deps=${3:-$here/../refsrc/index-tts-deps}
python=${REFVENV:-$here/../refvenv}/bin/python
if [ -d "$src/objects" ] || [ -f "$src/HEAD" ]; then
    git_dir=$src
else
    git_dir=$dest.git
    [ -d "$git_dir" ] || git clone --quiet --bare "$src" "$git_dir"
    git --git-dir="$git_dir" fetch --quiet origin "$PIN" 2>/dev/null || true
fi
mkdir -p "$dest/checkpoints"
git --git-dir="$git_dir" archive "$PIN" indextts/gpt indextts/s2mel indextts/codec indextts/utils/maskgct/models/codec/kmeans \
    indextts/utils/maskgct/models/codec/amphion_codec indextts/utils/maskgct/models/codec/__init__.py \
    indextts/__init__.py indextts/utils/__init__.py indextts/utils/arch_util.py indextts/utils/checkpoint.py \
    indextts/utils/common.py indextts/utils/typical_sampling.py indextts/utils/xtransformers.py \
    indextts/utils/front.py indextts/infer_v2.py indextts/utils/model_download.py webui.py | tar -x -C "$dest"
git --git-dir="$git_dir" show "$CONFIG_COMMIT:checkpoints/config.yaml" > "$dest/checkpoints/config.yaml"
# upstream pins transformers 4.52.1: its vendored GPT-2 and generation code import names 4.57 removed
"$python" -m pip install -q --no-deps --target "$deps" transformers==4.52.1 tokenizers==0.21.0 munch==4.0.0
echo "index-tts at $PIN in $dest, packages in $deps  (goldens: INDEXTTS_SRC=$dest INDEXTTS_DEPS=$deps)"
