"""Run a coremltools MIL program with numpy, op by op, so the Core ML graphs can be checked
numerically on Linux (where the Core ML runtime does not exist).

It executes the program exactly as coremltools left it after its optimisation passes (the one
that is serialised into the .mlpackage: fused ops, fp16 casts, int8 constexpr weights), with the
op semantics of the MIL spec. ``fp16=True`` rounds every fp16-typed result to fp16 (values kept
as float32 for the arithmetic, like a GPU accumulating in fp32); ``fp16=False`` computes
everything in float32, which isolates graph-construction errors from precision loss.
Unknown ops raise, so a test fails rather than silently skipping part of a graph.
"""
from __future__ import annotations

import numpy as np

from coremltools.converters.mil.mil import types


class MILInterpreter:
    def __init__(self, program, fp16: bool = True, function: str = "main"):
        self.fn = program.functions[function]
        self.fp16 = fp16
        self.states: dict[str, np.ndarray] = {}
        for name, var in self.fn.inputs.items():
            if types.is_state(var.sym_type):
                shape = var.sym_type.wrapped_type().get_shape()
                self.states[name] = np.zeros(shape, np.float32)

    # -- helpers ---------------------------------------------------------------------------
    def _val(self, env, v):
        if v is None:
            return None
        if isinstance(v, (list, tuple)):
            return [self._val(env, x) for x in v]
        if v.name in env:
            return env[v.name]
        if v.val is not None:
            return np.asarray(v.val)
        raise KeyError(f"MIL var {v.name} has no value")

    def _round(self, var, value):
        value = np.asarray(value)
        t = var.sym_type
        prim = t.get_primitive() if types.is_tensor(t) else t
        if prim == types.fp16:
            value = value.astype(np.float32)
            return value.astype(np.float16).astype(np.float32) if self.fp16 else value
        if prim == types.fp32:
            return value.astype(np.float32)
        if prim in (types.int32, types.int16, types.int8, types.uint8):
            return value.astype(np.int32)
        if prim == types.bool:
            return value.astype(bool)
        return value

    # -- run -------------------------------------------------------------------------------
    def read_state(self, name: str) -> np.ndarray:
        """A state's value, as Core ML's ``MLState.read_state`` gives it."""
        return self.states[name].copy()

    def write_state(self, name: str, value: np.ndarray) -> None:
        """Set a state, as Core ML's ``MLState.write_state`` does (same shape)."""
        if np.shape(value) != self.states[name].shape:
            raise ValueError(f"state {name}: shape {np.shape(value)}, expected {self.states[name].shape}")
        self.states[name] = np.asarray(value, np.float32).copy()

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, np.ndarray] = {}
        for name, var in self.fn.inputs.items():
            if name in self.states:
                env[name] = name   # a state var evaluates to its own name
            else:
                env[name] = self._round(var, inputs[name])
        for op in self.fn.operations:
            out = self._op(op, env)
            outs = out if isinstance(out, tuple) else (out,)
            for var, value in zip(op.outputs, outs):
                env[var.name] = self._round(var, value)
        return {v.name: env[v.name] for v in self.fn.outputs}

    def _op(self, op, env):
        g = lambda name: self._val(env, getattr(op, name, None))  # noqa: E731
        t = op.op_type
        if t == "const":
            return np.asarray(op.outputs[0].val)
        if t == "read_state":
            return self.states[op.input.name].copy()
        if t == "coreml_update_state":
            self.states[op.state.name] = np.asarray(g("value"), np.float32).copy()
            return self.states[op.state.name]
        if t == "cast":
            return np.asarray(g("x"))   # rounding to the target dtype happens in _round
        binary = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide,
                  "maximum": np.maximum, "minimum": np.minimum, "less_equal": np.less_equal,
                  "greater_equal": np.greater_equal, "less": np.less, "greater": np.greater,
                  "equal": np.equal, "logical_or": np.logical_or, "logical_and": np.logical_and}
        if t in binary:
            return binary[t](g("x"), g("y"))
        unary = {"abs": np.abs, "rsqrt": lambda x: 1.0 / np.sqrt(x), "sin": np.sin, "cos": np.cos,
                 "exp": np.exp, "sqrt": np.sqrt, "silu": lambda x: x / (1.0 + np.exp(-x)),
                 "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "tanh": np.tanh}
        if t in unary:
            return unary[t](np.asarray(g("x"), np.float32))
        if t in ("reduce_max", "reduce_mean", "reduce_sum"):
            f = {"reduce_max": np.max, "reduce_mean": np.mean, "reduce_sum": np.sum}[t]
            axes = g("axes")
            axes = None if axes is None else tuple(int(a) for a in np.atleast_1d(axes))
            return f(g("x"), axis=axes, keepdims=bool(g("keep_dims")))
        if t == "select":
            return np.where(g("cond"), g("a"), g("b"))
        if t == "reshape":
            return np.reshape(g("x"), [int(s) for s in g("shape")])
        if t == "transpose":
            return np.transpose(g("x"), [int(p) for p in g("perm")])
        if t == "expand_dims":
            x = g("x")
            for a in sorted(int(a) for a in g("axes")):
                x = np.expand_dims(x, a)
            return x
        if t == "squeeze":
            axes = g("axes")
            return np.squeeze(g("x"), None if axes is None else tuple(int(a) for a in axes))
        if t == "concat":
            assert not g("interleave")
            return np.concatenate(g("values"), axis=int(g("axis")))
        if t == "stack":
            return np.stack(g("values"), axis=int(g("axis")))
        if t == "gather":
            assert int(g("batch_dims") or 0) == 0
            return np.take(g("x"), np.asarray(g("indices")).astype(np.int64), axis=int(g("axis")))
        if t == "slice_by_index":
            return g("x")[self._slices(op, env, g("x").shape)]
        if t == "slice_update":
            x = np.array(g("x"), copy=True)
            x[self._slices(op, env, x.shape)] = g("update")
            return x
        if t == "linear":
            y = np.asarray(g("x"), np.float32) @ np.asarray(g("weight"), np.float32).T
            b = g("bias")
            return y if b is None else y + b
        if t == "matmul":
            x, y = np.asarray(g("x"), np.float32), np.asarray(g("y"), np.float32)
            if g("transpose_x"):
                x = np.swapaxes(x, -1, -2)
            if g("transpose_y"):
                y = np.swapaxes(y, -1, -2)
            return x @ y
        if t == "softmax":
            x = np.asarray(g("x"), np.float32)
            ax = int(g("axis"))
            e = np.exp(x - x.max(axis=ax, keepdims=True))
            return e / e.sum(axis=ax, keepdims=True)
        if t == "clip":
            return np.clip(g("x"), g("alpha"), g("beta"))
        if t == "gelu":
            x = np.asarray(g("x"), np.float32)
            mode = str(g("mode") if g("mode") is not None else "EXACT")
            if mode != "TANH_APPROXIMATION":
                raise NotImplementedError(f"gelu mode {mode} ({op.name}) is not interpreted")
            return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
        if t == "constexpr_blockwise_shift_scale":
            data = np.asarray(g("data"), np.float32)
            scale = np.asarray(g("scale"), np.float32)
            off = g("offset")
            off = np.zeros_like(scale) if off is None else np.asarray(off, np.float32)
            rep = [d // s for d, s in zip(data.shape, scale.shape)]
            for ax, r in enumerate(rep):
                scale = np.repeat(scale, r, axis=ax)
                off = np.repeat(off, r, axis=ax)
            return scale * (data - off)
        raise NotImplementedError(f"MIL op {t} ({op.name}) is not interpreted")

    def _slices(self, op, env, shape):
        g = lambda name: self._val(env, getattr(op, name, None))  # noqa: E731
        rank = len(shape)
        begin = [int(b) for b in g("begin")]
        end = [int(e) for e in g("end")]
        stride = g("stride")
        stride = [1] * rank if stride is None else [int(s) for s in stride]
        bm = g("begin_mask")
        em = g("end_mask")
        sm = g("squeeze_mask")
        bm = [False] * rank if bm is None else list(bm)
        em = [False] * rank if em is None else list(em)
        sm = [False] * rank if sm is None else list(sm)
        out = []
        for i in range(rank):
            if sm[i]:
                out.append(begin[i])
                continue
            b = None if bm[i] else begin[i]
            e = None if em[i] else end[i]
            out.append(slice(b, e, stride[i]))
        return tuple(out)


def load_package_program(path):
    """The MIL program stored in a saved .mlpackage (its spec + weight file), as pymil."""
    from pathlib import Path

    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load

    path = Path(path)
    spec = ct.utils.load_spec(str(path))
    return load(spec, spec.specificationVersion,
                file_weights_dir=str(path / "Data" / "com.apple.CoreML" / "weights"))


class InterpretedModel:
    """Stands in for a loaded Core ML model: ``new_state()`` / ``predict(inputs, state=None)``,
    running the package's own MIL program with :class:`MILInterpreter`."""

    def __init__(self, path, fp16: bool = True):
        self.program = load_package_program(path)
        self.fp16 = fp16
        self._stateless = None

    def new_state(self) -> MILInterpreter:
        return MILInterpreter(self.program, fp16=self.fp16)

    def predict(self, inputs, state=None):
        if state is None:
            self._stateless = self._stateless or MILInterpreter(self.program, fp16=self.fp16)
            state = self._stateless
        return state.run(inputs)
