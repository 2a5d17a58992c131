"""`ttscli batch --engine ray`: the same rows on a Ray cluster (the ``ttscli[ray]`` extra).

A Ray Data actor pool: each actor loads the model once (one model per actor, a GPU each where
the cluster has GPUs) and runs the batches of rows Ray hands it through
:func:`ttscli.batch.run_local`, exactly as the local engine does: a family with batched
generation (``Family.batches``: its pipelines generate rows) generates a batch's rows together, others
one after another; files go into the shared output folder and the driver only records what
comes back. Ray restarts a killed actor and retries its batch (a file is renamed into place
only when complete, so a retried row replaces nothing half-written), and the driver records a
row once. Each actor also journals the entries it wrote (manifest.py), so rows written before
the driver was killed are not synthesized again by the next run.

Which cluster: the one the user names (``--ray-address``, else ``RAY_ADDRESS``), or a local one
this process starts and ends (:func:`connect`), reachable from this machine only.
"""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from ttscli.batch.manifest import Journal, Row
from ttscli.batch.ray_reaper import load_psutil
from ttscli.errors import BackendUnavailableError, OutputError, UsageError

# what a worker needs from the driver's environment to find the same weights and caches
ENV = ("TTSCLI_CACHE", "TTSCLI_CONFIG_DIR", "TTSCLI_REGISTRY", "TTSCLI_BLAS", "HF_HOME", "HF_HUB_OFFLINE",
       "HF_HUB_CACHE", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")
# Ray reads this once, when it is imported: at 0 a local node takes 127.0.0.1 as its address (as on
# macOS and Windows), and every server of the node (GCS, raylet, object manager, workers, agents,
# metrics) listens there alone; at 1 (Linux's default) they listen on every interface
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
REAPER = Path(__file__).with_name("ray_reaper.py")


@dataclass(frozen=True)
class Cluster:
    """Where the rows run: ``address`` None is a local cluster this process starts (and ends);
    else the cluster the user named, and ``source`` says where (``--ray-address``, ``RAY_ADDRESS``)."""

    address: str | None = None
    source: str = ""

    def describe(self) -> str:
        if self.address is None:
            return ("ray: starting a local cluster on 127.0.0.1 (no dashboard, no client server; "
                    "it ends with this command)")
        return f"ray: joining the cluster at {self.address} (from {self.source})"


def choose_cluster(address: str | None) -> Cluster:
    """``--ray-address``, else ``RAY_ADDRESS``, else a local cluster ("local" in either asks for one,
    as it does in Ray). Ray itself would also join a cluster it finds running on this machine
    (/tmp/ray/ray_current_cluster); that is never done without the user naming it."""
    if address:
        return Cluster() if address == "local" else Cluster(address, "--ray-address")
    env = os.environ.get("RAY_ADDRESS", "")
    return Cluster() if env in ("", "local") else Cluster(env, "RAY_ADDRESS")


class RowWriter:
    """A Ray Data actor: one model; each call runs a batch of rows as the local engine would."""

    JOB: dict = {}

    def __init__(self):
        from ttscli.batch import BatchJob, ModelRef, job_aligner

        job = self.JOB
        ref = ModelRef(**{**job["ref"], "model_dir": Path(job["ref"]["model_dir"]) if job["ref"]["model_dir"] else None,
                          "registry_files": [Path(p) for p in job["ref"]["registry_files"]]})
        self.job = BatchJob(manifest=Path(job["manifest"]), out=Path(job["out"]), ref=ref, fmt=job["fmt"],
                            seed=job["seed"], max_batch=job["max_batch"], timestamps=job["timestamps"])
        self.journal = Journal(self.job.out)
        # Ray may call an actor from another thread than the one that built it, and MLX arrays
        # belong to their thread's stream ("There is no Stream(cpu, 0) in current thread"): the
        # model is loaded and run on one thread of the actor's own
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ttscli-ray-model")
        self.pipe = self._thread.submit(ref.load).result()
        self.aligner = self._thread.submit(job_aligner, self.pipe, self.job).result()

    def __call__(self, batch: dict) -> dict:
        return self._thread.submit(self._run, list(batch["row"])).result()

    def _run(self, raws: list[str]) -> dict:
        """One output row per result: kind "row" (an entry, journaled once its file is in place),
        "failed" (an error entry) or "stop" (the error that ends the run, after the rows before it)."""
        from ttscli.batch import run_local, stop_error

        rows = [Row(**json.loads(raw)) for raw in raws]
        out: dict[str, list] = {"kind": [], "entry": []}
        try:
            for ok, entry in run_local(rows, self.job, self.pipe, self.aligner):
                if ok:
                    self.journal.add(entry)
                out["kind"].append("row" if ok else "failed")
                out["entry"].append(json.dumps(entry))
        except OutputError as e:
            if stop_error(e) is None:
                raise
            out["kind"].append("stop")
            out["entry"].append(json.dumps({"error": str(e), "errno": e.errno}))
        return out


def _job_dict(job) -> dict:
    ref = asdict(job.ref)
    ref["model_dir"] = str(ref["model_dir"]) if ref["model_dir"] else None
    ref["registry_files"] = [str(p) for p in ref["registry_files"]]
    return {"manifest": str(job.manifest.resolve()), "out": str(job.out.resolve()), "ref": ref, "fmt": job.fmt,
            "seed": job.seed, "max_batch": job.max_batch, "timestamps": job.timestamps}


def rows_per_call(job, rows: int, workers: int) -> int:
    """Rows Ray hands an actor at once: ``job.max_batch`` for a family with batched generation
    (fewer when that would leave actors idle), else 1, so that a killed actor loses (and Ray
    retries) one row rather than a batch that gains nothing from running together."""
    from ttscli.models import family_of
    from ttscli.registry import load_registry

    spec = load_registry(job.ref.registry_files).resolve(job.ref.model)
    if job.max_batch <= 1 or job.timestamps or not family_of(spec).batches:
        return 1
    return max(1, min(job.max_batch, -(-rows // workers)))


def _missing(name: str | None) -> BackendUnavailableError:
    return BackendUnavailableError(f"--engine ray needs the ray extra ({name} is missing): pip install 'ttscli[ray]'")


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise _missing(e.name) from None
    return ray


@contextmanager
def _environ(values: dict[str, str]):
    """These variables set while Ray is imported and starts its processes (they inherit them);
    this process's environment is as it was afterwards."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def start_reaper() -> subprocess.Popen:
    """ray_reaper.py, waiting on a pipe that closes when this process ends (in a session of its
    own, so the terminal's Ctrl-C does not reach it first)."""
    return subprocess.Popen([sys.executable, str(REAPER)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _children(psutil) -> set[int]:
    return {c.pid for c in psutil.Process().children()}


def _init(ray, address: str, **kw) -> None:
    """ray.init, with its failures as one line; Ray's SIGTERM handler (exit at once) is replaced
    by the one that was there, so a stop ends the run as Ctrl-C does."""
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, logging_level="ERROR", **kw)
    except ConnectionError as e:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {str(e).splitlines()[0]}") from None
    except ValueError as e:  # an address Ray cannot parse
        raise UsageError(f"Ray cluster address {address!r}: {str(e).splitlines()[0]}") from None
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


def _host_port(address: str) -> tuple[str, int | None]:
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else None


def on_loopback(address: str) -> bool:
    """Whether a cluster address names this machine's loopback (``127.0.0.1:6379``, ``localhost:6379``)."""
    host, _ = _host_port(address)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_reachable(cluster: Cluster, timeout_s: float = 10.0) -> None:
    """One line at once for a ``host:port`` nothing answers on: Ray itself retries for minutes,
    printing a warning every few seconds."""
    host, port = _host_port(cluster.address)
    if "://" in cluster.address or port is None:
        return  # "auto", or Ray Client's ray://: Ray's own checks
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise UsageError(f"cannot reach the Ray cluster at {cluster.address} (from {cluster.source}): "
                         f"{e.strerror or e}") from None


@contextmanager
def connect(cluster: Cluster, env: dict[str, str]):
    """Ray connected to ``cluster`` for the block, shut down after it (``env``: variables the
    workers get).

    A local cluster listens on 127.0.0.1 only (Ray's servers have no authentication of their
    own by default: anyone who reaches one can run code), with no dashboard and no client server,
    and it ends with this process however that ends: Ray takes its GCS server and raylet down
    with the driver, and ray_reaper.py the rest (agents, workers) at once. A named cluster
    on a loopback address is joined on loopback too (Ray would otherwise look for it, and listen
    for its workers, on this machine's network address)."""
    from ttscli.batch import finish

    runtime_env = {"env_vars": env} if env else None
    ray, reaper = (_join(cluster, runtime_env), None) if cluster.address is not None else _start_local(runtime_env)
    try:
        yield ray
    except BaseException:
        finish([ray.shutdown, lambda: _release(reaper)], failing=True)  # the error stays the one raised
        raise
    finish([ray.shutdown, lambda: _release(reaper)], failing=False)


def _join(cluster: Cluster, runtime_env: dict | None):
    check_reachable(cluster)
    with _environ({LOCAL_ONLY_ENV: "0"} if on_loopback(cluster.address) else {}):
        ray = _import_ray()
        _init(ray, cluster.address, runtime_env=runtime_env)
    return ray


def _start_local(runtime_env: dict | None) -> tuple[object, subprocess.Popen]:
    """A new local cluster on 127.0.0.1, and the reaper that ends it with this process."""
    try:
        psutil = load_psutil()
    except ImportError:
        raise _missing("ray") from None
    reaper = start_reaper()
    try:
        before = _children(psutil)
        try:
            with _environ({LOCAL_ONLY_ENV: "0"}):
                ray = _import_ray()
                _init(ray, "local", include_dashboard=False, runtime_env=runtime_env)
        finally:  # what starting the cluster started, even if it failed part-way
            _follow(reaper, _children(psutil) - before - {reaper.pid})
        _check_local_only(ray)
    except BaseException:
        _release(reaper)
        raise
    return ray, reaper


def _check_local_only(ray) -> None:
    """Refuse a local node that took a reachable address: Ray was imported in this process before
    :func:`connect` could ask for 127.0.0.1 (a library caller), so its choice was already made."""
    ip = ray.util.get_node_ip_address()
    if ip not in ("127.0.0.1", "::1"):
        ray.shutdown()
        raise BackendUnavailableError(
            f"the local Ray cluster would listen on {ip}, not 127.0.0.1: ray was imported before ttscli "
            f"could set {LOCAL_ONLY_ENV}=0; set it before importing ray, or start a cluster yourself and "
            "give its address (--ray-address)")


def _follow(reaper: subprocess.Popen, pids: set[int]) -> None:
    """Tell the reaper the processes that starting the cluster gave this one (it follows them and
    everything under them)."""
    try:
        reaper.stdin.write(" ".join(map(str, sorted(pids))).encode() + b"\n")
        reaper.stdin.flush()
    except OSError:
        pass  # the reaper is gone: Ray's own ties to the driver are what is left


def _release(reaper: subprocess.Popen | None) -> None:
    """Close the reaper's pipe: it ends what is left of the local cluster, then exits."""
    if reaper is not None and reaper.stdin is not None:
        try:
            reaper.stdin.close()
        except OSError:
            pass  # it is gone already; nothing to tell it


def run_ray(pending: list[Row], job, *, cluster: Cluster | None = None, workers: int = 2
            ) -> Iterator[tuple[bool, dict]]:
    """The rows on ``cluster`` (default: a local one), as (ok, entry) pairs as they come back; a
    full disk seen by an actor ends the run with its one-line error."""
    if workers < 1:
        raise UsageError("--ray-workers must be at least 1")
    env = {k: os.environ[k] for k in ENV if k in os.environ}
    # Ray's own INFO/WARNING lines would bury the one-line messages and the progress bar
    import logging

    logging.getLogger("ray").setLevel(logging.ERROR)
    with connect(cluster or Cluster(), env) as ray:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.verbose_stats_logs = False
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        items = [{"row": json.dumps(asdict(r))} for r in pending]
        ds = ray.data.from_items(items, override_num_blocks=min(len(items), max(1, 4 * workers)))
        # the job rides in the class, not in constructor arguments: Ray keeps those in the object
        # store, where a lost copy would stop a killed actor from restarting
        writer = type("RowWriter", (RowWriter,), {"JOB": _job_dict(job)})
        ds = ds.map_batches(writer, batch_size=rows_per_call(job, len(items), workers), concurrency=workers,
                            num_cpus=0 if gpus else 1, num_gpus=gpus)
        for rec in ds.iter_rows():
            entry = json.loads(rec["entry"])
            if rec["kind"] == "stop":
                raise OutputError(entry["error"], errno=entry["errno"])
            yield rec["kind"] == "row", entry
