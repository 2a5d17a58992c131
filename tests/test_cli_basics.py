"""The CLI as a user runs it: help, models, and every bad input that needs no model."""
import json

import pytest

from clitools import no_files, only_line

COMMANDS = ["speak", "clone", "convert", "bench", "parity", "models"]


@pytest.mark.parametrize("args", [["--help"], ["-h"], []], ids=["--help", "-h", "no-args"])
def test_help_lists_every_command(run_cli, args):
    p = run_cli(*args)
    assert p.returncode == 0
    out = p.stdout.decode()
    for c in COMMANDS:
        assert c in out


@pytest.mark.parametrize("cmd", COMMANDS)
def test_subcommand_help_has_an_example(run_cli, cmd):
    p = run_cli(cmd, "--help")
    assert p.returncode == 0, p.err
    assert "Example" in p.stdout.decode()


def test_version(run_cli):
    p = run_cli("--version")
    assert p.returncode == 0 and p.stdout.decode().startswith("ttscli ")


def test_python_dash_m_runs_the_same_command():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "ttscli", "--version"], capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout.decode().startswith("ttscli "), p.stderr.decode()
    p = subprocess.run([sys.executable, "-m", "ttscli", "speak"], capture_output=True, timeout=60)
    assert p.returncode == 2 and p.stderr.decode().startswith("error: no text")


def test_models_json_lists_every_registry_entry(run_cli):
    from ttscli.registry import load_registry

    p = run_cli("models", "--json")
    assert p.returncode == 0, p.err
    rows = json.loads(p.stdout)
    assert [r["id"] for r in rows] == [s.id for s in load_registry()]
    by_id = {r["id"]: r for r in rows}
    joe = by_id["piper-joe"]
    assert joe["default"] and joe["weights_local"] and joe["sample_rate"] == 22050
    # no Hugging Face weights exist on a test machine: honest 'absent'
    assert not by_id["qwen3-tts-0.6b-base"]["weights_local"]
    assert by_id["breeze-tts-2"]["license_notice"]
    assert "coreml" not in by_id["qwen3-tts-0.6b-base"]["backends_usable"]["code_decoder"] or \
        __import__("sys").platform == "darwin"
    for r in rows:
        assert r["sample_rate"] > 0


def test_models_table(run_cli):
    p = run_cli("models")
    assert p.returncode == 0
    out = p.stdout.decode()
    assert "piper-joe" in out and "qwen3-tts-1.7b-voicedesign" in out


def test_user_registry_file_adds_a_model(run_cli, tmp_path):
    reg = tmp_path / "mine.toml"
    reg.write_text('[models."my-voice"]\nfamily = "piper"\nsample_rate = 16000\nname = "Mine"\n')
    p = run_cli("models", "--json", "--registry", reg)
    assert p.returncode == 0, p.err
    assert any(r["id"] == "my-voice" and r["sample_rate"] == 16000 for r in json.loads(p.stdout))


def test_bad_registry_file_is_one_line(run_cli, tmp_path):
    reg = tmp_path / "bad.toml"
    reg.write_text("[models.x\n")
    p = run_cli("models", "--registry", reg)
    assert p.returncode == 2
    assert "not valid TOML" in only_line(p.err)


# ---- bad input: one line, exit 2, no file ---------------------------------------------------

def _bad(run_cli, tmp_path, args, needle, code=2, input=None, env=None):
    p = run_cli(*args, input=input, env=env)
    line = only_line(p.err)
    assert p.returncode == code, (p.returncode, p.err)
    assert needle in line, line
    assert line.startswith("error: ")
    no_files(tmp_path)
    return line


def test_no_text(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "-o", "x.wav"], "no text")


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text(run_cli, tmp_path, text):
    _bad(run_cli, tmp_path, ["speak", text, "-o", "x.wav"], "empty")


def test_empty_stdin(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "-", "-o", "x.wav"], "empty", input=b"  \n")


def test_invalid_utf8_stdin(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "-", "-o", "x.wav"], "not valid UTF-8", input=b"caf\xe9 au lait")


def test_invalid_utf8_file(run_cli, tmp_path):
    f = tmp_path / "in.txt"
    f.write_bytes(b"\xff\xfe bad")
    p = run_cli("speak", "--file", f, "-o", "x.wav")
    assert p.returncode == 2 and "not valid UTF-8" in only_line(p.err)
    assert not (tmp_path / "x.wav").exists()


def test_missing_file(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "--file", "nope.txt", "-o", "x.wav"], "cannot read --file")


def test_text_and_file_together(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "hi", "--file", "nope.txt", "-o", "x.wav"], "not both")


def test_text_over_limit(run_cli, tmp_path):
    line = _bad(run_cli, tmp_path, ["speak", "-", "-o", "x.wav"], "32,768", input=("a" * 32_769).encode())
    assert "32,769" in line


def test_text_at_limit_multibyte(run_cli, tmp_path):
    # 10,923 three-byte characters = 32,769 bytes: the limit counts bytes, not characters
    _bad(run_cli, tmp_path, ["speak", "-", "-o", "x.wav"], "UTF-8 bytes", input=("€" * 10_923).encode())


def test_instruction_over_limit(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "hi", "--instruct", "b" * 32_769, "-o", "x.wav"], "--instruct is 32,769")


def test_unknown_model(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "hi", "-m", "nope", "-o", "x.wav"], "unknown model 'nope'")


