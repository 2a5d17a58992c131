"""The whole Pocket TTS checkpoint as one tree: ``flow_lm`` (flow_lm.py) and ``mimi`` (mimi.py),
upstream's TTSModel (pocket_tts/models/tts_model.py), whose state dict is the published file."""
from __future__ import annotations

import mlx.nn as nn

from .config import ModelArgs
from .flow_lm import FlowLM
from .mimi import Mimi


class PocketTTS(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.flow_lm = FlowLM(args.flow_lm, args.latent_dim)
        self.mimi = Mimi(args.mimi)
