"""Stop signals for the command line: SIGINT, SIGTERM and SIGHUP all end the way Ctrl-C does.

Two phases. While the console script imports ttscli (typer and the command line's options)
nothing has been written yet, so a stop prints the one line and exits at once: Python's
own KeyboardInterrupt would print a traceback from inside some import. Once `cli.main` runs,
SIGINT raises KeyboardInterrupt and SIGTERM/SIGHUP raise `Terminated` (a KeyboardInterrupt), so
the one abort path (Sink.abort) removes the temporary file whichever signal came. A second stop
while the first is being cleaned up runs the registered cleanups and exits at once (a forced
quit that still leaves no partial file). The exit status is 128 + the signal number: 130 for
SIGINT, 143 for SIGTERM, 129 for SIGHUP, as a shell reports a process killed by that signal.

Library users get none of this: nothing is installed unless the process is the console script.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Callable

STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))

_received: int | None = None
_cleanups: list[Callable[[], None]] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C's KeyboardInterrupt would be."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def is_console_script() -> bool:
    """Whether this process is the installed `ttscli` script (not a library user, not pytest)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else "")
    return os.path.basename(path).removesuffix(".exe") in ("ttscli", "ttscli-script.py")


def received() -> int | None:
    """The first stop signal received since `install`, if any."""
    return _received


def check() -> None:
    """Raise the stop again if one was received since `install`.

    The handler's exception can be lost on its way out: raised inside a finalizer or a generator
    being collected (Python reports those as "ignored"), or inside a library's catch-all. The run
    must still end as stopped, so code about to write or commit output checks here: once per
    chunk and before the file is renamed into place.
    """
    if _received is None:
        return
    if _received == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(_received)


def forget() -> None:
    """The command is over: its stop, if any, must not stop later work in this process."""
    global _received
    _received = None


def exit_code(signum: int | None = None) -> int:
    return 128 + int(signum or _received or signal.SIGINT)


def message(signum: int | None = None, outcome: str = "no output written") -> str:
    """The line a stop ends with: which signal, then what the run leaves behind."""
    signum = signum or _received or signal.SIGINT
    if signum == signal.SIGINT:
        return f"interrupted; {outcome}"
    return f"stopped by {signal.Signals(signum).name}; {outcome}"


def at_stop(fn: Callable[[], None]) -> None:
    """Run `fn` before a forced exit (a second signal): e.g. remove temporary files."""
    if fn not in _cleanups:
        _cleanups.append(fn)


def _run_cleanups() -> None:
    for fn in _cleanups:
        try:
            fn()
        except Exception:  # noqa: BLE001 - cleanup on a forced exit: one failing must not stop the others
            pass


def _exit_now(signum: int, frame) -> None:
    _run_cleanups()
    try:
        os.write(2, f"error: {message(signum)}\n".encode())
    finally:
        os._exit(exit_code(signum))


def _raise(signum: int, frame) -> None:
    global _received
    if _received is not None:
        _exit_now(_received, frame)
    _received = signum
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _set(handler) -> None:
    for s in STOP_SIGNALS:
        try:
            signal.signal(s, handler)
        except (ValueError, OSError):  # not the main thread, or a signal this platform refuses
            pass


def install_for_import() -> None:
    """Before the heavy imports: a stop exits with one line (only in the console script)."""
    if is_console_script():
        _set(_exit_now)


def _unraisable(info) -> None:
    """The stop's own exception, raised inside a finalizer or a generator being collected, is
    not printed ("Exception ignored in ...": lines on top of the one line): the flag it set
    stops the run through `check`. Anything else goes to the hook that was there before."""
    if isinstance(info.exc_value, KeyboardInterrupt) and _received is not None:
        return
    _previous_unraisable(info)


_previous_unraisable = sys.unraisablehook


def install() -> None:
    """While a command runs: stops raise into the code so sinks abort and files are removed."""
    global _received, _previous_unraisable
    _received = None
    _set(_raise)
    if sys.unraisablehook is not _unraisable:
        _previous_unraisable = sys.unraisablehook
        sys.unraisablehook = _unraisable


def uninstall_unraisable() -> None:
    """Back to the hook `install` found (an in-process caller's own)."""
    if sys.unraisablehook is _unraisable:
        sys.unraisablehook = _previous_unraisable


def _exit_quiet(signum: int, frame) -> None:
    os._exit(exit_code(signum))


def install_for_exit() -> None:
    """After the command: nothing is left to abort or report, a late stop just sets the status."""
    _set(_exit_quiet)
