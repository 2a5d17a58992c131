"""Paths and sizes shared by the Core ML tests (imported by conftest.py and the test files)."""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FIXTURE = HERE.parent / "fixtures" / "coreml"
CHECKPOINT = FIXTURE / "qwen3_tts_tiny"
CAPACITY = 160         # > 2048/head_dim: RoPE tables pass coremltools' quantization size threshold
DECODER_FRAMES = 9     # = the one-shot golden's length; chunked golden: window 9 = chunk 6 + context 3
STREAM_FRAMES = 3      # frames per call of the streaming decoder (the tiny window is 4 frames)
