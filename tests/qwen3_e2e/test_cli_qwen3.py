"""Qwen3-TTS through the installed `ttscli`, on complete tiny checkpoints (see e2e_fixture.py)."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import no_files, only_line

from e2e_fixture import build

CV = "qwen3-tts-1.7b-customvoice"
BASE = "qwen3-tts-0.6b-base"
VD = "qwen3-tts-1.7b-voicedesign"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("qwen3-e2e")
    return {k: build(k, root / k, eos_gain=3.0) for k in ("customvoice", "base", "voicedesign")}


@pytest.fixture(scope="module")
def ref_wav(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "ref.flac"
    sr = 44100
    t = np.arange(int(sr * 1.5)) / sr
    x = 0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    sf.write(str(path), np.stack([x, x * 0.8], 1).astype(np.float32), sr)  # stereo, 44.1 kHz
    return path


def wav(path):
    x, sr = sf.read(str(path), dtype="float32")
    assert sr == 24000
    return x


def test_customvoice_speak_is_seeded(run_cli, tmp_path, ckpt):
    args = ["speak", "Hello there. How are you?", "-m", CV, "--model-dir", ckpt["customvoice"], "--voice", "ryan"]
    a = run_cli(*args, "-o", "a.wav", "--seed", "1")
    b = run_cli(*args, "-o", "b.wav", "--seed", "1")
    assert a.returncode == 0 and b.returncode == 0, a.err + b.err
    xa, xb = wav(tmp_path / "a.wav"), wav(tmp_path / "b.wav")
    assert len(xa) % 1920 == 0 and len(xa) > 0 and np.array_equal(xa, xb)


def test_unknown_voice_lists_the_voices(run_cli, tmp_path, ckpt):
    p = run_cli("speak", "Hi.", "-m", CV, "--model-dir", ckpt["customvoice"], "--voice", "nobody", "-o", "x.wav")
    assert p.returncode == 2 and "ryan" in only_line(p.err)
    no_files(tmp_path)


def test_voice_design_requires_instruct(run_cli, tmp_path, ckpt):
    p = run_cli("speak", "Hi.", "-m", VD, "--model-dir", ckpt["voicedesign"], "-o", "x.wav")
    assert p.returncode == 2 and "--instruct" in only_line(p.err)
    ok = run_cli("speak", "Hi.", "-m", VD, "--model-dir", ckpt["voicedesign"], "--instruct", "A calm low voice.",
                 "-o", "x.wav", "--seed", "0")
    assert ok.returncode == 0, ok.err


def test_instruct_refused_on_0_6b(run_cli, tmp_path, ckpt):
    # a Base 0.6B checkpoint: instructions are not supported and must not be dropped silently
    p = run_cli("speak", "Hi.", "-m", BASE, "--model-dir", ckpt["base"], "--instruct", "happy", "-o", "x.wav")
    assert p.returncode == 2, p.err
    only_line(p.err)
    no_files(tmp_path)


def test_max_frames_is_an_error_not_truncation(run_cli, tmp_path, ckpt):
    p = run_cli("speak", "Hello there.", "-m", CV, "--model-dir", ckpt["customvoice"], "--voice", "ryan",
                "--max-frames", "2", "--seed", "1", "-o", "x.wav")
    assert p.returncode == 1 and "max frames" in only_line(p.err)
    no_files(tmp_path)


def test_stream_equals_one_shot(run_cli, tmp_path, ckpt):
    args = ["speak", "Hello there.", "-m", CV, "--model-dir", ckpt["customvoice"], "--voice", "ryan", "--seed", "2"]
    one = run_cli(*args, "-o", "-", "--format", "pcm")
    streamed = run_cli(*args, "--stream", "--first-chunk-frames", "1", "--chunk-frames", "2", "-o", "-",
                       "--format", "pcm")
    assert one.returncode == streamed.returncode == 0, one.err + streamed.err
    a = np.frombuffer(one.stdout, "<i2").astype(np.int32)
    b = np.frombuffer(streamed.stdout, "<i2").astype(np.int32)
    assert a.shape == b.shape and np.abs(a - b).max() <= 1  # one LSB of 16-bit rounding


def test_workers_with_mlx_run_chunks_as_rows_and_match(run_cli, tmp_path, ckpt):
    """--workers on an MLX talker: the chunks are rows of one batch (ttscli.batching), not
    reduced to one at a time, and the audio equals --workers 1's."""
    text = "First sentence here. Second one follows. A third for good measure."
    args = ["speak", text, "-m", CV, "--model-dir", ckpt["customvoice"], "--voice", "ryan", "--seed", "3"]
    one = run_cli(*args, "-o", "one.wav", "--workers", "1")
    four = run_cli(*args, "-o", "four.wav", "--concurrent-worker-count", "4")
    assert one.returncode == four.returncode == 0, one.err + four.err
    assert "one at a time" not in four.err
    assert np.array_equal(wav(tmp_path / "one.wav"), wav(tmp_path / "four.wav"))


