"""Mimi (Kyutai's neural audio codec, transformers' ``MimiModel``): its encoder, a mono 24 kHz
waveform -> codebook indices (or continuous latents), and its streaming decoder, latent frames ->
a 24 kHz waveform (Pocket TTS). A shared codec: the Qwen3-TTS 12 Hz tokenizer's encoder is Mimi's
(codecs/qwen3_12hz/encoder.py, so Qwen3-TTS's and Breeze TTS's voice cloning), as are other
families' codecs.

config.py (MimiArgs: MimiConfig's fields), seanet.py, transformer.py, quantizer.py (split RVQ),
encoder.py (MimiEncoder: the four under the checkpoint's names), decoder.py (MimiDecoder),
kyutai.py (a Kyutai-layout checkpoint's tensors under these modules' names).
"""
from .config import MimiArgs
from .decoder import MimiDecoder
from .encoder import MimiEncoder

__all__ = ["MimiArgs", "MimiDecoder", "MimiEncoder"]
