"""Sizes and token ids of Chatterbox's T3 and voice encoder.

The published folder has no config file: upstream hard-codes the sizes in its constructors
(T3Config, LLAMA_520M_CONFIG_DICT, VoiceEncConfig).  The defaults below are those values; the
widths and depths are then read off the tensors (``from_weights``), so a smaller checkpoint in
the same layout (the test fixture) loads through the same path.  The head width is fixed at 64,
as in the published model: the tensors cannot tell it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ttscli.errors import CheckpointError
from ttscli.lm.config import LMArgs, RopeArgs

HEAD_DIM = 64


@dataclass
class T3Args:
    hidden_size: int = 1024
    num_hidden_layers: int = 30
    intermediate_size: int = 4096
    head_dim: int = HEAD_DIM
    rms_norm_eps: float = 1e-5
    backbone_vocab: int = 8                 # tfmr.embed_tokens: present in the file, never used
    rope: RopeArgs = field(default_factory=lambda: RopeArgs(theta=500000.0, type="llama3", factor=8.0,
                                                            low_freq_factor=1.0, high_freq_factor=4.0,
                                                            original_max_position_embeddings=8192))
    text_vocab: int = 704
    speech_vocab: int = 8194
    start_text_token: int = 255
    stop_text_token: int = 0
    start_speech_token: int = 6561
    stop_speech_token: int = 6562
    max_text_tokens: int = 2048
    max_speech_tokens: int = 4096
    speech_cond_prompt_len: int = 150
    speaker_embed_size: int = 256
    perceiver_queries: int = 32
    perceiver_heads: int = 4

    @property
    def num_heads(self) -> int:
        return self.hidden_size // self.head_dim

    def lm_args(self) -> LMArgs:
        return LMArgs(hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
                      num_attention_heads=self.num_heads, num_key_value_heads=self.num_heads,
                      head_dim=self.head_dim, intermediate_size=self.intermediate_size,
                      rms_norm_eps=self.rms_norm_eps, vocab_size=self.backbone_vocab, rope=self.rope)

    @classmethod
    def from_weights(cls, shapes: Mapping[str, Sequence[int]], source: str = "t3_cfg.safetensors") -> T3Args:
        """Width, depth, MLP width and vocabularies from the tensors; the rest as published."""
        try:
            text_vocab, hidden = shapes["text_emb.weight"]
            speech_vocab = shapes["speech_emb.weight"][0]
            ffn = shapes["tfmr.layers.0.mlp.gate_proj.weight"][0]
            spk = shapes["cond_enc.spkr_enc.weight"][1]
            queries = shapes["cond_enc.perceiver.pre_attention_query"][1]
            backbone_vocab = shapes["tfmr.embed_tokens.weight"][0]
        except (KeyError, ValueError, IndexError) as e:
            raise CheckpointError(f"{source}: not a Chatterbox T3 checkpoint (no usable {e})") from None
        layers = 1 + max((int(k.split(".")[2]) for k in shapes if k.startswith("tfmr.layers.")), default=-1)
        if hidden % HEAD_DIM:
            raise CheckpointError(f"{source}: width {hidden} is not a multiple of the head width {HEAD_DIM}")
        return cls(hidden_size=int(hidden), num_hidden_layers=layers, intermediate_size=int(ffn),
                   text_vocab=int(text_vocab), speech_vocab=int(speech_vocab), speaker_embed_size=int(spk),
                   perceiver_queries=int(queries), backbone_vocab=int(backbone_vocab))


@dataclass
class VEArgs:
    """The voice encoder (upstream VoiceEncConfig)."""

    num_mels: int = 40
    sample_rate: int = 16000
    hidden_size: int = 256
    embed_size: int = 256
    num_layers: int = 3
    n_fft: int = 400
    hop: int = 160
    partial_frames: int = 160
    rate: float = 1.3                       # partials per second (upstream's default)
    min_coverage: float = 0.8
    trim_top_db: float = 20.0

    @classmethod
    def from_weights(cls, shapes: Mapping[str, Sequence[int]], source: str = "ve.safetensors") -> VEArgs:
        try:
            four_h, mels = shapes["lstm.weight_ih_l0"]
            embed = shapes["proj.weight"][0]
        except (KeyError, ValueError) as e:
            raise CheckpointError(f"{source}: not a Chatterbox voice encoder (no usable {e})") from None
        layers = sum(1 for k in shapes if k.startswith("lstm.weight_ih_l"))
        return cls(num_mels=int(mels), hidden_size=int(four_h) // 4, embed_size=int(embed), num_layers=layers)
