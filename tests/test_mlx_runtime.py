"""Issue 16, item 5: MLX's backend is an extra on Linux ([cpu], [cuda], [cuda13]), exactly one at a time.

The wheels behind those extras ship the same ``mlx/lib/libmlx.so``, so the base dependency on Linux
is the bindings alone. These tests check the declared dependencies, and run the installed `ttscli`
with ``import mlx.core`` failing as it does without a backend wheel (the same ImportError text): the
embedded voice still speaks on onnxruntime, and an MLX model says in one line what to install.
"""
import os
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from clitools import only_line

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = {"mlx-cpu", "mlx-cuda-12", "mlx-cuda-13"}
NO_BACKEND = '''
import sys
class _NoBackend:
    def find_spec(self, name, path=None, target=None):
        if name == "mlx.core":  # the text `import mlx.core` raises when only the mlx wheel is installed
            raise ImportError("libmlx.so: cannot open shared object file: No such file or directory")
sys.meta_path.insert(0, _NoBackend())
'''


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _linux_mlx(reqs: list[str]) -> list[Requirement]:
    out = []
    for text in reqs:
        r = Requirement(text)
        if r.name == "mlx" and (r.marker is None or r.marker.evaluate({"sys_platform": "linux", "extra": ""})):
            out.append(r)
    return out


# what each mlx extra pulls in mlx's own metadata (0.32.4): the extra's name is the backend wheel's
MLX_EXTRA_WHEEL = {"cpu": "mlx-cpu", "cuda": "mlx-cuda-12", "cuda12": "mlx-cuda-12", "cuda13": "mlx-cuda-13"}


def test_linux_base_pulls_no_backend_and_each_extra_exactly_one():
    project = _project()
    base = _linux_mlx(project["dependencies"])
    assert base and all(not r.extras for r in base), "the Linux base must be mlx alone (no backend extra)"
    extras = project["optional-dependencies"]
    for name, wheel in (("cpu", "mlx-cpu"), ("cuda", "mlx-cuda-12"), ("cuda13", "mlx-cuda-13")):
        pulled = {MLX_EXTRA_WHEEL[x] for r in _linux_mlx(extras[name]) for x in r.extras}
        assert pulled == {wheel}, f"ttscli[{name}] pulls {pulled or 'no backend'}"
    # make install/test (the test extra) takes the CPU backend and never a second one
    assert "ttscli[cpu]" in extras["test"]
    assert not any("cuda" in r for r in extras["test"])


@pytest.fixture
def no_backend(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_BACKEND, encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def test_embedded_voice_speaks_without_an_mlx_backend(run_cli, tmp_path, no_backend):
    p = run_cli("speak", "Hello without MLX.", "-o", "a.wav", "--backend", "vits=onnx", env=no_backend)
    assert p.returncode == 0, p.err
    import soundfile as sf

    audio, sr = sf.read(tmp_path / "a.wav")
    assert sr == 22050 and len(audio) > sr // 4


@pytest.mark.parametrize("args", [
    ["speak", "Hi.", "-m", "qwen3-tts-0.6b-base", "--model-dir", str(ROOT / "tests/fixtures/parity/qwen3-tiny-base"),
     "-o", "q.wav"],
    ["speak", "Hi.", "-o", "p.wav", "--backend", "vits=mlx"],
    ["bench", "piper-joe", "-n", "1", "--quiet", "--backend", "vits=mlx"],
])
def test_mlx_model_without_a_backend_names_the_extra(run_cli, tmp_path, no_backend, args):
    p = run_cli(*args, env=no_backend)
    line = only_line(p.err)
    assert p.returncode == 1, line
    assert "internal error" not in line
    assert "pip install 'ttscli[cpu]'" in line and "'ttscli[cuda]'" in line and "libmlx.so" in line
    assert not any(tmp_path.glob("*.wav")) and not any(tmp_path.glob(".*.part"))


def test_two_backend_wheels_are_named(monkeypatch):
    from ttscli import mlx_runtime

    monkeypatch.setattr(mlx_runtime, "installed_backends", lambda: ["mlx-cpu 0.32.4", "mlx-cuda-12 0.32.4"])
    monkeypatch.setattr(mlx_runtime.sys, "platform", "linux")
    err = mlx_runtime.unavailable(ImportError("libmlx.so: undefined symbol"))
    assert "mlx-cpu 0.32.4, mlx-cuda-12 0.32.4" in str(err) and "uninstall them all" in str(err)
    assert mlx_runtime.is_missing_backend(ImportError("libmlx.so: cannot open shared object file"))
    assert not mlx_runtime.is_missing_backend(ImportError("No module named 'misaki'", name="misaki"))
