"""Mimi (Kyutai's neural audio codec, transformers' ``MimiModel``): the encoder half, 24 kHz audio
-> codebook indices. Shared by the codecs and families built on it (the Qwen3-TTS 12 Hz
tokenizer's encoder, so Qwen3-TTS's and Breeze TTS's voice cloning)."""
