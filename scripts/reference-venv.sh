#!/usr/bin/env bash
# Builds the throwaway PyTorch reference environment used only to regenerate test goldens
# (scripts/goldens/README.md). Never a dependency of ttscli.
# Usage: scripts/reference-venv.sh [VENV_DIR]   (default: ../refvenv)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$here/../refvenv}
python3 -m venv "$venv"
. "$venv/bin/activate"
pip install -q -U pip
# the exact pin: a looser spec lets pip pick a CUDA build where a CPU wheel is not first in line
pip install -q torch==2.13.0
# upstream packages whose own pins clash with each other (transformers, torch): their code only
pip install -q --no-deps qwen-tts==0.1.1 chatterbox-tts==0.1.7 kokoro==0.9.4
pip install -q -r "$here/scripts/reference-requirements.txt"
pip install -q --no-deps torchaudio==2.11.1       # only its pure-Python parts are used
pip install -q --no-deps conformer==0.3.2 diffusers==0.29.0 s3tokenizer==0.3.0
# Pocket TTS (scripts/goldens/pocket_tts_upstream.py, benchmarks/bench_pocket_peer.py): its code, and the
# light dependencies it imports that the lines above do not bring
pip install -q --no-deps pocket-tts==4.0.1
pip install -q einops sentencepiece pydantic safetensors tokenizers pyyaml
# VoxCPM2 (scripts/goldens/voxcpm2_upstream.py, benchmarks/bench_voxcpm2_peer.py): its code; it imports
# librosa, tqdm and transformers' LlamaTokenizerFast (already above) at module level
pip install -q --no-deps voxcpm==2.0.3
pip install -q librosa tqdm
# CosyVoice3 (scripts/goldens/cosyvoice3_upstream.py, benchmarks/bench_cosyvoice3_peer.py): upstream's code is
# fetched by scripts/goldens/cosyvoice_fetch.sh; these are the imports it needs that the lines above do not bring
pip install -q --no-deps HyperPyYAML==1.2.3 ruamel.yaml==0.18.6 x-transformers==2.11.24 einx==0.3.0 \
    loguru==0.7.3 frozendict==2.4.6 matcha-tts==0.0.7.2
# CosyVoice pins transformers 4.51.3, whose Qwen2 reads upstream's one-column decode mask as "no padding";
# 4.57 pads it with False and changes every decode step: a side folder the CosyVoice3 scripts put first
pip install -q --no-deps --target "$venv/cosyvoice-transformers" transformers==4.51.3 tokenizers==0.21.4
echo "reference venv ready: $venv  (generators import scripts/reference_stubs.py before upstream packages)"