def test_unknown_flag(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "hi", "--bogus"], "No such option")


def test_unknown_extension(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "hi", "-o", "x.xyz"], "cannot tell the audio format")


def test_missing_output_folder(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "hi", "-o", "nodir/x.wav"], "does not exist")


def test_stream_format_to_stdout(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["speak", "hi", "-o", "-", "--format", "m4a"], "cannot stream")


def test_unimplemented_model(run_cli, tmp_path, tmp_path_factory):
    reg = tmp_path_factory.mktemp("registry") / "future.toml"
    reg.write_text('[models."future-tts"]\nname = "A model announced but not implemented"\nfamily = "piper"\n'
                   'implemented = false\nsample_rate = 24000\nsource = { hf_repo = "x/future-tts", files = [] }\n')
    _bad(run_cli, tmp_path, ["speak", "hi", "-m", "future-tts", "--registry", str(reg), "-o", "x.wav"],
         "does not implement it yet", code=1)


def test_coreml_backend_off_macos(run_cli, tmp_path):
    if __import__("sys").platform == "darwin":
        pytest.skip("Core ML may be available on macOS")
    _bad(run_cli, tmp_path, ["speak", "hi", "-m", "qwen3-tts-0.6b-customvoice", "--code-decoder-backend", "coreml",
                             "-o", "x.wav"], "Core ML needs macOS 15+", code=1)


def test_clone_needs_ref(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["clone", "hi", "-o", "x.wav"], "--ref")


def test_clone_needs_ref_text_or_x_vector(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["clone", "hi", "--ref", "a.wav", "-o", "x.wav"], "--ref-text")


def test_clone_with_model_that_cannot(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["clone", "hi", "--ref", "a.wav", "--x-vector-only", "-m", "piper-joe", "-o", "x.wav"],
         "cannot clone")


def _write(path, data, sr):
    import soundfile as sf

    sf.write(str(path), data, sr)


def test_clone_ref_missing(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["clone", "hi", "--ref", "nope.wav", "--x-vector-only", "-o", "x.wav"], "does not exist")


def test_clone_ref_unreadable(run_cli, tmp_path):
    (tmp_path / "ref").mkdir()
    bad = tmp_path / "ref" / "junk.wav"
    bad.write_bytes(b"this is not audio at all" * 10)
    p = run_cli("clone", "hi", "--ref", bad, "--x-vector-only", "-o", "x.wav")
    assert p.returncode == 2 and "cannot read reference audio" in only_line(p.err)
    assert not (tmp_path / "x.wav").exists()


def test_clone_ref_silent(run_cli, tmp_path):
    import numpy as np

    (tmp_path / "ref").mkdir()
    _write(tmp_path / "ref" / "silent.wav", np.zeros(48000, np.float32), 16000)
    p = run_cli("clone", "hi", "--ref", tmp_path / "ref" / "silent.wav", "--x-vector-only", "-o", "x.wav")
    assert p.returncode == 2 and "silent" in only_line(p.err)
    assert not (tmp_path / "x.wav").exists()


def test_clone_ref_too_long(run_cli, tmp_path):
    import numpy as np

    (tmp_path / "ref").mkdir()
    noise = (np.random.default_rng(0).standard_normal(8000 * 31) * 0.1).astype(np.float32)
    _write(tmp_path / "ref" / "long.flac", noise, 8000)
    p = run_cli("clone", "hi", "--ref", tmp_path / "ref" / "long.flac", "--x-vector-only", "-o", "x.wav")
    assert p.returncode == 2 and "the limit is 30 s" in only_line(p.err)
    assert not (tmp_path / "x.wav").exists()


def test_hf_weights_absent_offline(run_cli, tmp_path):
    p = run_cli("speak", "hi", "-m", "qwen3-tts-0.6b-customvoice", "-o", "x.wav",
                env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    line = only_line(p.err)
    if "does not implement" in line:
        pytest.skip("Qwen3-TTS not wired into the registry yet")
    assert p.returncode == 2
    assert "qwen3-tts-0.6b-customvoice" in line and "HF_HUB_OFFLINE" in line and "--model-dir" in line
    assert not (tmp_path / "x.wav").exists()


def test_model_dir_missing_files(run_cli, tmp_path):
    (tmp_path / "empty").mkdir()
    p = run_cli("speak", "hi", "--model-dir", tmp_path / "empty", "-o", "x.wav")
    line = only_line(p.err)
    if "does not implement" in line:
        pytest.skip("Piper not wired into the registry yet")
    # a Piper model takes any voice's folder, so the message asks for one voice, not joe's files
    assert p.returncode == 2 and "should hold one Piper voice (X.onnx + X.onnx.json); it has 0" in line
    assert not (tmp_path / "x.wav").exists()


def test_convert_refuses_to_overwrite(run_cli, tmp_path):
    (tmp_path / "out").mkdir()
    p = run_cli("convert", "piper-joe", "--to", "mlx", "-o", tmp_path / "out")
    assert p.returncode == 2 and "--force" in only_line(p.err)


def test_convert_bad_bits(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["convert", "piper-joe", "--to", "mlx", "-q", "--q-bits", "3", "-o", "o"], "--q-bits 3")


def test_parity_needs_one_reference(run_cli, tmp_path):
    _bad(run_cli, tmp_path, ["parity", "piper-joe"], "exactly one of")
