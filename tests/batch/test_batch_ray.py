"""`ttscli batch --engine ray`: on a loopback Ray cluster this test starts (ttscli's own
``connect``), an actor killed mid-run, the run resumed, and the output equal to the local
engine's; on the local cluster the command starts itself, every listening socket on loopback,
nothing of the cluster left once the command is killed, and no row written before the kill
synthesized again."""
from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

if importlib.util.find_spec("ray") is None:
    pytest.skip("the ray extra is not installed", allow_module_level=True)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from clitools import ttscli_exe
from smalldisk import small_disk

N = 10


@pytest.fixture(scope="module")
def cluster(shared_cache):
    """A Ray cluster on 127.0.0.1 in this process (ray is imported by ``connect``, which makes it
    listen there); the commands join it with --ray-address."""
    from ttscli.batch.ray_engine import Cluster, connect

    with connect(Cluster(), {"TTSCLI_CACHE": str(shared_cache)}) as ray:
        yield ray.get_runtime_context().gcs_address


def cli_env(shared_cache) -> dict[str, str]:
    """The test's environment for a command, with no RAY_ADDRESS: the command picks the cluster."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "TTSCLI_CACHE": str(shared_cache), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


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


@pytest.mark.slow
def test_ray_engine_survives_a_killed_worker_and_equals_local(cluster, tmp_path, shared_cache):
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"id": f"u{i:02d}", "text": f"Ray row {i} speaks a short sentence."}) + "\n"
                         for i in range(N)))
    env = cli_env(shared_cache)
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


@pytest.mark.slow
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
    env = cli_env(shared_cache)
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


# ---- the local cluster the command starts ------------------------------------------------------

needs_proc = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads sockets and processes from /proc")


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: with the pid, names one process (pids are reused)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """{pid: (start time, command line)} of root and every process under it."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        start = _start_time(pid)
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if start is not None:
            found[pid] = (start, cmd)
        todo += children.get(pid, [])
    return found


def _address(hex_ip: str) -> str:
    raw = bytes.fromhex(hex_ip)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))


def bound_sockets() -> dict[int, tuple[str, str, int]]:
    """{inode: (protocol, address, port)} of every listening TCP socket and every bound,
    unconnected UDP socket of this machine (/proc/net/tcp, tcp6, udp, udp6)."""
    found = {}
    for proto, state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        try:
            lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            ip, port = f[1].split(":")
            if f[3] == state and int(port, 16):
                found[int(f[9])] = (proto, _address(ip), int(port, 16))
    return found


def sockets_of(pids) -> list[tuple[int, str, str, int]]:
    """(pid, protocol, address, port) of each listening socket the processes hold."""
    table = bound_sockets()
    found = []
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            m = re.fullmatch(r"socket:\[(\d+)\]", link)
            if m and int(m.group(1)) in table:
                found.append((pid, *table[int(m.group(1))]))
    return found


def loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


def alive(procs: dict[int, tuple[int, str]]) -> dict[int, str]:
    """Those still running (a zombie has exited; a reused pid has another start time)."""
    left = {}
    for pid, (start, cmd) in procs.items():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and _start_time(pid) == start:
            left[pid] = cmd
    return left


def wav_files(out: Path) -> dict[str, tuple[int, int]]:
    """{row id: (inode, mtime in ns)} of the complete files (temp files are dot-named .part)."""
    return {f.stem: (f.stat().st_ino, f.stat().st_mtime_ns) for f in out.glob("*/*.wav")}


def recorded_ids(out: Path) -> set[str]:
    mf = out / "manifest.jsonl"
    lines = mf.read_text().splitlines() if mf.exists() else []
    return {json.loads(x)["id"] for x in lines if x.endswith("}")}


