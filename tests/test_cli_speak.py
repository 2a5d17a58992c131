"""`ttscli speak` end to end with the embedded voice, as a user runs it."""
import signal
import subprocess
import time

import numpy as np
import pytest
import soundfile as sf

from clitools import no_files, only_line, ttscli_exe

FOX = "The quick brown fox jumps over the lazy dog."
LONG = " ".join(f"This is sentence number {i}, spoken to test streaming and interruption." for i in range(12))


def test_speak_fox_offline(run_cli, tmp_path):
    p = run_cli("speak", FOX, "-o", "fox.wav", env={"HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.err
    x, sr = sf.read(str(tmp_path / "fox.wav"))
    assert sr == 22050
    assert 1.5 < len(x) / sr < 5.0
    assert np.sqrt(np.mean(x ** 2)) > 0.02  # speech, not silence


def test_formats(run_cli, tmp_path):
    for ext in ("flac", "ogg", "mp3"):
        p = run_cli("speak", "Hello.", "-o", f"h.{ext}")
        assert p.returncode == 0, p.err
        info = sf.info(str(tmp_path / f"h.{ext}"))
        rate = 24000 if ext == "ogg" else 22050  # Ogg Opus runs at Opus's next rate above 22,050 Hz
        assert info.samplerate == rate and info.frames > 2000


def test_stdin_and_pcm_stdout(run_cli):
    p = run_cli("speak", "-", "-o", "-", "--format", "pcm", "--seed", "1", input=b"Hello from standard input.")
    assert p.returncode == 0, p.err
    w = run_cli("speak", "Hello from standard input.", "-o", "-", "--seed", "1")
    assert w.stdout[:4] == b"RIFF"
    assert w.stdout[44:] == p.stdout  # same samples, WAV adds only its header


def test_seed_reproducible(run_cli, tmp_path):
    a = run_cli("speak", FOX, "-o", "a.wav", "--seed", "3")
    b = run_cli("speak", FOX, "-o", "b.wav", "--seed", "3")
    c = run_cli("speak", FOX, "-o", "c.wav", "--seed", "4")
    assert a.returncode == b.returncode == c.returncode == 0
    xa, xb, xc = (sf.read(str(tmp_path / f))[0] for f in ("a.wav", "b.wav", "c.wav"))
    assert np.array_equal(xa, xb)
    assert len(xa) != len(xc) or not np.array_equal(xa, xc)


def test_speed_changes_length(run_cli, tmp_path):
    run_cli("speak", FOX, "-o", "n.wav", "--seed", "1")
    run_cli("speak", FOX, "-o", "f.wav", "--seed", "1", "--speed", "2")
    n = sf.info(str(tmp_path / "n.wav")).frames
    f = sf.info(str(tmp_path / "f.wav")).frames
    assert 0.35 < f / n < 0.65


def test_mlx_workers_forced_to_one_same_audio(run_cli, tmp_path):
    text = "First sentence here. Second one follows. A third for good measure."
    mlx = ("--backend", "vits=mlx")    # Piper's default on a Linux CPU is onnx (concurrent)
    one = run_cli("speak", text, "-o", "one.wav", "--seed", "5", "--workers", "1", *mlx)
    four = run_cli("speak", text, "-o", "four.wav", "--seed", "5", "--workers", "4", *mlx)
    assert one.returncode == four.returncode == 0
    assert "one at a time" in four.err
    assert np.array_equal(sf.read(str(tmp_path / "one.wav"))[0], sf.read(str(tmp_path / "four.wav"))[0])


def test_stdout_stream_starts_before_generation_ends(tmp_path):
    proc = subprocess.Popen(ttscli_exe() + ["speak", LONG, "-o", "-"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    head = proc.stdout.read(44 + 22050)  # header + half a second of audio
    still_running = proc.poll() is None
    rest = proc.stdout.read()
    proc.wait()
    assert proc.returncode == 0
    assert head[:4] == b"RIFF" and len(head) == 44 + 22050
    assert still_running, "audio arrived only after synthesis finished"
    assert len(rest) > 22050 * 2 * 5  # the long text goes on well past the first chunk


def test_ctrl_c_leaves_no_partial_file(tmp_path):
    proc = subprocess.Popen(ttscli_exe() + ["speak", LONG * 4, "-o", "long.wav"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.name.endswith(".part") for p in tmp_path.iterdir()):
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in only_line(err.decode())
    assert list(tmp_path.iterdir()) == []


def test_play_without_portaudio_or_device_is_one_line(run_cli, tmp_path):
    try:
        import sounddevice as sd

        sd.query_devices(kind="output")
        import pytest

        pytest.skip("this machine has PortAudio and an output device")
    except Exception:  # noqa: BLE001 - probe: no sounddevice, no PortAudio (OSError) or no device all mean "go on"
        pass
    p = run_cli("speak", "Hello.", "--play")
    assert p.returncode == 1
    line = only_line(p.err)
    assert "--play" in line and ("PortAudio" in line or "output device" in line)


def test_no_output_flag_writes_wav_to_a_pipe(run_cli):
    p = run_cli("speak", "Hello.")  # stdout is a pipe here
    assert p.returncode == 0, p.err
    assert p.stdout[:4] == b"RIFF" and len(p.stdout) > 44 + 2000


def test_nothing_speakable_is_an_error_without_a_file(run_cli, tmp_path):
    p = run_cli("speak", "...", "-o", "x.wav")
    assert p.returncode == 2 and "nothing the voice can speak" in only_line(p.err)
    no_files(tmp_path)


@pytest.mark.slow
def test_convert_piper_into_the_cache_then_speak(run_cli, tmp_path):
    cache = tmp_path / "own-cache"
    env = {"TTSCLI_CACHE": str(cache)}
    p = run_cli("convert", "piper-joe", "--to", "mlx", env=env)
    assert p.returncode == 0, p.err
    out = cache / "converted" / "piper-joe" / "mlx"
    assert (out / "model.safetensors").exists() and (out / "config.json").exists()
    again = run_cli("convert", "piper-joe", "--to", "mlx", env=env)
    assert again.returncode == 2 and "--force" in only_line(again.err)
    q = run_cli("convert", "piper-joe", "--to", "mlx", "-q", "-o", tmp_path / "q", env=env)
    assert q.returncode == 2 and not (tmp_path / "q").exists()
    s = run_cli("speak", "Hello.", "-o", "h.wav", env=env)
    assert s.returncode == 0, s.err



def test_ssml_element_it_cannot_honour_is_one_line(run_cli, tmp_path):
    p = run_cli("speak", "<speak>Hi <emphasis>there</emphasis></speak>", "--ssml", "-o", "x.wav")
    assert p.returncode != 0
    assert "SSML element <emphasis> is not supported" in only_line(p.err)
    assert not (tmp_path / "x.wav").exists()


@pytest.mark.slow   # the engine's pauses are covered fast in tests/test_ssml.py and the server's test
def test_pause_marker_is_silence(run_cli, tmp_path):
    plain = run_cli("speak", "Hello there. Goodbye now.", "-o", "plain.wav")
    paused = run_cli("speak", "Hello there. [pause:1.5] Goodbye now.", "-o", "paused.wav")
    assert plain.returncode == 0 and paused.returncode == 0, (plain.err, paused.err)
    a, sr = sf.read(str(tmp_path / "plain.wav"))
    b, _ = sf.read(str(tmp_path / "paused.wav"))
    assert abs((len(b) - len(a)) / sr - 1.5) < 0.2
    quiet = np.convolve(np.abs(b) < 1e-4, np.ones(int(1.4 * sr)), "valid").max()
    assert quiet >= int(1.4 * sr)           # one stretch of 1.4 s of silence at least
