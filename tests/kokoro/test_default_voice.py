"""Kokoro's voice for a request without --voice: the registry's default, or the voice named for the
request's language (English is spoken by the voice measured clearest in English)."""
import numpy as np

from ttscli.generate import Request
from ttscli.models.kokoro.load import default_voices
from ttscli.models.kokoro.pipeline import KokoroPipeline
from ttscli.registry import load_registry


def test_registry_names_an_english_voice():
    default, by_language = default_voices(load_registry().resolve("kokoro-82m"))
    assert default == "jf_alpha"
    assert by_language == {"en": "jf_gongitsune"}


def test_a_request_without_a_voice_takes_its_languages_voice(kokoro_model, kokoro_voices, kokoro_vocab):
    default, by_language = default_voices(load_registry().resolve("kokoro-82m"))
    pipe = KokoroPipeline(kokoro_model, kokoro_voices, kokoro_vocab, default, by_language)

    def audio(text, lang, voice=None):
        return np.concatenate(list(pipe.generate(Request(text=text, language=lang, voice=voice))))

    en = audio("Good morning.", "en")
    assert np.array_equal(en, audio("Good morning.", "en", "jf_gongitsune"))
    assert not np.array_equal(en, audio("Good morning.", "en", "jf_alpha"))
    assert np.array_equal(audio("おはよう。", "ja"), audio("おはよう。", "ja", "jf_alpha"))


def test_an_unknown_language_voice_is_dropped(kokoro_model, kokoro_voices, kokoro_vocab):
    pipe = KokoroPipeline(kokoro_model, kokoro_voices, kokoro_vocab, "jf_alpha", {"en": "no_such_voice"})
    assert pipe.voice_for("en") == "jf_alpha" and pipe.voice_for("ja") == "jf_alpha"
