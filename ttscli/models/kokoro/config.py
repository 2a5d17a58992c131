"""Kokoro-82M's configuration (hexgrad's ``config.json``; kokoro-onnx ships the same file)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ttscli.config import BaseArgs


@dataclass
class PLBertArgs(BaseArgs):
    hidden_size: int = 768
    num_attention_heads: int = 12
    intermediate_size: int = 2048
    max_position_embeddings: int = 512
    num_hidden_layers: int = 12
    embedding_size: int = 128
    vocab_size: int = 178
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12


@dataclass
class ISTFTNetArgs(BaseArgs):
    upsample_rates: list = field(default_factory=lambda: [10, 6])
    upsample_kernel_sizes: list = field(default_factory=lambda: [20, 12])
    upsample_initial_channel: int = 512
    resblock_kernel_sizes: list = field(default_factory=lambda: [3, 7, 11])
    resblock_dilation_sizes: list = field(default_factory=lambda: [[1, 3, 5], [1, 3, 5], [1, 3, 5]])
    gen_istft_n_fft: int = 20
    gen_istft_hop_size: int = 5


@dataclass
class ModelArgs(BaseArgs):
    n_token: int = 178
    hidden_dim: int = 512
    style_dim: int = 128
    n_layer: int = 3
    max_dur: int = 50
    dim_in: int = 64
    text_encoder_kernel_size: int = 5
    sample_rate: int = 24000
    plbert: PLBertArgs = field(default_factory=PLBertArgs)
    istftnet: ISTFTNetArgs = field(default_factory=ISTFTNetArgs)
    vocab: dict = field(default_factory=dict)

    @property
    def hop(self) -> int:
        """Samples per duration frame (600 at 24 kHz: 25 ms): the decoder doubles the frame
        rate, the generator's upsampling and the iSTFT hop do the rest."""
        prod = 1
        for r in self.istftnet.upsample_rates:
            prod *= r
        return 2 * prod * self.istftnet.gen_istft_hop_size

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)
