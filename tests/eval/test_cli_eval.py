"""`ttscli eval` end to end with the embedded voice: the gate passes on the real model and fails
on broken output (noise, perturbed weights); speaker similarity separates voices; usage errors."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("faster_whisper")
pytest.importorskip("speechmos")

from clitools import only_line

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
SMOKE = FIX / "smoke.txt"
FOX = "The quick brown fox jumps over the lazy dog."


@pytest.mark.slow
def test_smoke_gate_passes_on_the_embedded_voice(run_cli, tmp_path):
    p = run_cli("eval", "--texts", SMOKE, "--max-wer", "0.1", "--min-mos", "2.5", "--json", "--plot", "wer.png")
    assert p.returncode == 0, p.err
    report = json.loads(p.stdout)
    assert report["model"] == "piper-joe" and report["asr"]["language"] == "en"   # the model's language
    assert report["passed"] and report["failed"] == []
    assert len(report["lines"]) == 2
    t = report["total"]
    assert t["wer"] <= 0.1 and t["dnsmos_ovrl"] > 2.5
    assert t["rtf"] > 0 and t["duration_s"] > 3
    assert all(r["transcript"] for r in report["lines"])
    assert (tmp_path / "wer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ttscli eval piper-joe" in p.err       # the table


def test_gate_fails_on_noise(run_cli, tmp_path):
    (tmp_path / "t.txt").write_text(FOX + "\n")
    p = run_cli("eval", "--audio", FIX / "noise.wav", "--texts", "t.txt", "--max-wer", "0.1", "--min-mos", "2.5",
                "-q")
    assert p.returncode == 1, p.err
    line = only_line(p.err)
    assert line.startswith("error: eval failed: WER ")
    assert "> --max-wer 0.1" in line and "< --min-mos 2.5" in line


@pytest.mark.slow
def test_gate_fails_on_perturbed_weights(monkeypatch, tmp_path):
    """The real voice with one weight tensor scrambled: audio still comes out, words do not."""
    import mlx.core as mx
    import mlx.utils

    import ttscli
    from ttscli.eval.run import EvalRequest, read_texts, run_eval
    from ttscli.registry import load_registry

    real_load = ttscli.load

    def broken_load(*a, **kw):
        pipe = real_load(*a, **kw)
        params = dict(mlx.utils.tree_flatten(pipe.model.parameters()))
        emb = params["enc_p.emb.weight"]         # phoneme embeddings: every phoneme becomes another
        perm = mx.array(np.random.default_rng(0).permutation(emb.shape[0]))
        pipe.model.update(mlx.utils.tree_unflatten([("enc_p.emb.weight", emb[perm])]))
        return pipe

    monkeypatch.setattr(ttscli, "load", broken_load)
    texts = read_texts(SMOKE)
    # ttscli's own VITS on MLX: the weights scrambled are the ones it runs
    report = run_eval(EvalRequest(texts=texts, max_wer=0.1, backends={"vits": "mlx"}), load_registry())
    assert not report["passed"]
    assert report["failed"][0].startswith("WER ") and report["total"]["wer"] > 0.5


def _piper(texts, seed, **knobs):
    import ttscli

    pipe = ttscli.load("piper-joe")
    out = []
    for i, text in enumerate(texts):
        req = ttscli.Request(text=text, seed=seed + i, knobs=knobs)
        out.append(np.concatenate(list(ttscli.synthesize(pipe, req))))
    return out, pipe.sample_rate


@pytest.mark.slow
def test_speaker_similarity_separates_voices():
    """Joe at two noise settings, other sentences, is closer to Joe than espeak-ng's voice is."""
    pytest.importorskip("webrtcvad")
    from ttscli.eval.speaker import VoiceEncoder, similarity

    enc = VoiceEncoder()
    ref = enc.embed(*sf.read(FIX / "joe.wav", dtype="float32"))
    texts = ["Please call Stella and ask her to bring these things with her from the store.",
             "Every winter the birds fly south to find warmer weather and food."]
    joe = []
    for knobs in ({"noise_scale": 0.2, "noise_w": 0.2}, {"noise_scale": 1.0, "noise_w": 1.0}):
        audio, sr = _piper(texts, 5, **knobs)
        joe += [similarity(enc.embed(x, sr), ref) for x in audio]
    other = similarity(enc.embed(*sf.read(FIX / "espeak.wav", dtype="float32")), ref)
    assert min(joe) > 0.8, joe
    assert other < min(joe) - 0.2, (other, joe)


@pytest.mark.slow
def test_min_sim_gate_names_the_similarity(run_cli, tmp_path):
    pytest.importorskip("webrtcvad")
    (tmp_path / "t.txt").write_text("A rainbow is a division of white light into many beautiful colors.\n")
    p = run_cli("eval", "--audio", FIX / "espeak.wav", "--texts", "t.txt", "--ref", FIX / "joe.wav",
                "--min-sim", "0.8", "--max-wer", "0.5", "--json", "-q")
    assert p.returncode == 1
    line = only_line(p.err)
    assert "speaker similarity" in line and "< --min-sim 0.8" in line and "WER" not in line
    report = json.loads(p.stdout)
    assert report["total"]["similarity"] < 0.8 and report["asr"]["language"] == "auto"