def test_clone_save_voice_and_reuse(run_cli, tmp_path, ckpt, ref_wav):
    base = ["-m", BASE, "--model-dir", ckpt["base"], "--seed", "4"]
    c = run_cli("clone", "Words in the new voice.", "--ref", ref_wav, "--ref-text", "A reference sentence.",
                "--save-voice", "v.safetensors", "-o", "clone.wav", *base)
    assert c.returncode == 0, c.err
    assert (tmp_path / "v.safetensors").exists()
    s = run_cli("speak", "Words in the new voice.", "--voice", "v.safetensors", "-o", "again.wav", *base)
    assert s.returncode == 0, s.err
    assert np.array_equal(wav(tmp_path / "clone.wav"), wav(tmp_path / "again.wav"))


def test_clone_x_vector_only(run_cli, tmp_path, ckpt, ref_wav):
    p = run_cli("clone", "Hello.", "--ref", ref_wav, "--x-vector-only", "-m", BASE, "--model-dir", ckpt["base"],
                "--seed", "5", "-o", "x.wav")
    assert p.returncode == 0, p.err
    assert len(wav(tmp_path / "x.wav")) > 0


def test_bench_clones_with_ref_on_a_base_model(run_cli, tmp_path, ckpt, ref_wav):
    p = run_cli("bench", BASE, "--model-dir", ckpt["base"], "--ref", ref_wav, "--ref-text", "Some words.",
                "--repeats", "1", "--warmup", "0", "--json")
    assert p.returncode == 0, p.err
    (fig,) = json.loads(p.stdout)["variants"].values()
    assert fig["audio_s"] > 0 and fig["rtf"] > 0 and fig["frame_ms_p50"] > 0
    # the default table: what a user compares, no internal rows
    assert "per frame, p50 (ms)" in p.err and "talker step" not in p.err and "kernels" not in p.err
    p = run_cli("bench", BASE, "--model-dir", ckpt["base"], "--ref", ref_wav, "--repeats", "1")
    assert p.returncode == 2 and "give --ref-text" in only_line(p.err)


def test_clone_refused_by_customvoice(run_cli, tmp_path, ckpt, ref_wav):
    p = run_cli("clone", "Hello.", "--ref", ref_wav, "--x-vector-only", "-m", CV, "--model-dir", ckpt["customvoice"],
                "-o", "x.wav")
    assert p.returncode == 2 and "cannot clone" in only_line(p.err)


def test_bench_json_and_plot(run_cli, tmp_path, ckpt):
    p = run_cli("bench", CV, "--model-dir", ckpt["customvoice"], "--repeats", "1", "--warmup", "0",
                "--prefill-mode", "batched,sequential", "--prompt-tokens", "16", "--json", "--plot", "frames.png", "-v")
    assert p.returncode == 0, p.err
    # -v's table has the internal rows; a CUDA kernel's row means nothing on this CPU
    assert "talker step, median (ms)" in p.err and "kernels_sampling" in p.err and "CUDA" not in p.err
    report = json.loads(p.stdout)
    v = report["variants"]
    assert set(v) == {"mlx/batched", "mlx/sequential"}
    for fig in ("load_s", "rtf", "frame_ms_p50", "decoder_ms_per_frame", "prefill_ms", "talker_step_ms",
                "mlx_peak_mb", "rss_peak_mb"):
        assert v["mlx/batched"][fig] > 0, fig
    assert v["mlx/batched"]["prefill_tokens"] == 16
    assert v["mlx/batched"]["code_predictor_one_kernel"] == 0      # a CUDA kernel: never on the CPU
    assert "prefill_ms" in report["ratios"]["mlx/sequential vs mlx/batched"]
    assert report["environment"]["mlx"]
    assert (tmp_path / "frames.png").stat().st_size > 1000