@needs_proc
@pytest.mark.slow
def test_local_cluster_is_loopback_only_ends_with_a_killed_driver_and_keeps_its_rows(tmp_path, shared_cache):
    """No --ray-address, no RAY_ADDRESS: the first line says a local cluster on 127.0.0.1 starts;
    every socket any process of the run listens on (driver, GCS, raylet, agents, actors) is on
    loopback; SIGKILL to the command (once the manifest has rows and a written one is not in it
    yet) leaves no process of the cluster running 30 s later; the re-run does not synthesize the
    rows whose files were there, and counts them as already done."""
    n = 12
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"id": f"k{i:02d}", "text": f"Row {i} of the killed run speaks."}) + "\n"
                         for i in range(n)))
    out = tmp_path / "out"
    env = cli_env(shared_cache)
    cmd = ttscli_exe() + ["batch", str(m), "-o", str(out), "--engine", "ray", "--ray-workers", "2", "--seed", "4"]
    err_file = tmp_path / "stderr.txt"
    with open(err_file, "wb") as err:
        proc = subprocess.Popen(cmd, env=env, stderr=err, stdout=subprocess.DEVNULL)
    seen: dict[int, tuple[int, str]] = {}
    listening: set[tuple[int, str, str, int]] = set()
    killed = False
    deadline = time.monotonic() + 420
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            procs = descendants(proc.pid)
            seen.update(procs)
            listening.update(sockets_of(procs))
            files, recorded = (set(wav_files(out)), recorded_ids(out)) if out.exists() else (set(), set())
            if recorded and files - recorded:  # the manifest has rows, and a written one is not in it yet
                os.kill(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None and not killed:
            proc.kill()
        proc.wait(60)
    first = err_file.read_text().splitlines()[0] if err_file.read_text() else ""
    assert first.startswith("ray: starting a local cluster on 127.0.0.1"), err_file.read_text()
    assert killed, f"the run ended before a written row went unrecorded: {err_file.read_text()}"

    names = " ".join(c for _, c in seen.values())
    assert "gcs_server" in names and "raylet" in names and "RowWriter" in names, names
    open_wide = sorted({(seen[pid][1][:60], proto, addr, port) for pid, proto, addr, port in listening
                        if not loopback(addr)})
    assert not open_wide, f"listening beyond loopback: {open_wide}"
    holders = {pid for pid, *_ in listening}
    assert proc.pid in holders and len(holders) >= 4, listening  # the driver, GCS, raylet, actors at least

    left: dict[int, str] = {}
    for _ in range(300):  # 30 s
        left = alive({pid: v for pid, v in seen.items() if pid != proc.pid})
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"still running 30 s after the driver was killed: {sorted(left.values())}"

    before = wav_files(out)
    unrecorded = set(before) - recorded_ids(out)
    assert unrecorded, "every written row was recorded before the kill"
    p = subprocess.run(ttscli_exe() + ["batch", str(m), "-o", str(out), "--seed", "4"], env=env,
                       capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    assert f"({len(before)} already done, 0 failed)" in p.stderr.decode(), (len(before), p.stderr.decode())
    after = wav_files(out)
    assert {i: after[i] for i in before} == before, "a row written before the kill was synthesized again"
    assert recorded_ids(out) == {f"k{i:02d}" for i in range(n)}
    assert not list(out.rglob("*.part")) and not (out / ".journal").exists()


@needs_proc
@pytest.mark.parametrize("how", ["--ray-address", pytest.param("RAY_ADDRESS", marks=pytest.mark.slow)])
def test_a_named_cluster_is_joined_and_the_first_line_says_so(cluster, tmp_path, shared_cache, how):
    """--ray-address, or RAY_ADDRESS in the environment: the first line names the cluster and where
    its address came from, and the command starts no cluster of its own."""
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"id": f"j{i}", "text": f"Joined row {i}."}) + "\n" for i in range(2)))
    env = cli_env(shared_cache)
    cmd = ttscli_exe() + ["batch", str(m), "-o", str(tmp_path / "out"), "--engine", "ray", "--ray-workers", "1"]
    if how == "RAY_ADDRESS":
        env["RAY_ADDRESS"] = cluster
    else:
        cmd += ["--ray-address", cluster]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    started: set[str] = set()
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        started |= {c.split()[0].rsplit("/", 1)[-1] for _, c in descendants(proc.pid).values() if c}
        time.sleep(0.2)
    err = proc.communicate(timeout=300)[1].decode()
    assert proc.returncode == 0, err
    assert err.splitlines()[0] == f"ray: joining the cluster at {cluster} (from {how})", err
    assert not started & {"gcs_server", "raylet"}, started
    assert sorted(entries(tmp_path / "out")) == ["j0", "j1"]


def test_which_cluster(monkeypatch):
    from ttscli.batch.ray_engine import Cluster, choose_cluster, on_loopback

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert choose_cluster(None) == Cluster() and choose_cluster("local") == Cluster()
    assert choose_cluster("10.0.0.5:6379") == Cluster("10.0.0.5:6379", "--ray-address")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    assert choose_cluster(None) == Cluster("10.0.0.7:6379", "RAY_ADDRESS")
    assert choose_cluster("10.0.0.5:6379").source == "--ray-address"   # the flag wins
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert choose_cluster(None) == Cluster()
    assert Cluster().describe().startswith("ray: starting a local cluster on 127.0.0.1")
    assert on_loopback("127.0.0.1:6379") and on_loopback("localhost:1") and on_loopback("[::1]:6379")
    assert not on_loopback("10.0.0.5:6379") and not on_loopback("auto")


def test_an_address_nothing_answers_on_is_one_line_at_once(run_cli, tmp_path):
    (tmp_path / "m.jsonl").write_text(json.dumps({"id": "a", "text": "Hello."}) + "\n")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = run_cli("batch", "m.jsonl", "-o", "out", "--engine", "ray", "--ray-address", f"127.0.0.1:{port}", timeout=60)
    assert p.returncode == 2, p.err
    assert p.err.splitlines() == [f"ray: joining the cluster at 127.0.0.1:{port} (from --ray-address)",
                                  f"error: cannot reach the Ray cluster at 127.0.0.1:{port} (from --ray-address): "
                                  "Connection refused"], p.err


@pytest.mark.slow
def test_an_actor_on_a_full_disk_stops_the_run(cluster, tmp_path, shared_cache):
    """An actor that meets a full disk ends the run: the last line names the path and says the
    disk is full, exit 1, and the manifest lists only complete files (actors' journals included)."""
    n = 40
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"id": f"f{i:02d}", "text": f"Row {i} goes to a disk that is too small."})
                         + "\n" for i in range(n)))
    with small_disk(tmp_path / "disk", "200k") as disk:
        p = subprocess.run(ttscli_exe() + ["batch", str(m), "-o", str(disk / "out"), "--engine", "ray",
                                           "--ray-address", cluster, "--ray-workers", "2"],
                           env=cli_env(shared_cache), capture_output=True, timeout=600)
        err = p.stderr.decode()
        assert p.returncode == 1, err
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"error: cannot write {disk / 'out'}/") and "the disk is full" in last, err
        got = entries(disk / "out")
        assert len(got) < n // 4, len(got)
        for e in got.values():
            f = disk / "out" / e["path"]
            assert f.stat().st_size == e["bytes"] and sf.info(str(f)).frames == e["samples"]
