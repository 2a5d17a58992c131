"""Where onnxruntime runs, its thread pools, and a session over a saved LM graph whose KV
cache lives in numpy buffers bound as both past and present (IOBinding).

Threads: the code predictor runs 15 short steps per frame between talker steps, so two
sessions alternate many times a second. Each with its own spinning pool, the idle pool's
threads spin against the busy one (several times slower on 2 cores;
docs/benchmarks.md#code-comment-figures). Two ways out:

* ``TTSCLI_ONNX_POOL=global``: ONE process-wide intra-op pool shared by every session of this
  backend. onnxruntime then refuses, for the rest of the process, any session that asks for
  its own pool -- which every other onnxruntime user does by default (piper-tts as a bench
  peer, DNSMOS in ``ttscli eval``) -- so it is opt-in.
* the default, ``session``: a pool per session whose threads do not spin when idle
  (``session.intra_op.allow_spinning=0``), which removes the contention.

On a busy 2-core machine spinning lost whichever way it was arranged: one global spinning pool
and pools spinning only while their run lasts (``session.force_spinning_stop``) were both
slower than the default (docs/benchmarks.md#qwen3-cpu-backends-busy); one thread per session
came close to two. Spinning pays on idle cores, which a shared CPU does not have.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ttscli.errors import BackendUnavailableError, CheckpointError, GenerationError

_POOL = {"threads": None}
_POOL_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def onnx_available() -> tuple[bool, str]:
    """(True, "") when onnxruntime can be imported, else (False, why)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as e:
        extra = ("it is a dependency on Linux: reinstall ttscli" if sys.platform.startswith("linux")
                 else "pip install 'ttscli[onnx]'")
        return False, f"onnxruntime is not installed ({e}); {extra}"
    return True, ""


def require_onnxruntime() -> None:
    ok, why = onnx_available()
    if not ok:
        raise BackendUnavailableError(f"{why}; or use --code-decoder-backend mlx")


