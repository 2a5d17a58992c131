"""Paths and sizes shared by the Core ML tests (imported by conftest.py and the test files)."""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FIXTURE = HERE.parent / "fixtures" / "coreml"
CHECKPOINT = FIXTURE / "qwen3_tts_tiny"
MODEL_ID = "qwen3-tts-0.6b-customvoice"     # the fixture is a CustomVoice checkpoint
CAPACITY = 160         # > 2048/head_dim: RoPE tables pass coremltools' quantization size threshold