@pytest.mark.parametrize("args, message", [
    (["--texts", "t.txt", "--min-sim", "0.5"], "--min-sim needs --ref"),
    (["--texts", "absent.txt"], "absent.txt"),
    (["--texts", "t.txt", "--audio", "absent.wav"], "--audio absent.wav: no such file or folder"),
    (["--texts", "t.txt", "--audio", "two"], "--audio gives 2 file(s) for 1 text line(s)"),
    (["--texts", "t.txt", "--audio", "two", "-m", "piper-joe"], "--audio scores existing files"),
    (["--texts", "t.txt", "--plot", "x.jpg"], "--plot must name a .png file"),
    (["--texts", "empty.txt"], "has no text lines"),
    ([], "give --texts FILE"),
    (["--audio", "two"], "give --texts FILE (one line per audio file)"),
    (["--texts", "t.txt", "-m", "pocket-tts", "--random-weights", "--model-dir", "two"],
     "--random-weights loads no checkpoint: drop --model-dir"),
    (["--texts", "t.txt", "--audio", "two", "--random-weights"], "drop -m/--model-dir/--random-weights"),
])
def test_usage_errors_are_one_line(run_cli, tmp_path, args, message):
    (tmp_path / "t.txt").write_text(FOX + "\n")
    (tmp_path / "empty.txt").write_text("\n \n")
    (tmp_path / "two").mkdir()
    for i in range(2):
        shutil.copy(FIX / "noise.wav", tmp_path / "two" / f"{i}.wav")
    p = run_cli("eval", *args)
    assert p.returncode == 2, p.err
    assert message in only_line(p.err)


def test_missing_extra_is_one_line_naming_it(monkeypatch, capsys, tmp_path):
    import importlib.util

    from ttscli import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "faster_whisper" else real(name, *a))
    (tmp_path / "t.txt").write_text(FOX + "\n")
    rc = cli.main(["eval", "--texts", str(tmp_path / "t.txt"), "-q"])
    assert rc == 1
    line = only_line(capsys.readouterr().err)
    assert "pip install 'ttscli[eval]'" in line and "faster_whisper" in line


@pytest.mark.slow
def test_sentences_on_the_embedded_voice(run_cli, tmp_path):
    """The 24 sentences of tests/fixtures/eval/sentences.txt (the README's figures)."""
    p = run_cli("eval", "--texts", FIX / "sentences.txt", "--max-wer", "0.1", "--min-mos", "2.8", "--json",
                timeout=1800)
    assert p.returncode == 0, p.err
    report = json.loads(p.stdout)
    assert len(report["lines"]) == 24 and report["total"]["words"] > 250


@pytest.mark.slow
def test_bench_quality_adds_the_eval_columns(run_cli):
    p = run_cli("bench", "--quality", "--repeats", "1", "--warmup", "0", "--text", FOX, "--json", "-q")
    assert p.returncode == 0, p.err
    (fig,) = json.loads(p.stdout)["variants"].values()   # named after the default backend (onnx on Linux)
    assert fig["wer"] == 0.0 and fig["cer"] == 0.0
    assert 2.5 < fig["dnsmos_ovrl"] < 5 and fig["rtf"] > 0


@pytest.mark.slow
def test_audio_from_a_batch_folder_takes_its_manifest(run_cli, tmp_path):
    out = tmp_path / "out"
    (out / "00").mkdir(parents=True)
    shutil.copy(FIX / "espeak.wav", out / "00" / "a.wav")
    entry = {"id": "a", "path": "00/a.wav",
             "text": "A rainbow is a division of white light into many beautiful colors."}
    (out / "manifest.jsonl").write_text(json.dumps(entry) + "\n")
    before = (out / "manifest.jsonl").read_bytes()
    p = run_cli("eval", "--audio", "out", "--language", "en", "--json", "-q")
    assert p.returncode == 0, p.err
    report = json.loads(p.stdout)
    assert [r["text"] for r in report["lines"]] == [entry["text"]] and report["lines"][0]["source"] == "a.wav"
    assert report["total"]["wer"] < 0.5
    assert (out / "manifest.jsonl").read_bytes() == before          # read, never rewritten
    (tmp_path / "t.txt").write_text("x\n")
    p = run_cli("eval", "--audio", "out", "--texts", "t.txt")
    assert p.returncode == 2 and "gives the texts; drop --texts" in only_line(p.err)
    (out / "manifest.jsonl").write_text('{"id": "b", "path": "00/b.wav", "text": "hi"}\n')
    p = run_cli("eval", "--audio", "out")
    assert p.returncode == 2 and "00/b.wav is missing" in only_line(p.err)


@pytest.mark.slow
def test_random_weights_run_pocket_tts_end_to_end_with_a_clone(run_cli, tmp_path):
    """No checkpoint: Pocket TTS at its real size with random weights clones --ref and every score
    comes out (meaningless figures; the point is that the pipeline runs), each line its 2 s."""
    pytest.importorskip("webrtcvad")
    (tmp_path / "t.txt").write_text(FOX + "\nA second line.\n")
    p = run_cli("eval", "-m", "pocket-tts", "--random-weights", "--texts", "t.txt", "--ref", FIX / "joe.wav",
                "--json", "-q", timeout=1200)
    assert p.returncode == 0, p.err
    report = json.loads(p.stdout)
    assert report["model"] == "pocket-tts" and report["random_weights"] and report["passed"]
    assert [ln["duration_s"] for ln in report["lines"]] == [2.0, 2.0]
    for ln in report["lines"]:
        assert 0 <= ln["wer"] and 0 <= ln["cer"] and 1 <= ln["dnsmos_ovrl"] <= 5 and -1 <= ln["similarity"] <= 1
