"""espeak-ng through ``espeakng-loader``'s library, shared by the families whose text front end
uses it (Piper's phonemes, Kokoro's out-of-vocabulary words).

espeak-ng has process-wide state (the voice, its buffers): one instance per process, one call at
a time. ``passes`` runs ``espeak_TextToPhonemes`` over a text clause by clause in one or more
phoneme modes and returns, per clause, the phonemes, the clause's own text and whether the text
ended there; what a family makes of them (terminators, ties, mapping to its phoneme set) stays
in the family.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Sequence

from ttscli.errors import BackendUnavailableError, UsageError

AUDIO_OUTPUT_SYNCHRONOUS = 0x02
PHONEMES_IPA = 0x02
PHONEMES_TIE = 0x80
CHARS_AUTO = 0


def separator_mode(sep: str) -> int:
    """The phonememode bits that put ``sep`` between phonemes (bits 8-23)."""
    return ord(sep) << 8


class Espeak:
    """Process-wide espeak-ng (it has global state): load once, one call at a time."""

    _lock = threading.Lock()
    _instance: "Espeak | None" = None

    def __init__(self, lib_path: str | None = None, data_dir: str | None = None):
        try:
            import espeakng_loader
        except ImportError as err:
            raise BackendUnavailableError("espeak-ng is missing: pip install espeakng-loader") from err
        self.lib = ctypes.CDLL(lib_path or espeakng_loader.get_library_path())
        self.data_dir = data_dir or espeakng_loader.get_data_path()
        self.lib.espeak_Initialize.restype = ctypes.c_int
        self.lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self.lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self.lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        self.lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        if self.lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, self.data_dir.encode(), 0) < 0:
            raise BackendUnavailableError(f"espeak-ng failed to initialise with data at {self.data_dir}")
        self.voice: str | None = None

    @classmethod
    def get(cls) -> "Espeak":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def passes(self, text: str, voice: str, modes: Sequence[int]) -> list[list[tuple[str, str, bool]]]:
        """One pass over ``text`` per phoneme mode, under one lock: per clause (phonemes, clause
        text, at_eof)."""
        with self._lock:
            if voice != self.voice:
                if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
                    raise UsageError(f"espeak-ng has no voice {voice!r}")
                self.voice = voice
            raw = text.encode("utf-8", errors="replace")
            return [self._pass(raw, mode) for mode in modes]

    def _pass(self, raw: bytes, mode: int) -> list[tuple[str, str, bool]]:
        buf = ctypes.create_string_buffer(raw)
        base = ctypes.addressof(buf)
        ptr = ctypes.c_void_p(base)
        out = []
        carry = ""           # espeak reads one character past a clause end and keeps it
        while ptr.value:
            start = ptr.value - base
            phonemes = self.lib.espeak_TextToPhonemes(ctypes.byref(ptr), CHARS_AUTO, mode)
            at_eof = not ptr.value
            span = (raw[start:] if at_eof else raw[start: ptr.value - base]).decode("utf-8", errors="replace")
            out.append(((phonemes or b"").decode("utf-8", errors="replace"),
                        carry + (span if at_eof else span[:-1]), at_eof))
            carry = "" if at_eof else span[-1:]
        return out
