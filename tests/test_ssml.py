"""Pauses and the SSML subset (ttscli.ssml) and how the engine speaks them (ttscli.generate)."""
from __future__ import annotations

import numpy as np
import pytest

from ttscli.errors import UsageError
from ttscli.generate import Request, plain_request, plan, synthesize
from ttscli.models.base import Pipeline
from ttscli.ssml import Pause, Speech, looks_like_ssml, parse_ssml, split_pauses
from ttscli.textnorm import say_as


def english(kind, text, fmt):
    return say_as(kind, text, fmt, "en")


def test_the_subset_becomes_speech_and_pauses():
    pieces = parse_ssml(
        '<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis">Hello <break time="500ms"/> there.'
        ' <say-as interpret-as="characters">TTS</say-as> <sub alias="World Wide Web">WWW</sub>'
        ' <prosody rate="slow">slowly now</prosody>'
        '<p><s>One</s><s>Two</s></p>Call <say-as interpret-as="telephone">555-1234</say-as>'
        '<break strength="strong"/>on <say-as interpret-as="date" format="mdy">5/6/2024</say-as> [pause:1.5] bye'
        '</speak>', english)
    assert pieces == [
        Speech("Hello"), Pause(0.5), Speech("there. T T S World Wide Web"), Speech("slowly now", 0.8),
        Speech("One. Two."), Pause(0.5), Speech("Call five five five, one two three four"), Pause(0.7),
        Speech("on May sixth, twenty twenty four"), Pause(1.5), Speech("bye")]


def test_pause_markers_in_plain_text():
    assert split_pauses("One. [pause:0.5] Two. [PAUSE: 250ms]Three.") == [
        Speech("One. "), Pause(0.5), Speech(" Two. "), Pause(0.25), Speech("Three.")]
    with pytest.raises(UsageError, match="longer than the 10 s"):
        split_pauses("a [pause:11] b")


@pytest.mark.parametrize("ssml, needle", [
    ("<speak><emphasis>loud</emphasis></speak>", "SSML element <emphasis> is not supported"),
    ("<speak><audio src='x.wav'/></speak>", "SSML element <audio> is not supported"),
    ("<speak><prosody pitch='high'>x</prosody></speak>", "<prosody pitch> is not supported"),
    ("<speak xml:lang='fr'>x</speak>", "<speak lang> is not supported"),
    ("<p>no speak</p>", "<speak> as its outer element"),
    ("<speak>x<break time='forever'/></speak>", "not a duration"),
    ("<speak>x<break time='20s'/></speak>", "longer than the 10 s"),
    ("<speak><prosody rate='1000%'>x</prosody></speak>", "within 25% and 400%"),
    ("<speak><say-as interpret-as='currency'>5</say-as></speak>", "not supported"),
    ("<speak><sub>x</sub></speak>", "<sub> needs an alias"),
    ("<speak>unclosed", "not well-formed XML"),
    ("<speak><break time='1s'/></speak>", "no words to speak"),
    ('<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY lol "lol">]><speak>&lol;</speak>',
     "document type declaration"),
    ('<!DOCTYPE speak SYSTEM "file:///etc/passwd"><speak>x</speak>', "document type declaration"),
])
def test_what_cannot_be_honoured_is_an_error_naming_it(ssml, needle):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(")):
        parse_ssml(ssml, english)


def test_ssml_is_detected_only_by_a_leading_speak_element():
    assert looks_like_ssml("  <speak>Hi</speak>")
    assert looks_like_ssml('<?xml version="1.0"?>\n<speak version="1.1">Hi</speak>')
    assert not looks_like_ssml("I <speak> softly")
    assert not looks_like_ssml("<speaker>Hi</speaker>")


class Echo(Pipeline):
    """Audio whose length tells the text it was asked for: one sample per character (at 100 Hz)."""
    sample_rate = 100
    max_chunk_chars = 400

    def __init__(self):
        super().__init__()
        self.heard: list[tuple[str, float]] = []

    def generate(self, r: Request):
        self.heard.append((r.text, r.speed))
        yield np.ones(len(r.text), np.float32)


def test_the_engine_speaks_normalized_pieces_with_silences_between():
    pipe = Echo()
    req = Request(text='<speak>It costs $5. <break time="2s"/><prosody rate="fast">Bye at 3:30 pm.</prosody></speak>',
                  ssml=True, speed=0.8)
    audio = np.concatenate(list(synthesize(pipe, req)))
    assert pipe.heard == [("It costs five dollars.", 0.8), ("Bye at three thirty P M.", 0.8 * 1.25)]
    first = len("It costs five dollars.")
    assert np.all(audio[:first] == 1) and np.all(audio[first:first + 200] == 0)
    assert len(audio) == first + 200 + len("Bye at three thirty P M.")


def test_sentence_silence_and_markers_and_normalization_off():
    pipe = Echo()
    req = Request(text="One $5. Two. [pause:0.3]Three.", sentence_silence=0.5, normalize_text=False)
    audio = np.concatenate(list(synthesize(pipe, req)))
    assert [t for t, _ in pipe.heard] == ["One $5.", "Two.", "Three."]
    silences = np.diff(np.flatnonzero(np.diff(np.r_[1, audio, 1] == 0)))[::2]
    assert list(silences) == [50, 80, 50]     # after each sentence; the marker adds to its sentence's


def test_a_model_without_speed_refuses_prosody_rate():
    with pytest.raises(UsageError, match="cannot honour SSML <prosody rate>"):
        plan(type("Spec", (), {"id": "m", "languages": ["en"]})(),
             Request(text='<speak><prosody rate="slow">x</prosody></speak>', ssml=True), honours_speed=False)


def test_pauses_alone_are_not_speech():
    with pytest.raises(UsageError, match="no words to speak"):
        plan(None, Request(text="[pause:1] [pause:2]"))


def test_the_row_scheduler_takes_normalized_text_and_refuses_pauses():
    assert plain_request(None, Request(text="Pay $5 now.")).text == "Pay five dollars now."
    with pytest.raises(UsageError, match="cannot hold pauses"):
        plain_request(None, Request(text="Pay [pause:1] now."))
    with pytest.raises(UsageError, match="cannot hold pauses"):
        plain_request(None, Request(text="One. Two.", sentence_silence=0.2))
