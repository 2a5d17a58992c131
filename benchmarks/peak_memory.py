"""The peak memory a benchmark process reports, shared by the peer scripts (each imports it from
this folder, which Python puts first on the path of a script run from it)."""
from __future__ import annotations


def peak_rss_mb() -> float:
    """This process's own peak RSS. ``/proc/self/status``'s VmHWM where it exists: Linux carries
    ``ru_maxrss`` across fork and exec, so a peer started by ``ttscli bench`` would report the
    parent's peak in place of its own when the parent's was higher."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
