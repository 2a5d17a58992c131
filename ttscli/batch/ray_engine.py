"""`ttscli batch --engine ray`: the same rows on a Ray cluster (the ``ttscli[ray]`` extra).

A Ray Data actor pool: each actor loads the model once (one model per actor, a GPU each where
the cluster has GPUs) and runs the batches of rows Ray hands it through
:func:`ttscli.batch.run_local`, exactly as the local engine does: a family with batched
generation (``Family.batched["synthesize_many"]``) generates a batch's rows together, others
one after another; files go into the shared output folder and the driver only records what
comes back. Ray restarts a killed actor and retries its batch (a file is renamed into place
only when complete, so a retried row replaces nothing half-written), and the driver records a
row once.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from ttscli.batch.manifest import Row
from ttscli.errors import BackendUnavailableError, UsageError

# what a worker needs from the driver's environment to find the same weights and caches
ENV = ("TTSCLI_CACHE", "TTSCLI_CONFIG_DIR", "TTSCLI_REGISTRY", "TTSCLI_BLAS", "HF_HOME", "HF_HUB_OFFLINE",
       "HF_HUB_CACHE", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")


class RowWriter:
    """A Ray Data actor: one model; each call runs a batch of rows as the local engine would."""

    JOB: dict = {}

    def __init__(self):
        from pathlib import Path

        from ttscli.batch import BatchJob, ModelRef

        job = self.JOB
        ref = ModelRef(**{**job["ref"], "model_dir": Path(job["ref"]["model_dir"]) if job["ref"]["model_dir"] else None,
                          "registry_files": [Path(p) for p in job["ref"]["registry_files"]]})
        self.job = BatchJob(manifest=Path(job["manifest"]), out=Path(job["out"]), ref=ref, fmt=job["fmt"],
                            seed=job["seed"], max_batch=job["max_batch"])
        # Ray may call an actor from another thread than the one that built it, and MLX arrays
        # belong to their thread's stream ("There is no Stream(cpu, 0) in current thread"): the
        # model is loaded and run on one thread of the actor's own
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ttscli-ray-model")
        self.pipe = self._thread.submit(ref.load).result()

    def __call__(self, batch: dict) -> dict:
        return self._thread.submit(self._run, list(batch["row"])).result()

    def _run(self, raws: list[str]) -> dict:
        from ttscli.batch import run_local

        rows = [Row(**json.loads(raw)) for raw in raws]
        oks, entries = [], []
        for ok, entry in run_local(rows, self.job, self.pipe):
            oks.append(ok)
            entries.append(json.dumps(entry))
        return {"ok": oks, "entry": entries}


def _job_dict(job) -> dict:
    ref = asdict(job.ref)
    ref["model_dir"] = str(ref["model_dir"]) if ref["model_dir"] else None
    ref["registry_files"] = [str(p) for p in ref["registry_files"]]
    return {"manifest": str(job.manifest.resolve()), "out": str(job.out.resolve()), "ref": ref, "fmt": job.fmt,
            "seed": job.seed, "max_batch": job.max_batch}


def rows_per_call(job, rows: int, workers: int) -> int:
    """Rows Ray hands an actor at once: ``job.max_batch`` for a family with batched generation
    (fewer when that would leave actors idle), else 1, so that a killed actor loses (and Ray
    retries) one row rather than a batch that gains nothing from running together."""
    from ttscli.models import family_of
    from ttscli.registry import load_registry

    spec = load_registry(job.ref.registry_files).resolve(job.ref.model)
    if job.max_batch <= 1 or "synthesize_many" not in family_of(spec).batched:
        return 1
    return max(1, min(job.max_batch, -(-rows // workers)))


def run_ray(pending: list[Row], job, *, address: str | None = None, workers: int = 2) -> Iterator[tuple[bool, dict]]:
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise BackendUnavailableError(f"--engine ray needs the ray extra ({e.name} is missing): "
                                      "pip install 'ttscli[ray]'") from None
    if workers < 1:
        raise UsageError("--ray-workers must be at least 1")
    env = {k: os.environ[k] for k in ENV if k in os.environ}
    # Ray's own INFO/WARNING lines would bury the one-line messages and the progress bar
    import logging

    logging.getLogger("ray").setLevel(logging.ERROR)
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, logging_level="ERROR",
                 include_dashboard=False if address is None else None,
                 runtime_env={"env_vars": env} if env else None)
    except ConnectionError as e:
        raise UsageError(f"cannot reach the Ray cluster at {address or 'auto'}: {str(e).splitlines()[0]}") from None
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
    try:
        for rec in ds.iter_rows():
            yield bool(rec["ok"]), json.loads(rec["entry"])
    finally:
        ray.shutdown()
