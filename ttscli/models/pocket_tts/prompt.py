"""Text and voice prompts as upstream prepares them (pocket_tts/models/text_chunking.py
``prepare_text_prompt``, pocket_tts/data/audio_utils.py ``end_on_pause``)."""
from __future__ import annotations

import re

import numpy as np

from ttscli.errors import UsageError

from .config import ModelArgs

_TERMINAL = ".!?\u2026"
_WEAK = ",;:-\u2013\u2014"
_CLOSERS = "\"'\u201d\u2019)]\u00bb"


def _terminal_punctuation(text: str) -> str:
    """End on a sentence mark: a trailing comma/colon/dash becomes a period, anything else not
    already ending on one (before closing quotes or brackets) gets a period appended."""
    core = text.rstrip(_CLOSERS + " ")
    closers = text[len(core):].strip()
    if not core or core[-1] in _TERMINAL:
        return text
    if core[-1] in _WEAK:
        return core.rstrip(_WEAK + " ") + "." + closers
    return text + "."


def prepare_text(text: str, args: ModelArgs) -> tuple[str, int]:
    """(the text the model reads, upstream's guess of frames to run past EOS: 3 for up to four
    words, else 1)."""
    text = text.strip()
    if args.replace_characters:
        text = " ".join(text.translate(str.maketrans(args.replace_characters)).split())
        text = re.sub(r"([.!?\u2026])\s*[,;:]", r"\1", text)
    if not text:
        raise UsageError("the text is empty")
    text = text.replace("\n", " ").replace("\r", " ").replace("  ", " ")
    if args.remove_semicolons:
        text = text.replace(";", ",")
    guess = 3 if len(text.split()) <= 4 else 1
    if args.capitalize_first_letter and not text[0].isupper():
        text = text[0].upper() + text[1:]
    if args.append_terminal_punctuation:
        text = _terminal_punctuation(text)
    if args.pad_with_spaces_for_short_inputs and len(text.split()) < 5:
        text = " " * 8 + text
    return text, guess


def end_on_pause(wav: np.ndarray, sample_rate: int, pause_s: float = 0.08, fade_s: float = 0.02,
                 floor_db: float = 35.0) -> np.ndarray:
    """A voice reference cut after its last 20 ms frame within ``floor_db`` of the loudest, the
    last ``fade_s`` faded out and ``pause_s`` of silence appended: a reference that stops on
    speech makes the model continue that utterance."""
    frame = max(1, int(0.02 * sample_rate))
    n = len(wav) // frame
    if n == 0:
        return wav
    rms = np.sqrt(np.square(wav[: n * frame].reshape(n, frame).astype(np.float64)).mean(axis=1))
    db = 20 * np.log10(rms + 1e-12)
    end = (int(np.nonzero(db > db.max() - floor_db)[0][-1]) + 1) * frame
    out = wav[:end].astype(np.float32).copy()
    fade = min(int(fade_s * sample_rate), end)
    out[end - fade:] *= np.linspace(1, 0, fade, dtype=np.float32)
    return np.concatenate([out, np.zeros(int(pause_s * sample_rate), np.float32)])
