"""`ttscli batch --engine ray`: the same rows on a Ray cluster (the ``ttscli[ray]`` extra).

A Ray Data actor pool: each actor loads the model once (one model per actor, a GPU each where
the cluster has GPUs) and writes its rows with :func:`ttscli.batch.write_row`, exactly as the
local engine does, into the shared output folder; the driver only records what comes back.
Ray restarts a killed actor and retries its row (a file is renamed into place only when
complete, so a retried row replaces nothing half-written), and the driver records a row once.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict

from ttscli.batch.manifest import Row
from ttscli.errors import BackendUnavailableError, UsageError

# what a worker needs from the driver's environment to find the same weights and caches
ENV = ("TTSCLI_CACHE", "TTSCLI_CONFIG_DIR", "TTSCLI_REGISTRY", "TTSCLI_BLAS", "HF_HOME", "HF_HUB_OFFLINE",
       "HF_HUB_CACHE", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")


class RowWriter:
    """A Ray Data actor: one model, rows written one at a time."""

    JOB: dict = {}

    def __init__(self):
        from pathlib import Path

        from ttscli.batch import BatchJob, ModelRef

        job = self.JOB
        ref = ModelRef(**{**job["ref"], "model_dir": Path(job["ref"]["model_dir"]) if job["ref"]["model_dir"] else None,
                          "registry_files": [Path(p) for p in job["ref"]["registry_files"]]})
        self.job = BatchJob(manifest=Path(job["manifest"]), out=Path(job["out"]), ref=ref, fmt=job["fmt"],
                            seed=job["seed"])
        self.pipe = ref.load()

    def __call__(self, batch: dict) -> dict:
        from ttscli.batch import attempt

        oks, entries = [], []
        for raw in batch["row"]:
            ok, entry = attempt(self.pipe, Row(**json.loads(raw)), self.job)
            self.pipe.clear_cache()
            oks.append(ok)
            entries.append(json.dumps(entry))
        return {"ok": oks, "entry": entries}


def _job_dict(job) -> dict:
    ref = asdict(job.ref)
    ref["model_dir"] = str(ref["model_dir"]) if ref["model_dir"] else None
    ref["registry_files"] = [str(p) for p in ref["registry_files"]]
    return {"manifest": str(job.manifest.resolve()), "out": str(job.out.resolve()), "ref": ref, "fmt": job.fmt,
            "seed": job.seed}


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
    ds = ds.map_batches(writer, batch_size=1, concurrency=workers, num_cpus=0 if gpus else 1, num_gpus=gpus)
    try:
        for rec in ds.iter_rows():
            yield bool(rec["ok"]), json.loads(rec["entry"])
    finally:
        ray.shutdown()
