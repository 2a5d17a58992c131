"""The iSTFTNet generator's fast path computes the plain definition: the fused AdaIN + Snake
(statistics shared by the blocks that read one input) is AdaIN1d followed by Snake in upstream's
stage loop. Fidelity against upstream itself is test_kokoro_parity.py's (real weights)."""
import numpy as np
import pytest

# ttscli before mlx: importing it loads a fast BLAS
from ttscli.models.kokoro.config import ISTFTNetArgs
from ttscli.models.kokoro.istftnet import Generator, adain_snake
from ttscli.models.kokoro.modules import AdaIN1d, leaky_relu
from ttscli.nn.spectral import snake

mx = pytest.importorskip("mlx.core")


def _randomize(module, seed):
    from mlx.utils import tree_flatten

    rng = np.random.default_rng(seed)
    weights = []
    for name, p in tree_flatten(module.parameters()):
        w = rng.standard_normal(p.shape) / np.sqrt(max(int(np.prod(p.shape[1:])), 1))
        if "alpha" in name:
            w = 1.0 + 0.3 * np.abs(w)
        weights.append((name, mx.array(w.astype(np.float32))))
    module.load_weights(weights, strict=True)
    return module


def test_adain_snake_is_adain_then_snake():
    rng = np.random.default_rng(0)
    norm = _randomize(AdaIN1d(16, 24), 1)
    x = mx.array((3.0 + 2.0 * rng.standard_normal((300, 24))).astype(np.float32))
    s = mx.array(rng.standard_normal(16).astype(np.float32))
    alpha = mx.array((0.5 + rng.random(24)).astype(np.float32))
    want = np.array(snake(norm(x, s), alpha))
    np.testing.assert_allclose(np.array(adain_snake(norm, x, s, alpha)), want, rtol=1e-5, atol=1e-5)


def _upstream_loop(g, x, s, feats):
    """Upstream's stage loop as written, with AdaIN1d and Snake as separate steps."""
    last = len(g.ups) - 1
    for i, (up, nconv, nres) in enumerate(zip(g.ups, g.noise_convs, g.noise_res)):
        x = leaky_relu(x, 0.1)
        src = nres(nconv(feats), s)
        x = up(x)
        if i == last:
            x = mx.concatenate([x[1:2], x], axis=0)
        x = x + src
        blocks = g.resblocks[i * g.num_kernels:(i + 1) * g.num_kernels]
        xs = None
        for b in blocks:
            y = x
            for c1, c2, n1, n2, a1, a2 in zip(b.convs1, b.convs2, b.adain1, b.adain2, b.alpha1, b.alpha2):
                t = c1(snake(n1(y, s), a1[0, :, 0]))
                y = c2(snake(n2(t, s), a2[0, :, 0]), residual=y)
            xs = y if xs is None else xs + y
        x = xs / g.num_kernels
    x = g.conv_post(leaky_relu(x, 0.01))
    return x


def test_generator_is_the_stage_loop():
    a = ISTFTNetArgs(upsample_initial_channel=32)
    g = _randomize(Generator(16, a), 2)
    rng = np.random.default_rng(3)
    frames = 14
    x = mx.array(rng.standard_normal((frames, 32)).astype(np.float32))
    s = mx.array(rng.standard_normal(16).astype(np.float32))
    feats = mx.array(rng.standard_normal((frames * 60 + 1, 22)).astype(np.float32))
    taps = {}
    g(x, s, feats, taps)
    np.testing.assert_allclose(np.array(taps["conv_post"]), np.array(_upstream_loop(g, x, s, feats)),
                               rtol=1e-4, atol=1e-5)
