"""Qwen3-TTS-Tokenizer-12Hz (speech codec, shared by qwen3_tts and breeze_tts): decoder (codes -> 24 kHz)
and encoder (audio -> codes)."""
from .config import DecoderArgs
from .decoder import DecoderCache, SpeechDecoder
from .encoder import load_speech_encoder  # noqa: F401  (reference audio -> codes, voice cloning)
from .streaming import StreamingDecoder
from .weights import build_random_decoder, load_speech_decoder

__all__ = ["DecoderArgs", "DecoderCache", "SpeechDecoder", "StreamingDecoder", "build_random_decoder",
           "load_speech_decoder"]
