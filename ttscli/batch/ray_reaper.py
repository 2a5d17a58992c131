"""Ends the processes of a local Ray cluster once the ttscli process that started it is gone.

Ray ties its GCS server and raylet to the driver (they die with it) and its workers follow the
raylet, but the dashboard and runtime-env agents outlive a killed driver by a minute or more:
they wait to report the raylet's death to the GCS server that died with it. The driver runs this
script with a pipe on its stdin and, once the cluster is up, writes the pids of the processes
that starting it gave it (GCS server, raylet, monitors). From then on the script keeps the list
of those processes and everything under them (agents, workers) up to date, once a second; when
the pipe closes (the driver exited, however it ended) it kills every one still running. Nothing
else is touched: a pid reused by another process is told apart by its start time (psutil).

Run as a script (``python ray_reaper.py``); the driver imports it only for :func:`load_psutil`.
"""
import os
import select
import sys

POLL_S = 1.0


def load_psutil():
    """psutil as Ray ships it (ray/thirdparty_files, which ``import ray`` puts on the path: found
    here without importing Ray, which costs about 70 MB and a second), or an installed one."""
    try:
        import psutil
    except ImportError:
        import importlib.util

        spec = importlib.util.find_spec("ray")
        if spec is None or not spec.submodule_search_locations:
            raise
        sys.path.insert(0, os.path.join(spec.submodule_search_locations[0], "thirdparty_files"))
        import psutil
    return psutil


def grow(psutil, cluster: dict) -> None:
    """Add every process under those in ``cluster`` ({pid: psutil.Process}), from one pass over the
    process table."""
    children: dict[int, list] = {}
    for p in psutil.process_iter(["ppid"]):
        children.setdefault(p.info["ppid"], []).append(p)
    todo = list(cluster)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child.pid not in cluster and child.pid != os.getpid():
                cluster[child.pid] = child
                todo.append(child.pid)


def closed(stream, timeout: float) -> bool:
    """Whether the pipe reached its end (the driver is gone) within ``timeout`` seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return bool(ready) and not os.read(stream.fileno(), 4096)


def main() -> None:
    psutil = load_psutil()
    cluster = {}
    for pid in sys.stdin.buffer.readline().split():  # empty if the driver ended before the cluster was up
        try:
            cluster[int(pid)] = psutil.Process(int(pid))
        except (psutil.Error, ValueError):
            continue
    if not cluster:
        return
    grow(psutil, cluster)
    while not closed(sys.stdin.buffer, POLL_S):
        grow(psutil, cluster)
    for p in cluster.values():
        try:
            p.kill()  # psutil refuses a pid that now names another process
        except psutil.Error:
            continue


if __name__ == "__main__":
    main()
