"""Files the user names (-o, --save-voice, --plot): found without trusting links others planted,
written beside the target and renamed onto it.

Path walk. The path is walked one component at a time from a directory descriptor, as the
kernel does, and every symlink on the way is checked before it is followed: in a folder that
others can write (group or world write permission, sticky or not), a link owned by neither the
user nor the folder's owner is refused. This is the kernel's ``protected_symlinks`` rule made
stricter (it covers group-writable folders and does not depend on the sysctl); without it, root
writing ``-o /tmp/out.wav`` would follow a link another user planted there and replace any file
on the system. Links the user owns, and links in folders only trusted users can write, are
followed as before. Links on /proc (``/dev/stdout`` -> ``/proc/self/fd/1``) are the kernel's
own: it follows them.

Writing. The walk ends holding a descriptor of the folder that will receive the file, so a
path component swapped for a link after the check changes nothing: the temp file is created
in that folder with ``O_EXCL | O_NOFOLLOW`` and renamed within it. A new file is created with
mode 0666, which the kernel narrows by the umask (and any default ACL) as for ``open()``. A file
being replaced keeps its permission bits and, where the user may set them (root), its owner
and group: a 0600 output stays 0600. The temp file is 0600 until then, so the content is never
readable by more users than the finished file. Set-id bits are not carried over, and the group
permission bits are dropped when the group cannot be kept (the file would otherwise open to a
group that could not read the old one). In a sticky folder others can write, an existing file
owned by neither the user nor the folder's owner is not replaced (the kernel's
``protected_regular``): it would hand what root writes to whoever planted it.
"""
from __future__ import annotations

import os
import stat
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ttscli.errors import OutputError, UsageError, os_error

# O_PATH opens a folder for use as a base of *at() calls with search permission only (no read);
# systems without it (macOS) open it for reading.
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
MAX_LINKS = 40          # links followed in one walk before it counts as a loop (Linux's limit)
PART_SUFFIX = ".part"
# A .part left by a killed run (SIGKILL, power loss) is removed by the next write to the same
# target once its writer is gone: its pid (in the name) is not running, or it has not been
# written for this long (a running write appends every chunk; a reused pid cannot keep it alive).
STALE_PART_S = 3600.0