def default_threads() -> int:
    """TTSCLI_ONNX_THREADS, else the CPUs this process may run on."""
    env = os.environ.get("TTSCLI_ONNX_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS
        return max(1, os.cpu_count() or 1)


POOL_ENV = "TTSCLI_ONNX_POOL"


def pool_mode() -> str:
    mode = os.environ.get(POOL_ENV, "").strip().lower() or "session"
    if mode not in ("session", "global"):
        from ttscli.errors import UsageError

        raise UsageError(f"{POOL_ENV}={mode}: choose session or global")
    return mode


def session_options(threads: int | None = None):
    """Options for one of this backend's sessions (see the module docstring for the pools)."""
    require_onnxruntime()
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    if pool_mode() == "global":
        with _POOL_LOCK:
            if _POOL["threads"] is None:
                _POOL["threads"] = threads or default_threads()
                # raises once the environment exists (another session came first): that
                # environment's pools are then used as they are
                with contextlib.suppress(Exception):
                    ort.set_global_thread_pool_sizes(_POOL["threads"], 1)
        so.use_per_session_threads = False
        return so
    so.intra_op_num_threads = threads or default_threads()
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def component_session(folder: Path, name: str, *, arena: bool = True):
    """The session of component ``name`` of a converted folder (its manifest entry's graph).
    ``arena=False``: plain allocations per run, for graphs whose tensors grow with the
    utterance (an arena would keep the longest one's high-water mark for the process's life)."""
    from .manifest import component, read_manifest

    folder = Path(folder)
    so = session_options()
    so.enable_cpu_mem_arena = arena
    return load_session(folder / component(read_manifest(folder), name, folder)["path"], so)


def load_session(path: Path, so=None):
    import onnxruntime as ort

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"ONNX graph {path} is missing; convert again (ttscli convert MODEL --to onnx)")
    try:
        return ort.InferenceSession(str(path), so or session_options(), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime reports load failures as its own exception types
        raise CheckpointError(f"onnxruntime could not load {path}: {e}") from e


@dataclass
class LMCache:
    """One request's K/V buffers ``[rows, kv_heads, capacity, head_dim]`` per layer and how many
    positions they hold (every row the same: CFG's rows, which share a length). Positions past
    ``offset`` are stale and never read (the attention reads ``offset`` positions), so a
    restart only resets the offset."""

    keys: list[np.ndarray]
    values: list[np.ndarray]
    offset: int = 0
    # the session's IOBinding with these buffers bound, and the outputs it has bound: made on
    # first use and kept, so a step rebinds only its inputs (a frame makes hundreds of steps)
    binding: Any = field(default=None, repr=False)
    bound_outputs: tuple[str, ...] = ()
    ort_values: list = field(default_factory=list, repr=False)   # OrtValues over keys/values

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def reset(self) -> None:
        self.offset = 0

    def select_rows(self, rows) -> None:
        """Row ``i`` becomes the old row ``rows[i]`` in every layer: beam search's surviving
        histories, or a one-row prefill repeated into beams. Same row count: in place (the
        buffers the session has bound stay bound); another count: new buffers, bound afresh."""
        rows = np.asarray(rows, np.int64)
        n = self.offset
        if len(rows) == self.keys[0].shape[0]:
            if np.array_equal(rows, np.arange(len(rows))):
                return
            for buf in (*self.keys, *self.values):
                buf[:, :, :n] = buf[rows, :, :n]
            return
        self.binding, self.bound_outputs, self.ort_values = None, (), []
        self.keys = [np.ascontiguousarray(b[rows]) for b in self.keys]
        self.values = [np.ascontiguousarray(b[rows]) for b in self.values]


class OnnxLM:
    """A saved LM graph (:mod:`.graph`) with its cache geometry from the manifest entry."""

    def __init__(self, folder: Path, entry: dict):
        self.entry = entry
        self.session = load_session(Path(folder) / entry["path"])
        self.layers = int(entry["layers"])
        self.kv_heads = int(entry["kv_heads"])
        self.head_dim = int(entry["head_dim"])
        self.max_positions = int(entry["max_positions"])
        self.input_size = int(entry["input_size"])
        self.hidden_size = int(entry["hidden_size"])
        self.heads = list(entry.get("heads", []))
        self.head_input = (entry.get("head_select") or {}).get("input")
        self.block = int(entry.get("cache_block", 256))
        # every position's hidden: its output's shape follows each run's length, so outputs are
        # bound afresh per run (a kept binding holds the previous run's allocation)
        self.all_positions = bool(entry.get("all_positions"))

    def new_cache(self, capacity: int | None = None) -> LMCache:
        cap = min(self.max_positions, capacity or self.block)
        shape = (1, self.kv_heads, cap, self.head_dim)
        return LMCache([np.zeros(shape, np.float32) for _ in range(self.layers)],
                       [np.zeros(shape, np.float32) for _ in range(self.layers)])

    def ensure(self, cache: LMCache, positions: int, rows: int = 1) -> None:
        """Grow the buffers (by whole blocks, keeping what they hold) to fit ``positions`` more;
        a cache that holds nothing yet takes ``rows``, the batch of its first run."""
        if rows != cache.keys[0].shape[0]:
            if cache.offset:
                raise GenerationError(f"this cache holds {cache.keys[0].shape[0]} row(s), not {rows}")
            cache.binding, cache.bound_outputs, cache.ort_values = None, (), []
            for buf in (cache.keys, cache.values):
                buf[:] = [np.zeros((rows, *b.shape[1:]), np.float32) for b in buf]
        need = cache.offset + positions
        if need > self.max_positions:
            raise GenerationError(f"the ONNX code decoder holds {self.max_positions} positions but the prompt + "
                                  f"frames need {need}; shorten the text chunk")
        if need <= cache.capacity:
            return
        cap = min(self.max_positions, -(-need // self.block) * self.block * 2)
        cache.binding, cache.bound_outputs, cache.ort_values = None, (), []    # the old buffers
        for buf in (cache.keys, cache.values):
            for i, old in enumerate(buf):
                new = np.zeros((old.shape[0], self.kv_heads, cap, self.head_dim), np.float32)
                new[:, :, :cache.offset] = old[:, :, :cache.offset]
                buf[i] = new

    def run(self, embeds: np.ndarray, cache: LMCache, outputs: tuple[str, ...],
            head: int | None = None, inputs: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """Feed ``embeds [B, S, input_size]`` at the cache's offset; the named outputs
        (``hidden`` and/or head logits of the last position, ``[B, ...]``). ``head``: which head
        ``logits`` is, for a graph whose heads are chosen by an input; ``inputs``: the graph's
        own further inputs by name (a family's tail, e.g. Pocket TTS's flow noise). Rows of one batch cost
        little more than one on CPU (the weights are read once): CFG's two T3 rows in one run
        took 0.47-0.65x the time of two runs (README, "CPU backend")."""
        x = np.ascontiguousarray(embeds, np.float32)
        s = x.shape[1]
        self.ensure(cache, s, x.shape[0])
        total = cache.offset + s
        bind = cache.binding or self.session.io_binding()
        bind.bind_cpu_input("inputs_embeds", x)
        bind.bind_cpu_input("seqlens_k", np.full(x.shape[0], total - 1, np.int32))
        bind.bind_cpu_input("total_sequence_length", np.array(total, np.int32))
        if self.head_input:
            bind.bind_cpu_input(self.head_input, np.array(head or 0, np.int64))
        for name, value in (inputs or {}).items():
            bind.bind_cpu_input(name, np.ascontiguousarray(value))
        if cache.binding is None or cache.bound_outputs != outputs or self.all_positions:
            self._bind_cache(bind, cache, outputs)
        self.session.run_with_iobinding(bind)
        cache.offset = total
        got = bind.get_outputs()   # OrtValues: the K/V buffers are not copied back
        return [got[j].numpy() for j in range(len(outputs))]

    def _bind_cache(self, bind, cache: LMCache, outputs: tuple[str, ...]) -> None:
        import onnxruntime as ort

        if not cache.ort_values:
            cache.ort_values = [(f"{kind}.{i}", ort.OrtValue.ortvalue_from_numpy(buf)) for i in range(self.layers)
                                for kind, buf in (("key", cache.keys[i]), ("value", cache.values[i]))]
        bind.clear_binding_outputs()
        for name in outputs:  # bound first, so they come back first
            bind.bind_output(name, "cpu")
        for name, v in cache.ort_values:
            # the same memory as past and present: the attention writes the new positions in place
            bind.bind_ortvalue_input("past_" + name, v)
            bind.bind_ortvalue_output("present_" + name, v)
        cache.binding, cache.bound_outputs = bind, tuple(outputs)
