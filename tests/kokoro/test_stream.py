"""Kokoro with --stream: a chunk's first audio comes from a short first piece, not the whole chunk."""
import numpy as np
import pytest

from ttscli.generate import Request
from ttscli.models.kokoro.pipeline import STREAM_PHONEMES, KokoroPipeline, pieces_of

TEXT = ("The quick brown fox jumps over the lazy dog. It was a sunny day, and everyone in the town was happy. "
        "Then the rain came down, and the children ran inside.")


def test_pieces_split_only_the_first_when_streaming():
    ps = "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˈOvəɹ ðə lˈAzi dˈɑɡ. " * 8
    assert len(pieces_of(ps, False)) == 1
    first, *rest = pieces_of(ps, True)
    assert len(first) <= STREAM_PHONEMES and first.endswith(".") and rest
    assert " ".join([first, *rest]) == ps.strip()


@pytest.mark.slow
def test_stream_yields_a_short_first_piece(kokoro_model, kokoro_voices, kokoro_vocab):
    pipe = KokoroPipeline(kokoro_model, kokoro_voices, kokoro_vocab)
    plain = list(pipe.generate(Request(text=TEXT, language="en")))
    streamed = list(pipe.generate(Request(text=TEXT, language="en", stream=True)))
    assert len(plain) == 1 and len(streamed) >= 2
    whole = sum(map(len, plain))
    assert len(streamed[0]) < 0.6 * whole
    # the same speech, cut in two: about as long
    assert abs(sum(map(len, streamed)) - whole) < 0.15 * whole
    assert all(np.isfinite(x).all() and np.abs(x).max() > 0.01 for x in streamed)
