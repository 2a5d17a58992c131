"""`ttscli batch --engine ray` on a local Ray instance this test starts (2 CPUs): an actor killed
mid-run, the run resumed, and the output equal to the local engine's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

ray = pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import ttscli_exe

N = 10


@pytest.fixture(scope="module")
def cluster(shared_cache):
    os.environ["TTSCLI_CACHE"] = str(shared_cache)  # the workers inherit it from the node
    ctx = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ctx.address_info["gcs_address"]
    ray.shutdown()


def entries(out: Path) -> dict[str, dict]:
    lines = (out / "manifest.jsonl").read_text().splitlines()
    es = [json.loads(x) for x in lines]
    assert len({e["id"] for e in es}) == len(es), "a row was recorded twice"
    return {e["id"]: e for e in es}


def alive_actor_pids() -> list[int]:
    """RowWriter actors of the cluster this test started (its descendants: nothing else is touched)."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass

    def mine(pid):
        while pid > 1:
            pid = parent.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    out = []
    for pid in parent:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"RowWriter" in cmd and mine(pid):
            out.append(pid)
    return out


def test_ray_engine_survives_a_killed_worker_and_equals_local(cluster, tmp_path, shared_cache):
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"id": f"u{i:02d}", "text": f"Ray row {i} speaks a short sentence."}) + "\n"
                         for i in range(N)))
    env = {**os.environ, "TTSCLI_CACHE": str(shared_cache), "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "ray"
    cmd = ttscli_exe() + ["batch", str(m), "-o", str(out), "--engine", "ray", "--ray-address", cluster,
                          "--ray-workers", "2", "--seed", "3", "-q"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    killed = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        mf = out / "manifest.jsonl"
        if mf.exists() and len(mf.read_text().splitlines()) >= 2:
            pids = alive_actor_pids()
            if pids:
                killed = pids[0]
                os.kill(killed, signal.SIGKILL)
                break
        time.sleep(0.1)
    assert killed is not None, "no actor to kill before the run ended"
    rc = proc.wait(600)
    err = proc.stderr.read().decode()
    done_first = len(entries(out))
    if rc != 0:  # Ray gave up on the row; the re-run must finish it
        p = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
        assert p.returncode == 0, p.stderr.decode()
    assert rc == 0 or done_first < N, err
    got = entries(out)
    assert sorted(got) == [f"u{i:02d}" for i in range(N)]

    local = tmp_path / "local"
    p = subprocess.run(ttscli_exe() + ["batch", str(m), "-o", str(local), "--seed", "3", "-q"], env=env,
                       capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    want = entries(local)
    files = sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file() and f.suffix == ".wav")
    assert files == sorted(str(f.relative_to(local)) for f in local.rglob("*") if f.is_file() and f.suffix == ".wav")
    for i, e in want.items():
        g = got[i]
        assert {k: g[k] for k in ("path", "seed", "samples", "sample_rate", "model", "text")} == \
               {k: e[k] for k in ("path", "seed", "samples", "sample_rate", "model", "text")}
        a, _ = sf.read(str(out / g["path"]), dtype="int16")
        b, _ = sf.read(str(local / e["path"]), dtype="int16")
        # same code, same seed: equal up to float noise between processes
        assert np.abs(a.astype(np.int32) - b).max() <= 4


def test_ray_actors_batch_rows_like_the_local_engine(cluster, tmp_path, shared_cache):
    """A family with batched generation (tiny Qwen3-TTS, MLX talker): each actor gets --batch-size
    rows per call and runs them through the family's synthesize_many, as the local engine does;
    the files equal the local engine's at the same batch size and at batch size 1."""
    from ttscli.batch import BatchJob, ModelRef
    from ttscli.batch.ray_engine import rows_per_call

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qwen3_e2e"))
    from e2e_fixture import build

    cv = "qwen3-tts-1.7b-customvoice"
    ckpt = build("customvoice", tmp_path / "cv", eos_gain=3.0)
    job = BatchJob(manifest=tmp_path / "m.jsonl", out=tmp_path, ref=ModelRef(model=cv), max_batch=4)
    assert rows_per_call(job, 7, 2) == 4 and rows_per_call(job, 3, 2) == 2
    assert rows_per_call(BatchJob(manifest=tmp_path, out=tmp_path, ref=ModelRef(model="piper-joe"), max_batch=4),
                         7, 2) == 1
    voices = ("ryan", "serena", "eric")
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"id": f"q{i}", "text": f"Row {i} is short.", "voice": voices[i % 3]}) + "\n"
                         for i in range(7)))
    env = {**os.environ, "TTSCLI_CACHE": str(shared_cache), "HF_HUB_OFFLINE": "1"}
    common = ["batch", str(m), "-m", cv, "--model-dir", str(ckpt), "--seed", "5", "-q"]
    runs = {"ray4": ["--engine", "ray", "--ray-address", cluster, "--ray-workers", "2", "--batch-size", "4"],
            "local4": ["--batch-size", "4"], "local1": ["--batch-size", "1"]}
    for name, extra in runs.items():
        p = subprocess.run(ttscli_exe() + common + ["-o", str(tmp_path / name)] + extra, env=env,
                           capture_output=True, timeout=600)
        assert p.returncode == 0, (name, p.stderr.decode())
    got = {name: entries(tmp_path / name) for name in runs}
    assert sorted(got["ray4"]) == [f"q{i}" for i in range(7)]
    for i, e in got["ray4"].items():
        a, sr = sf.read(str(tmp_path / "ray4" / e["path"]), dtype="int16")
        assert sr == 24000 and len(a) > 0
        for ref in ("local4", "local1"):
            w = got[ref][i]
            assert {k: e[k] for k in ("path", "seed", "samples", "model", "text")} == \
                   {k: w[k] for k in ("path", "seed", "samples", "model", "text")}, (i, ref)
            b, _ = sf.read(str(tmp_path / ref / w["path"]), dtype="int16")
            assert np.abs(a.astype(np.int32) - b).max() <= 2, (i, ref)
