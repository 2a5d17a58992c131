"""Pocket TTS's Mimi (``mimi.*``; upstream pocket_tts/models/mimi.py): the shared Mimi encoder
without codebooks (a clone reference -> latents the voice prompt projects) and decoder (latents ->
24 kHz), with ``quantizer.output_proj``, the 1x1 conv from the LM's latent width back to Mimi's.

The tree is transformers' MimiModel's (``encoder.layers.N``, ``decoder_transformer.layers.N.
self_attn.q_proj`` ...), the shared codec's names; load.py renames the published Kyutai layout
through ttscli.codecs.mimi.kyutai.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ttscli.codecs.mimi import MimiArgs, MimiDecoder, MimiEncoder
from ttscli.codecs.mimi.decoder import DecoderStream
from ttscli.nn.conv import Conv1d


class OutputProjection(nn.Module):
    def __init__(self, latent_dim: int, hidden: int):
        super().__init__()
        self.output_proj = Conv1d(latent_dim, hidden, 1, bias=False)


class Mimi(nn.Module):
    def __init__(self, args: MimiArgs):
        super().__init__()
        self.args = args
        enc, dec = MimiEncoder(args, quantizer=False), MimiDecoder(args)
        self.encoder, self.encoder_transformer, self.downsample = enc.encoder, enc.encoder_transformer, enc.downsample
        self.upsample, self.decoder_transformer, self.decoder = dec.upsample, dec.decoder_transformer, dec.decoder
        self.quantizer = OutputProjection(args.latent_dim, args.hidden_size)
        # the shared modules' methods over the same child modules (kept out of the parameter tree)
        object.__setattr__(self, "_encoder", enc)
        object.__setattr__(self, "_decoder", dec)

    def encode(self, wav: np.ndarray) -> mx.array:
        """A mono 24 kHz waveform -> latents ``[1, T, latent]``, zero-padded to whole frames
        first as upstream's ``encode_to_latent`` does."""
        n = len(wav)
        frame = self.args.frame_samples
        padded = np.zeros(-(-n // frame) * frame, np.float32)
        padded[:n] = wav
        return self._encoder.hidden(mx.array(padded)[None], chunk_hops=None)

    def new_stream(self) -> DecoderStream:
        return self._decoder.new_stream()

    def decode(self, latents: mx.array, stream: DecoderStream | None = None) -> mx.array:
        """Denormalised latents ``[B, T, latent]`` -> ``[B, T * frame_samples]``."""
        emb = self.quantizer.output_proj(latents)
        return self._decoder(emb, stream)
