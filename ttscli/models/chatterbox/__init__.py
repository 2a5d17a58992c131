"""Chatterbox (Resemble AI): T3 speech-token LM + S3Gen flow-matching decoder and HiFT vocoder."""
