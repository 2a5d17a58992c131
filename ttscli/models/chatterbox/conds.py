"""A Chatterbox voice: T3's conditionals and S3Gen's reference dict (the reference's
``Conditionals``).

The published default voice, ``conds.pt``, is a torch pickle; it is read through
ttscli.torchfile, which accepts only tensors and plain containers and refuses any other
pickled global before calling it.  A saved voice (``--save-voice``) is a safetensors file of the
same tensors, so loading it re-encodes nothing and unpickles nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ttscli import voicefile
from ttscli.errors import CheckpointError, UsageError

FORMAT = "ttscli-chatterbox-voice"
_T3_KEYS = ("speaker_emb", "cond_prompt_speech_tokens", "emotion_adv")
_GEN_KEYS = ("prompt_token", "prompt_token_len", "prompt_feat", "embedding")


@dataclass
class Conditionals:
    speaker_emb: np.ndarray                  # [1, 256] voice-encoder embedding
    prompt_tokens: np.ndarray | None         # [1, P <= 150] S3 tokens of the first 6 s
    exaggeration: float = 0.5
    gen: dict[str, np.ndarray] = field(default_factory=dict)   # S3Gen's embed_ref dict

    def t3_cond(self, exaggeration: float | None = None):
        from ttscli.models.chatterbox.t3 import T3Cond

        return T3Cond(self.speaker_emb, self.prompt_tokens,
                      self.exaggeration if exaggeration is None else float(exaggeration))

    # -- the published conds.pt -------------------------------------------------------------------
    @classmethod
    def from_torch(cls, path: Path) -> Conditionals:
        from ttscli.torchfile import load

        obj = load(path)
        try:
            t3, gen = obj["t3"], obj["gen"]
            speaker = np.asarray(t3["speaker_emb"], np.float32)
            prompt = t3.get("cond_prompt_speech_tokens")
            emotion = t3.get("emotion_adv", 0.5)
        except (TypeError, KeyError) as e:
            raise CheckpointError(f"{path}: not a Chatterbox conditionals file (no {e})") from None
        if t3.get("clap_emb") is not None:
            raise CheckpointError(f"{path}: a CLAP embedding is set; Chatterbox does not use one")
        ex = float(np.asarray(emotion).reshape(-1)[0])
        gen_np = {k: np.asarray(v) for k, v in gen.items() if v is not None}
        return cls._checked(speaker, None if prompt is None else np.asarray(prompt, np.int64), ex, gen_np, str(path))

    # -- saved voices -------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        tensors = {"t3.speaker_emb": np.asarray(self.speaker_emb, np.float32),
                   "t3.emotion_adv": np.full((1, 1, 1), self.exaggeration, np.float32)}
        if self.prompt_tokens is not None:
            tensors["t3.cond_prompt_speech_tokens"] = np.asarray(self.prompt_tokens, np.int64)
        for k, v in self.gen.items():
            tensors[f"gen.{k}"] = v
        voicefile.save(path, tensors, {"format": FORMAT, "version": "1"})

    @classmethod
    def load(cls, path: Path) -> Conditionals:
        tensors, _ = voicefile.load(path, FORMAT, "Chatterbox")
        try:
            speaker = tensors["t3.speaker_emb"]
            emotion = float(tensors["t3.emotion_adv"].reshape(-1)[0])
        except KeyError as e:
            raise UsageError(f"{path}: saved voice lacks {e}") from None
        gen = {k[4:]: v for k, v in tensors.items() if k.startswith("gen.")}
        return cls._checked(speaker, tensors.get("t3.cond_prompt_speech_tokens"), emotion, gen, str(path))

    @classmethod
    def _checked(cls, speaker: Any, prompt: Any, ex: float, gen: dict, source: str) -> Conditionals:
        speaker = np.asarray(speaker, np.float32).reshape(1, -1)
        if prompt is not None:
            prompt = np.asarray(prompt, np.int64).reshape(1, -1)
            if prompt.size and (prompt.min() < 0 or prompt.max() >= 6561):
                raise CheckpointError(f"{source}: prompt speech tokens outside 0..6560")
        missing = [k for k in _GEN_KEYS if k not in gen]
        if missing:
            raise CheckpointError(f"{source}: the S3Gen reference lacks {', '.join(missing)}")
        return cls(speaker, prompt, ex, gen)
