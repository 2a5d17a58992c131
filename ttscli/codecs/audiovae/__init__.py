"""VoxCPM's AudioVAE (V2): 16 kHz audio -> 64-d latents at 25 Hz, and latents -> 48 kHz audio.

A causal DAC-style codec (snake activations, depthwise residual units, weight-normed convs)
whose decoder is conditioned on the output rate.  Shared so any family built on these latents
loads the same ``audiovae.pth`` / ``audiovae.safetensors``.
"""
from ttscli.codecs.audiovae.config import AudioVAEArgs
from ttscli.codecs.audiovae.model import AudioVAE, DecodeStream, fold_weight_norm

__all__ = ["AudioVAE", "AudioVAEArgs", "DecodeStream", "fold_weight_norm"]
