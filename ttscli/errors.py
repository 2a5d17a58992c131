"""One exception hierarchy. The CLI maps each class to an exit code and prints one line."""
from __future__ import annotations


class TTSError(Exception):
    """A failure the user can act on. ``str(err)`` is the one line shown to them."""

    exit_code = 1


class UsageError(TTSError):
    """Bad flags, bad input text, bad files: the user must change the command (exit 2)."""

    exit_code = 2


class InputTooLongError(UsageError):
    """Text, instruction, prompt or reference audio over a documented limit."""


class AudioInputError(UsageError):
    """Reference audio that cannot be used (unreadable, silent, too long)."""


class ModelNotFoundError(UsageError):
    """Unknown model id, or weights that are not present and cannot be fetched."""


class CheckpointError(TTSError):
    """Weights present but unusable: missing, unexpected or mis-shaped tensors, bad config."""


class BackendUnavailableError(TTSError):
    """A backend (Core ML, PortAudio, an audio codec) that this machine cannot run."""


class NotImplementedModelError(TTSError):
    """A registry entry whose implementation does not exist yet."""


class GenerationError(TTSError):
    """Generation failed, e.g. max frames reached before end of speech."""


class LimitReached(GenerationError):
    """A request's own bound (its frame or token limit, a decoder's position capacity) reached
    before the model ended its speech: an error, never cut-off audio. The server answers 422,
    as the request cannot be voiced within its limits; the CLI exits 1 as for any generation error."""


class Interrupted(TTSError):
    """Ctrl-C (or SIGTERM, SIGHUP): exit 128 + the signal, no partial file.

    ``outcome`` is what the stopped run leaves behind, the second half of the one line the user
    reads after the signal's name: a batch stopped after some rows says how many are kept."""

    exit_code = 130

    def __init__(self, outcome: str = "no output written"):
        super().__init__(outcome)
        self.outcome = outcome


class OutputError(TTSError):
    """The output cannot be written: disk full, read-only file system, no permission (exit 1).

    ``errno`` is the system's error number where an OSError was the cause, so a caller can tell a
    full disk (which fails every write after it) from a failure of one file."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class OutputClosed(TTSError):
    """The reader of stdout or a FIFO went away (`| head`): a quiet exit 141, as for SIGPIPE.

    Deliberately not an OSError, so nothing on the way up mistakes it for a failed write."""

    exit_code = 141


# errno -> what to tell the user; these are the machine's state, not bugs ("internal error")
_OS_CAUSES = {
    "ENOSPC": "the disk is full",
    "EDQUOT": "the disk quota is exceeded",
    "EROFS": "the file system is read-only",
    "EACCES": "permission denied",
    "EPERM": "permission denied",
    "EFBIG": "the file is larger than this system allows",
    "EIO": "an input/output error",
}


def os_cause(errnum: int | None) -> str | None:
    import errno

    return _OS_CAUSES.get(errno.errorcode.get(errnum or 0, ""))


def os_error(err: OSError, path=None, doing: str = "write") -> TTSError | None:
    """A one-line OutputError for an OSError the user can act on (full disk, read-only, ...)."""
    cause = os_cause(err.errno)
    if cause is None:
        return None
    where = path if path is not None else err.filename
    target = f" {where}" if where is not None else ""
    return OutputError(f"cannot {doing}{target}: {cause} ({err.strerror})", errno=err.errno)


def missing_library(err: BaseException) -> TTSError | None:
    """A one-line error for a native library a dependency could not load (the machine's state, not
    a bug): libsndfile behind soundfile, whose pure-Python wheel (other platforms) bundles none."""
    text = str(err)
    if isinstance(err, OSError) and "libsndfile" in text:
        return BackendUnavailableError(
            f"soundfile cannot load libsndfile ({text}): reinstall it as a wheel that bundles the library "
            "(pip install --force-reinstall --only-binary=:all: soundfile) or install the system's libsndfile1")
    return None
