"""Issue 15: signals, special files, unbounded input and the messages users see when things fail.

Every case runs the installed `ttscli` in a subprocess as a user would and checks the exit code,
the one line on stderr and that nothing is left behind (no .part file, no replaced node).
"""
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clitools import no_files, only_line, ttscli_exe

ROOT = Path(__file__).resolve().parents[1]
LONG = " ".join(f"This is sentence number {i}, spoken to test what an interruption leaves." for i in range(40))


def _env(tmp_path, shared_cache, **more):
    e = dict(os.environ, HF_HUB_OFFLINE="1", TTSCLI_CACHE=str(shared_cache),
             TTSCLI_CONFIG_DIR=str(tmp_path / "config"), COLUMNS="200")
    e.update(more)
    return e


def _popen(args, tmp_path, shared_cache, **kw):
    return subprocess.Popen(ttscli_exe() + [str(a) for a in args], cwd=tmp_path,
                            env=_env(tmp_path, shared_cache), stdout=kw.pop("stdout", subprocess.PIPE),
                            stderr=subprocess.PIPE, **kw)


def _wait_for_part(folder: Path, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if any(p.name.endswith(".part") for p in folder.iterdir()):
            return
        time.sleep(0.05)
    raise AssertionError("no .part file appeared while synthesizing")


# ---- 1. SIGTERM / SIGHUP, and stale .part files ---------------------------------------------

@pytest.mark.parametrize("sig, code, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGHUP, 129, "SIGHUP")])
def test_term_and_hup_abort_like_ctrl_c(tmp_path, shared_cache, sig, code, name):
    out = tmp_path / "out"
    out.mkdir()
    proc = _popen(["speak", LONG, "-o", out / "a.wav"], tmp_path, shared_cache)
    _wait_for_part(out, proc)
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert only_line(err.decode()) == f"error: stopped by {name}; no output written"
    assert list(out.iterdir()) == []


def test_second_signal_forces_exit_and_still_leaves_nothing(tmp_path, shared_cache):
    out = tmp_path / "out"
    out.mkdir()
    proc = _popen(["speak", LONG, "-o", out / "a.wav"], tmp_path, shared_cache)
    _wait_for_part(out, proc)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (130, 143), err
    assert "no output written" in err.decode() and "Traceback" not in err.decode()
    assert list(out.iterdir()) == []


def test_stale_part_files_of_dead_writers_are_removed(run_cli, tmp_path):
    dead = tmp_path / ".a.wav.999999999.abcd1234.part"      # no such pid can run
    old = tmp_path / ".a.wav.k3j4h5g6.part"                  # an older name without a pid, 2 h old
    live = tmp_path / f".a.wav.{os.getpid()}.zzzz9999.part"  # this test's pid: a writer still running
    other = tmp_path / ".b.wav.999999999.abcd1234.part"      # another target's: not ours to touch
    for p in (dead, old, live, other):
        p.write_bytes(b"RIFF partial")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    p = run_cli("speak", "Hello.", "-o", "a.wav")
    assert p.returncode == 0, p.err
    assert not dead.exists() and not old.exists()
    assert live.exists() and other.exists()
    assert (tmp_path / "a.wav").stat().st_size > 44


# ---- 2. FIFOs and device nodes are written into, never replaced -----------------------------

def test_fifo_output_is_streamed_not_replaced(tmp_path, shared_cache):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo, "rb") as f:
            got["data"] = f.read()

    t = threading.Thread(target=reader)
    t.start()
    proc = _popen(["speak", "Hello there.", "-o", fifo], tmp_path, shared_cache)
    _, err = proc.communicate(timeout=300)
    t.join(60)
    assert proc.returncode == 0, err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got["data"][:4] == b"RIFF" and len(got["data"]) > 44 + 10_000
    assert [p.name for p in tmp_path.iterdir() if p.name not in ("cache", "config")] == ["pipe"]


def _mknod_null(path: Path):
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the same device as /dev/null
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")


@pytest.mark.parametrize("args", [["--format", "wav"], ["--format", "pcm"], []])
def test_device_node_output_is_written_not_replaced(run_cli, tmp_path, args):
    node = tmp_path / "n"
    _mknod_null(node)
    p = run_cli("speak", "Hi.", "-o", node, *args)
    assert p.returncode == 0, p.err
    st = os.stat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert not [q for q in tmp_path.iterdir() if q.name.endswith(".part")]


def test_device_node_refuses_a_format_that_cannot_stream(run_cli, tmp_path):
    node = tmp_path / "n"
    _mknod_null(node)
    p = run_cli("speak", "Hi.", "-o", node, "--format", "m4a")
    assert p.returncode == 2
    assert "cannot stream" in only_line(p.err)
    assert stat.S_ISCHR(os.stat(node).st_mode)


# ---- 3. stdin and --file are read with a bound ----------------------------------------------

def test_endless_stdin_stops_at_the_limit(tmp_path, shared_cache):
    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        proc = _popen(["speak", "-", "-o", "x.wav"], tmp_path, shared_cache, stdin=yes.stdout)
        _, err = proc.communicate(timeout=120)
    finally:
        yes.kill()
        yes.wait()
    assert proc.returncode == 2
    assert only_line(err.decode()) == "error: text is at least 32,769 UTF-8 bytes; the limit is 32,768 bytes"
    no_files(tmp_path)


def test_file_dev_zero_stops_at_the_limit(run_cli, tmp_path):
    p = run_cli("speak", "--file", "/dev/zero", "-o", "x.wav", timeout=120)
    assert p.returncode == 2
    assert "the limit is 32,768 bytes" in only_line(p.err)
    no_files(tmp_path)


def test_large_file_names_its_size(run_cli, tmp_path):
    (tmp_path / "in").mkdir()
    big = tmp_path / "in" / "big.txt"
    big.write_bytes(b"word " * 100_000)
    p = run_cli("speak", "--file", big, "-o", "x.wav")
    assert p.returncode == 2
    assert "500,000 UTF-8 bytes" in only_line(p.err)
    assert not (tmp_path / "x.wav").exists()


# ---- 4. NUL and other control characters are refused, never dropped -------------------------

def test_text_after_nul_is_not_dropped_in_silence(run_cli, tmp_path):
    (tmp_path / "in").mkdir()
    f = tmp_path / "in" / "n.txt"
    f.write_bytes(b"Hello world.\0 This second sentence is long.")
    p = run_cli("speak", "-f", f, "-o", "n.wav")
    assert p.returncode == 2
    line = only_line(p.err)
    assert "U+0000" in line and "character 13" in line
    assert not (tmp_path / "n.wav").exists()


def test_escape_character_in_argument_is_refused(run_cli, tmp_path):
    p = run_cli("speak", "Hello \x1b[31mred", "-o", "x.wav")
    assert p.returncode == 2 and "U+001B" in only_line(p.err)
    no_files(tmp_path)


# ---- 5. seeds out of range are bad usage ----------------------------------------------------

@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_seed_out_of_range(run_cli, tmp_path, seed):
    p = run_cli("speak", "Hi.", "--seed", seed, "-o", "x.wav")
    assert p.returncode == 2
    line = only_line(p.err)
    # the option, the value given and the range allowed, in click's words
    assert "--seed" in line and seed in line and "0<=x<=4294967295" in line
    no_files(tmp_path)


def test_largest_seed_works(run_cli, tmp_path):
    p = run_cli("speak", "Hi there. And again.", "--seed", str(2**32 - 1), "-o", "x.wav")
    assert p.returncode == 0, p.err


# ---- 7. full disk, read-only file system: named, not "internal error" -----------------------

def test_dev_full_says_the_disk_is_full(run_cli, tmp_path):
    p = run_cli("speak", "Hi.", "-o", "/dev/full")
    assert p.returncode == 1
    assert only_line(p.err) == "error: cannot write /dev/full: the disk is full (No space left on device)"


def _in_own_mount(tmp_path, shared_cache, mount_opts: str, args: list) -> subprocess.CompletedProcess:
    """Run ttscli in a private user+mount namespace with a tmpfs mounted at tmp_path/mnt."""
    if sys.platform != "linux" or not shutil.which("unshare"):
        pytest.skip("needs Linux unshare")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    probe = subprocess.run(["unshare", "-rm", "mount", "-t", "tmpfs", "-o", mount_opts, "none", str(mnt)],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {probe.stderr.decode().strip()}")
    script = (f'mount -t tmpfs -o {mount_opts} none "$1" && shift && exec "$@"')
    p = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", str(mnt), *ttscli_exe(), *map(str, args)],
                       capture_output=True, cwd=tmp_path, env=_env(tmp_path, shared_cache), timeout=300)
    p.err = p.stderr.decode("utf-8", "replace")
    return p


def test_full_disk_is_named_and_leaves_no_partial_file(tmp_path, shared_cache):
    # 64 KiB holds the header and a little audio; the long text needs far more
    p = _in_own_mount(tmp_path, shared_cache, "size=64k", ["speak", LONG, "-o", "mnt/a.wav"])
    assert p.returncode == 1, p.err
    assert only_line(p.err) == "error: cannot write mnt/a.wav: the disk is full (No space left on device)"
    assert list((tmp_path / "mnt").iterdir()) == []  # the namespace's tmpfs is gone; the folder is empty


def test_read_only_file_system_is_named(tmp_path, shared_cache):
    p = _in_own_mount(tmp_path, shared_cache, "ro", ["speak", "Hi.", "-o", "mnt/a.wav"])
    assert p.returncode == 1, p.err
    line = only_line(p.err)
    assert line == "error: cannot write mnt/a.wav: the file system is read-only (Read-only file system)"


def test_permission_denied_is_named(run_cli, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        p = run_cli("speak", "Hi.", "-o", ro / "a.wav")
    finally:
        ro.chmod(0o755)
    assert p.returncode == 1
    assert "permission denied" in only_line(p.err) and "internal error" not in p.err
    assert list(ro.iterdir()) == []


# ---- 8. a binary registry file --------------------------------------------------------------

def test_binary_registry_file_is_bad_input(run_cli, tmp_path):
    reg = tmp_path / "reg"
    reg.mkdir()
    f = reg / "voices.toml"
    f.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    p = run_cli("models", "--registry", f)
    assert p.returncode == 2
    line = only_line(p.err)
    assert str(f) in line and "not UTF-8" in line


@pytest.mark.parametrize("body, needle", [
    ('[models]\nx = 3\n', "model 'x' must be a table"),
    ('[models.x]\nfamily = "piper"\nsample_rate = 16000\naliases = "joe"\n', "model 'x' field aliases"),
])
def test_registry_entry_of_the_wrong_type_is_bad_input(run_cli, tmp_path, body, needle):
    f = tmp_path / "r.toml"
    f.write_text(body)
    p = run_cli("models", "--registry", f)
    assert p.returncode == 2
    line = only_line(p.err)
    assert str(f) in line and needle in line


# ---- 9. Ctrl-C at any time, imports included ------------------------------------------------

def _wait_for_library(pid: int, names=("libmkl", "openblas", "libmlx"), timeout=120) -> bool:
    """Until the process maps one of `names`: ttscli's own imports (BLAS preload, mlx) are under way."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            return False
        if any(n in maps for n in names):
            return True
        time.sleep(0.005)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/PID/maps")
@pytest.mark.parametrize("offset,text", [(0.0, "short"), (0.05, "short"), (0.2, "long"), (0.5, "long"),
                                         (1.0, "long")])
def test_ctrl_c_during_imports_is_one_line(tmp_path, shared_cache, offset, text):
    # the signal lands while ttscli's heavy imports run (a library of them is being mapped), or
    # just after; Python's own startup before ttscli's first line is Python's, not ours. Later
    # offsets use the long text, so that it lands during loading or synthesis: a short text's
    # whole run can end within 0.2 s of the library being mapped.
    proc = _popen(["speak", LONG if text == "long" else "Hello there.", "-o", "x.wav"], tmp_path, shared_cache)
    assert _wait_for_library(proc.pid), "the BLAS/mlx libraries were never loaded"
    time.sleep(offset)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert only_line(err.decode()) == "error: interrupted; no output written"
    no_files(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("when", ["between chunks", "after the last chunk"])
def test_a_stop_whose_exception_is_lost_still_stops_the_run(tmp_path, sig, when):
    # The handler's exception can die on its way out (raised inside a finalizer, a collected
    # generator, a library's catch-all) while the stop was received: one full-suite run under
    # load wrote the whole file and then reported "interrupted; no output written". The run
    # must end stopped anyway, before the next chunk and before anything is renamed into place.
    import numpy as np

    from ttscli import signals
    from ttscli.audio import FileSink
    from ttscli.generate import write_all

    def swallowed_stop():
        try:
            signal.raise_signal(sig)
            time.sleep(5)  # not reached: the handler raises here
        except BaseException:  # noqa: BLE001 - the catch-all that loses it
            pass

    written = []

    def chunks():
        for i in range(4):
            if when == "between chunks" and i == 2:
                swallowed_stop()
            written.append(i)
            yield np.full(2205, 0.1, np.float32)
        if when == "after the last chunk":
            swallowed_stop()

    previous = {s: signal.getsignal(s) for s in signals.STOP_SIGNALS}
    signals.install()
    try:
        with pytest.raises(KeyboardInterrupt) as got:
            write_all(chunks(), FileSink(tmp_path / "x.wav", 22050, "wav"))
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        signals._received = None
    assert isinstance(got.value, signals.Terminated) == (sig != signal.SIGINT)
    assert written == ([0, 1, 2] if when == "between chunks" else [0, 1, 2, 3])
    assert os.listdir(tmp_path) == []


FINALIZER_SCRIPT = """
import signal, sys, time
from ttscli import signals

class Finalized:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)
        time.sleep(5)  # not reached: the handler raises here

signals.install()
x = Finalized()
del x
try:
    signals.check()
except KeyboardInterrupt:
    print("stopped", signals.received())
"""


def test_a_stop_lost_in_a_finalizer_prints_nothing_and_still_stops():
    # Python reports an exception raised inside __del__ as "Exception ignored in ..." on stderr;
    # when that exception is the stop itself, the run ends through the flag (signals.check),
    # with its one line and nothing else. (A subprocess: pytest replaces the hook in-process.)
    p = subprocess.run([sys.executable, "-c", FINALIZER_SCRIPT], capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == f"stopped {int(signal.SIGINT)}", p.stderr
    assert p.stderr == ""


# ---- 11. a reader that goes away; components that do not match ------------------------------

def test_broken_stdout_pipe_is_a_quiet_141(tmp_path, shared_cache):
    proc = _popen(["speak", LONG, "-o", "-"], tmp_path, shared_cache)
    head = proc.stdout.read(100)
    proc.stdout.close()
    _, err = proc.communicate(timeout=300)
    assert head[:4] == b"RIFF"
    assert proc.returncode == 141
    assert err.decode().strip() == ""


def test_mismatched_qwen3_components_are_named_at_load(run_cli, tmp_path):
    import numpy as np
    import soundfile as sf

    (tmp_path / "ref").mkdir()
    ref = tmp_path / "ref" / "r.wav"
    sf.write(str(ref), (np.random.default_rng(0).standard_normal(48000) * 0.1).astype(np.float32), 24000)
    # the parity fixture pairs a talker of 2048 codes with a 32-code tokenizer (enough for goldens)
    ckpt = ROOT / "tests" / "fixtures" / "parity" / "qwen3-tiny-base"
    p = run_cli("clone", "Hello there.", "--ref", ref, "--ref-text", "Some words.", "-m", "qwen3-tts-0.6b-base",
                "--model-dir", ckpt, "-o", "c.wav", "--max-frames", "20")
    assert p.returncode == 1, p.err
    line = only_line(p.err)
    assert "talker (config.json)" in line and "speech tokenizer (speech_tokenizer/config.json)" in line
    assert "codebook_size is 32" in line and "internal error" not in line
    assert not (tmp_path / "c.wav").exists()


# ---- 10. compiled graphs are bounded per call site ------------------------------------------

def test_bounded_compile_keeps_at_most_max_shapes_and_matches_eager():
    import mlx.core as mx

    from ttscli.nn.compiled import compile_bounded

    def tap_sum(p, bias, k):
        t = p.shape[-1] - (k - 1)
        y = bias
        for i in range(k):
            y = y + p[:, i: i + t]
        return y

    f = compile_bounded(tap_sum, max_shapes=4)
    bias = mx.ones((3, 1))
    for n in range(10, 30):
        p = mx.random.normal((3, n), key=mx.random.key(n))
        assert mx.allclose(f(p, bias, 3), tap_sum(p, bias, 3)).item()
        assert len(f) <= 4
    again = mx.random.normal((3, 29), key=mx.random.key(0))
    assert mx.allclose(f(again, bias, 3), tap_sum(again, bias, 3)).item() and len(f) == 4


NO_LIBSNDFILE = '''
import sys
class _NoLibsndfile:
    def find_spec(self, name, path=None, target=None):
        if name == "soundfile":  # what soundfile's pure-Python wheel raises on a machine without libsndfile
            raise OSError("cannot load library 'libsndfile.so': libsndfile.so: cannot open shared object file: "
                          "No such file or directory")
sys.meta_path.insert(0, _NoLibsndfile())
'''


def test_missing_libsndfile_is_named_not_an_internal_error(run_cli, tmp_path, tmp_path_factory):
    """Writing needs no libsndfile (ttscli's own encoders); reading audio does, and its absence
    is one line naming the fix."""
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(NO_LIBSNDFILE, encoding="utf-8")
    env = {"PYTHONPATH": str(site)}
    p = run_cli("speak", "Hi.", "-o", "x.wav", env=env)
    assert p.returncode == 0, p.err
    (tmp_path / "t.txt").write_text("Hi.\n", encoding="utf-8")
    p = run_cli("eval", "--audio", "x.wav", "--texts", "t.txt", env=env)
    line = only_line(p.err)
    assert p.returncode == 1 and "internal error" not in line
    assert "libsndfile" in line and "pip install --force-reinstall --only-binary=:all: soundfile" in line
