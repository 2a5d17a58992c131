"""Chatterbox pipeline wiring on the tiny checkpoint: voices (default, clone, saved), T3 tokens
into S3Gen one-shot and streamed, limits.  S3Gen here is a recording double that checks what it
is handed (its numerics are tested in tests/codecs/s3gen against upstream)."""
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from ttscli.errors import GenerationError, UsageError
from ttscli.generate import Request
from ttscli.models.chatterbox.load import (
    load_conds,
    load_t3,
    load_tokenizer,
    load_voice_encoder,
)
from ttscli.models.chatterbox.pipeline import ChatterboxPipeline, speech_tokens

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox"
TINY = FIX / "tiny"
G = np.load(FIX / "t3_goldens.npz")


class RecordingS3Gen:
    """960 samples per token whose value is the token id; remembers every call."""

    first_audio_tokens = 8
    flow = SimpleNamespace(a=SimpleNamespace(pre_lookahead_len=3))

    def __init__(self):
        self.calls = []

    def embed_ref(self, wav, sr):
        self.calls.append(("embed_ref", len(wav), sr))
        T = 10
        return {"prompt_token": np.arange(T)[None], "prompt_token_len": np.array([T]),
                "prompt_feat": np.zeros((1, 2 * T, 80), np.float32), "embedding": np.ones((1, 192), np.float32)}

    def tokenize(self, wav16k, max_tokens=None):
        self.calls.append(("tokenize", len(wav16k), max_tokens))
        return np.arange(min(max_tokens, len(wav16k) // 640)) % 6561

    def generate(self, tokens, ref, times=None, key=None):
        self.calls.append(("generate", np.asarray(tokens).tolist(), ref))
        return np.repeat(np.asarray(tokens, np.float32), 960)

    def stream(self, chunks, ref, times=None, key=None):
        for c, last in chunks:
            self.calls.append(("stream", np.asarray(c).tolist(), last))
            yield np.repeat(np.asarray(c, np.float32), 960)
            if last:
                return


@pytest.fixture(scope="module")
def parts():
    return load_t3(TINY), load_voice_encoder(TINY), load_tokenizer(TINY), load_conds(TINY)


def make(parts):
    t3, ve, tok, conds = parts
    return ChatterboxPipeline(None, t3, ve, tok, RecordingS3Gen(), conds)


GREEDY = {"temperature": 0.0, "repetition_penalty": 1.2, "cfg_weight": 0.5, "min_p": 0.05, "top_p": 1.0}


def test_speak_default_voice_one_shot(parts):
    pipe = make(parts)
    r = Request(text="hello world, this is the tiny check", max_frames=20, knobs=GREEDY, ignore_eos=True)
    wav = np.concatenate(list(pipe.generate(r)))
    kept = speech_tokens(G["greedy_rp12"].tolist())
    assert 0 < len(kept) < 20      # this golden draws a start-of-speech late: upstream keeps what follows
    assert wav.dtype == np.float32 and len(wav) == 960 * len(kept)
    (kind, toks, gen), = pipe.s3gen.calls
    assert kind == "generate" and toks == kept.tolist() and gen is pipe.default_conds.gen
    assert pipe.stats.frames == 20


def test_stream_equals_one_shot_tokens(parts):
    pipe = make(parts)
    r = Request(text="hello world, this is the tiny check", max_frames=20, knobs=GREEDY, ignore_eos=True,
                stream=True, first_chunk_frames=9, chunk_frames=2)
    pieces = list(pipe.generate(r))
    sent = [c[1] for c in pipe.s3gen.calls]
    # chunks count speech codes only (the golden's 6799 and start-of-speech ids are not sent):
    # the first chunk's 9, then hops of 2 and 4 (each twice the one before), and the chunk T3
    # ends on (2 of the next hop's 8) marked last
    assert [len(s) for s in sent] == [9, 2, 4, 2] and sum(sent, []) == [t for t in G["greedy_rp12"] if t < 6561]
    assert [c[2] for c in pipe.s3gen.calls] == [False, False, False, True]
    assert len(pieces) == len(sent) and pipe.stats.first_audio_s is not None


def test_stream_first_chunk_is_the_familys_or_refused(parts):
    base = dict(text="hello world, this is the tiny check", max_frames=20, knobs=GREEDY, ignore_eos=True,
                stream=True)
    pipe = make(parts)
    list(pipe.generate(Request(**base)))            # left open: the fewest tokens that make audio
    assert len(pipe.s3gen.calls[0][1]) == RecordingS3Gen.first_audio_tokens == 8
    pipe = make(parts)
    with pytest.raises(UsageError, match=r"--first-chunk-frames 7: .* at least 8 speech tokens \(3 of lookahead"):
        list(pipe.generate(Request(**base, first_chunk_frames=7)))
    assert pipe.s3gen.calls == [] and pipe.stats.frames == 0      # refused before T3 ran


def test_limit_is_an_error(parts):
    pipe = make(parts)
    with pytest.raises(GenerationError, match="limit of 5"):
        list(pipe.generate(Request(text="hello", max_frames=5, knobs=GREEDY)))


def test_clone_and_saved_voice(parts, tmp_path):
    pipe = make(parts)
    wav24 = np.repeat(G["ve_wav"], 3)[::2].astype(np.float32)      # 16 kHz golden wave at 24 kHz
    r = Request(text="hello", ref_audio=wav24, ref_sample_rate=24000, save_voice=tmp_path / "v.safetensors",
                max_frames=4, knobs=GREEDY, ignore_eos=True)
    list(pipe.generate(r))
    kinds = [c[0] for c in pipe.s3gen.calls]
    assert kinds == ["embed_ref", "tokenize", "generate"]
    assert pipe.s3gen.calls[1][2] == 150
    saved = tmp_path / "v.safetensors"
    assert saved.exists()
    again = make(parts)
    list(again.generate(Request(text="hello", voice=str(saved), max_frames=4, knobs=GREEDY, ignore_eos=True)))
    assert [c[0] for c in again.s3gen.calls] == ["generate"]        # nothing re-encoded
    first, second = pipe.s3gen.calls[-1], again.s3gen.calls[-1]
    assert first[1] == second[1]
    for k in first[2]:
        assert np.array_equal(np.asarray(first[2][k]), second[2][k])


def test_preset_voice_names_are_refused(parts):
    with pytest.raises(UsageError, match="no preset voices"):
        list(make(parts).generate(Request(text="hi", voice="ryan")))


def test_speech_tokens_as_upstream_drops_them():
    assert speech_tokens([5, 6561, 7, 8, 6562, 9]).tolist() == [7, 8]
    assert speech_tokens([5, 7000, 8]).tolist() == [5, 8]


def test_watermark_knob(parts, monkeypatch):
    import sys
    import types

    pipe = make(parts)
    r = Request(text="hello", max_frames=4, knobs={**GREEDY, "watermark": True}, ignore_eos=True)
    monkeypatch.setitem(sys.modules, "perth", None)          # not installed
    with pytest.raises(UsageError, match="pip install resemble-perth"):
        list(pipe.generate(r))
    seen = {}

    class Marker:
        def apply_watermark(self, wav, sample_rate):
            seen["sr"] = sample_rate
            return wav + 1.0

    monkeypatch.setitem(sys.modules, "perth", types.SimpleNamespace(PerthImplicitWatermarker=Marker))
    plain = np.concatenate(list(make(parts).generate(Request(text="hello", max_frames=4, knobs=GREEDY,
                                                             ignore_eos=True))))
    marked = np.concatenate(list(pipe.generate(r)))
    assert seen["sr"] == 24000 and np.array_equal(marked, plain + 1.0)
    with pytest.raises(UsageError, match="cannot be combined with --stream"):
        list(pipe.generate(Request(text="hello", stream=True, knobs={"watermark": True})))


def load_mlx_audio_bench():
    """benchmarks/chatterbox_mlx_audio.py (outside the package: mlx-audio is a peer, not a feature)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "chatterbox_mlx_audio.py"
    spec = importlib.util.spec_from_file_location("chatterbox_mlx_audio", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mlx_audio_peer_needs_its_interpreter(monkeypatch, capsys):
    """The mlx-audio benchmark says how to provide mlx-audio: one line, exit 2, before any long run."""
    bench = load_mlx_audio_bench()
    monkeypatch.delenv(bench.ENV, raising=False)
    with pytest.raises(UsageError, match=bench.ENV):
        bench.bench_peer("Hi.", 1, max_frames=5)
    assert bench.main(["--frames", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and bench.ENV in err[0]
    monkeypatch.setenv(bench.ENV, "/nonexistent/python")
    with pytest.raises(UsageError, match="cannot run"):
        bench.bench_peer("Hi.", 1, max_frames=5)
    monkeypatch.setenv(bench.ENV, sys.executable)          # an interpreter without mlx-audio
    with pytest.raises(UsageError, match="mlx-audio failed under .*mlx_audio"):
        bench.bench_peer("Hi.", 1, max_frames=5)