@dataclass
class Destination:
    """Where a write to a user-named path lands: entry ``name`` of the folder open as ``folder``.

    ``st`` is that entry (``None``: nothing there yet); for a kernel link (``magic``) it is the
    object the link reaches, which is opened through the link, never renamed over."""

    folder: int
    name: str
    path: str
    st: os.stat_result | None
    magic: bool = False

    @property
    def kind(self) -> str:
        """"new", "file", "folder", "a FIFO", "a device", "a socket" or "other"."""
        if self.st is None:
            return "new"
        mode = self.st.st_mode
        if stat.S_ISREG(mode):
            return "file"
        if stat.S_ISDIR(mode):
            return "folder"
        if stat.S_ISFIFO(mode):
            return "a FIFO"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            return "a device"
        if stat.S_ISSOCK(mode):
            return "a socket"
        return "other"

    def close(self) -> None:
        if self.folder >= 0:
            os.close(self.folder)
            self.folder = -1

    def __enter__(self) -> "Destination":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _others_can_write(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _trusted_owner(uid: int, folder: os.stat_result) -> bool:
    """The user, or whoever owns the folder (they can replace its entries anyway)."""
    return uid in (os.geteuid(), folder.st_uid)


def _check_link(folder: os.stat_result, link: os.stat_result, shown: str, what: str) -> None:
    if _others_can_write(folder) and not _trusted_owner(link.st_uid, folder):
        raise UsageError(
            f"{what} {shown}: refusing to follow a symlink owned by uid {link.st_uid} in a folder "
            "other users can write (it may have been planted); name the file it points at instead")


def _check_replace(folder: os.stat_result, st: os.stat_result, shown: str, what: str) -> None:
    if folder.st_mode & stat.S_ISVTX and _others_can_write(folder) and not _trusted_owner(st.st_uid, folder):
        raise UsageError(
            f"{what} {shown}: refusing to replace a file owned by uid {st.st_uid} in a shared sticky folder "
            "(it may have been planted); remove it or write elsewhere")


def _procfs_dev() -> int | None:
    try:
        return os.stat("/proc").st_dev
    except OSError:
        return None


class _Shown:
    """The path walked so far, as the messages name it (links resolved, ".." applied)."""

    def __init__(self, absolute: bool):
        self.absolute, self.parts = absolute, []

    def reset(self) -> None:
        self.absolute, self.parts = True, []

    def down(self, name: str) -> None:
        self.parts.append(name)

    def up(self) -> None:
        if self.parts and self.parts[-1] != "..":
            self.parts.pop()
        elif not self.absolute:
            self.parts.append("..")

    def child(self, name: str) -> str:
        return ("/" if self.absolute else "") + "/".join([*self.parts, name])


def _split(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def resolve(path: str | os.PathLike, what: str = "output", parents: bool = False) -> Destination:
    """Walk ``path`` to the folder and name a write lands in, following only links that
    :func:`_check_link` allows; a dangling link's target is where a new file goes. ``parents``:
    create missing folders on the way (mode 0777 less the umask, as mkdir -p does).

    One-line UsageErrors: a planted link, a missing folder, a component that is not a folder, a
    link loop. The caller closes the returned Destination."""
    text = os.fspath(path)
    if not _split(text):
        raise UsageError(f"{what} {text!r} is not a file name")
    walk = None
    try:
        walk = _Walk(text, what, parents)
        return walk.run()
    except BaseException as e:
        if walk is not None:
            walk.close()
        if isinstance(e, OSError):
            raise os_error(e, text, "reach") or UsageError(f"cannot reach {what} {text}: {e.strerror or e}") from None
        raise


class _Walk:
    """One walk of :func:`resolve`: the folder descriptor it stands in, the components left."""

    def __init__(self, text: str, what: str, parents: bool):
        self.text, self.what, self.parents = text, what, parents
        self.parts = deque(_split(text))
        absolute = text.startswith("/")
        self.shown = _Shown(absolute)
        self.fd = os.open("/" if absolute else ".", _DIR_FLAGS)
        self.links = 0
        self.proc = _procfs_dev()

    def close(self) -> None:
        os.close(self.fd)

    def enter(self, new_fd: int) -> None:
        os.close(self.fd)
        self.fd = new_fd

    def run(self) -> Destination:
        while True:
            name = self.parts.popleft()
            here = self.shown.child(name)
            if name == "..":
                self.enter(os.open("..", _DIR_FLAGS, dir_fd=self.fd))
                self.shown.up()
                continue
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                if not self.parts:
                    return Destination(self.fd, name, here, None)
                if not self.parents:
                    raise UsageError(f"{self.what} folder {here} does not exist") from None
                try:
                    os.mkdir(name, 0o777, dir_fd=self.fd)
                except FileExistsError:
                    pass        # made at the same moment by another writer
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                found = self.follow(name, st, here)
                if found is not None:
                    return found
                continue
            if not self.parts:
                return Destination(self.fd, name, here, st)
            if not stat.S_ISDIR(st.st_mode):
                raise UsageError(f"{self.what} folder {here} is not a folder")
            self.enter(os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=self.fd))
            self.shown.down(name)

    def follow(self, name: str, st: os.stat_result, here: str) -> Destination | None:
        """Follow the link ``name`` if it may be: its target's components go first in line. A
        link of /proc's is left to the kernel (a pipe's has no path to walk)."""
        folder = os.fstat(self.fd)
        _check_link(folder, st, here, self.what)
        self.links += 1
        if self.links > MAX_LINKS:
            raise UsageError(f"{self.what} {self.text} is a symlink that cannot be followed "
                             "(too many levels of symbolic links); point it at a file")
        if self.proc is not None and folder.st_dev == self.proc:
            if self.parts:
                self.enter(os.open(name, _DIR_FLAGS, dir_fd=self.fd))
                self.shown.down(name)
                return None
            reached = os.stat(name, dir_fd=self.fd)
            if not (stat.S_ISREG(reached.st_mode) or stat.S_ISDIR(reached.st_mode)):
                return Destination(self.fd, name, here, reached, magic=True)
        target = os.readlink(name, dir_fd=self.fd)
        if target.startswith("/"):
            self.enter(os.open("/", _DIR_FLAGS))
            self.shown.reset()
        self.parts.extendleft(reversed(_split(target)))
        if not self.parts:      # a link to "/" or "."
            raise UsageError(f"{self.what} {self.text} leads to a folder; give a file name")
        return None


def check_destination(dest: Destination, what: str = "output") -> None:
    """Refuse what a file cannot be written to: a folder, a socket, a planted file."""
    kind = dest.kind
    if kind == "folder":
        raise UsageError(f"{what} {dest.path} is a folder; give a file name")
    if kind in ("a socket", "other"):
        raise UsageError(f"{what} {dest.path} is {'a socket' if kind == 'a socket' else 'not a regular file'}; "
                         "give a file, a FIFO, a device or -")
    if kind == "file":
        _check_replace(os.fstat(dest.folder), dest.st, dest.path, what)


def check_writable(path: str | os.PathLike, what: str = "output") -> None:
    """Refuse, before any work, a path a write could not land in (:func:`resolve`,
    :func:`check_destination`)."""
    with resolve(path, what) as dest:
        check_destination(dest, what)


def open_in_place(dest: Destination) -> int:
    """A write descriptor on the FIFO or device ``dest`` names (no create, no rename); opening a
    FIFO waits for its reader, as a shell redirection does."""
    follow = 0 if dest.magic else os.O_NOFOLLOW
    return os.open(dest.name, os.O_WRONLY | os.O_CLOEXEC | os.O_NOCTTY | follow, dir_fd=dest.folder)


# ---- the temp file beside the target -------------------------------------------------------

# Temp files not yet committed or discarded: removed by remove_partial_files() on any way out
# of the CLI, including an exception raised between two lines of a writer.
_LIVE: set["AtomicFile"] = set()


def _part_prefix(name: str) -> str:
    # room for ".<pid>.<16 hex>.part" within a 255-byte name
    return f".{name[:200]}."


class AtomicFile:
    """A temp file beside ``dest``'s entry, renamed onto it by :meth:`commit`; :meth:`discard`
    leaves nothing behind. Owns ``dest`` (closes its folder descriptor when done)."""

    def __init__(self, dest: Destination, what: str = "output"):
        try:
            check_destination(dest, what)
        except BaseException:
            dest.close()
            raise
        self.dest, self.what = dest, what
        self.replacing = dest.st if dest.kind == "file" else None
        remove_stale_parts(dest.folder, dest.name)
        mode = 0o600 if self.replacing is not None else 0o666
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(100):
            # os.urandom, as secrets.token_hex uses: importing secrets loads hmac and OpenSSL at every start
            name = f"{_part_prefix(dest.name)}{os.getpid()}.{os.urandom(8).hex()}{PART_SUFFIX}"
            try:
                self.fd = os.open(name, flags, mode, dir_fd=dest.folder)
                break
            except FileExistsError:
                continue
            except OSError as e:
                dest.close()
                raise self.failure(e) from None
        else:  # pragma: no cover - 100 collisions of 64 random bits
            dest.close()
            raise OutputError(f"cannot write {dest.path}: no free temp file name beside it")
        self.tmp_name = name
        _LIVE.add(self)

    @property
    def path(self) -> Path:
        return Path(self.dest.path)

    @property
    def tmp(self) -> Path:
        """The temp file's path (for messages and tests; all work goes through descriptors)."""
        return self.path.with_name(self.tmp_name)

    def failure(self, e: OSError) -> Exception:
        return os_error(e, self.dest.path) or OutputError(f"cannot write {self.dest.path}: {e.strerror or e}")

    def commit(self) -> None:
        """Give the temp file the replaced file's mode and owner, close it, rename it onto the
        target. The descriptor must have been written (and flushed) by the caller."""
        from ttscli import signals

        with self.discarded_on_error():
            if self.replacing is not None:
                self._keep_mode_and_owner(self.replacing)
            os.close(self.fd)
            self.fd = -1
            signals.check()  # a stop received (and lost on its way) before this point: nothing is renamed
            os.replace(self.tmp_name, self.dest.name, src_dir_fd=self.dest.folder, dst_dir_fd=self.dest.folder)
        self._release()

    @contextmanager
    def discarded_on_error(self):
        """Whatever fails inside removes the temp file and goes on its way; an OSError goes as the
        one line naming the target (:meth:`failure`)."""
        try:
            yield
        except BaseException as e:
            self.discard()
            if isinstance(e, OSError):
                raise self.failure(e) from None
            raise

    def _keep_mode_and_owner(self, old: os.stat_result) -> None:
        mode = stat.S_IMODE(old.st_mode) & 0o777
        try:
            os.fchown(self.fd, old.st_uid if os.geteuid() == 0 else -1, old.st_gid)
        except OSError:
            pass            # not root, not a member of the old group: the group is ours
        if os.fstat(self.fd).st_gid != old.st_gid:
            mode &= ~0o070
        os.fchmod(self.fd, mode)

    def discard(self) -> None:
        """Remove the temp file. Never raises: it runs on the way out of another error, which is
        the one the user must see."""
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = -1
        try:
            os.unlink(self.tmp_name, dir_fd=self.dest.folder)
        except OSError:
            pass            # a later write to the same target removes it (remove_stale_parts)
        self._release()

    def _release(self) -> None:
        _LIVE.discard(self)
        self.dest.close()


def remove_partial_files() -> None:
    for f in list(_LIVE):
        f.discard()


def write_bytes(path: str | os.PathLike, data: bytes, what: str = "output") -> Path:
    """Write ``data`` to the user-named ``path`` atomically (see the module docstring); the
    path written (a link's target) is returned."""
    return write_destination(resolve(path, what), data, what)


def write_destination(dest: Destination, data: bytes, what: str = "output") -> Path:
    """:func:`write_bytes` to a resolved destination (which this closes)."""
    f = AtomicFile(dest, what)
    with f.discarded_on_error():
        view = memoryview(data)
        while view:
            view = view[os.write(f.fd, view):]
    f.commit()
    return f.path


# ---- stale temp files ------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` is running. A zombie is not: a killed writer whose parent died too
    is handed to PID 1, and an init that never reaps (many containers') keeps it a zombie for good,
    which ``kill(pid, 0)`` alone would take for a live writer."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        state = b""     # no /proc (macOS), or gone: kill() below answers
    if state in (b"Z", b"X"):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


def remove_stale_parts(folder: int | str | os.PathLike, name: str, now: float | None = None) -> list[str]:
    """Remove ``.NAME.PID.*.part`` files beside the target whose writer is gone; their names.
    ``folder`` is a descriptor of the folder or its path."""
    now = time.time() if now is None else now
    prefix, removed = _part_prefix(name), []
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
                     dir_fd=folder) if isinstance(folder, int) else os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return removed
    try:
        entries = list(os.scandir(fd))
    except OSError:
        entries = []
    try:
        for e in entries:
            if not (e.name.startswith(prefix) and e.name.endswith(PART_SUFFIX)):
                continue
            pid = e.name[len(prefix):-len(PART_SUFFIX)].split(".")[0]
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            dead = pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid))
            if dead or now - st.st_mtime > STALE_PART_S:
                try:
                    os.unlink(e.name, dir_fd=fd)
                    removed.append(e.name)
                except OSError:
                    pass        # gone already, or not ours to remove
    finally:
        os.close(fd)
    return removed
