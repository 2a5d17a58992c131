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


class Interrupted(TTSError):
    """Ctrl-C: exit 130, no partial output."""

    exit_code = 130
