"""Piper voices other than the embedded one, built from it: the same VITS graph under another
name, language, rate or speaker count, so that ttscli's handling of "any voice" is tested
without downloading any.

A multi-speaker voice needs a graph with a ``sid`` input. :func:`multi_speaker_graph` adds one
to the embedded graph the way VITS conditions its decoder on a speaker: a speaker embedding
table, the row for ``sid`` added to the decoder's first convolution (``dec.cond(g)`` in VITS).
The speakers' rows are random, so each speaker's audio differs.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np


def embedded() -> tuple[Path, dict]:
    from ttscli.models.piper import default_voice_dir

    onnx = default_voice_dir() / "en_US-joe-medium.onnx"
    return onnx, json.loads(onnx.with_name(onnx.name + ".json").read_text(encoding="utf-8"))


def write_voice(folder: Path, name: str, *, espeak: str, code: str, sample_rate: int | None = None,
                speakers: list[str] | None = None, graph: Path | None = None) -> Path:
    """``folder/name.onnx`` + ``.onnx.json``: the embedded voice's graph (or ``graph``) with its
    config changed to ``espeak``/``code``, ``sample_rate`` and ``speakers``."""
    source, config = embedded()
    folder.mkdir(parents=True, exist_ok=True)
    onnx = folder / f"{name}.onnx"
    shutil.copyfile(graph or source, onnx)
    family, _, region = code.partition("_")
    config = {**config, "espeak": {"voice": espeak}, "dataset": name.split("-")[1],
              "language": {"code": code, "family": family, "region": region, "name_english": family.upper(),
                           "country_english": region}}
    if sample_rate is not None:
        config["audio"] = {**config["audio"], "sample_rate": sample_rate}
    if speakers:
        config["num_speakers"] = len(speakers)
        config["speaker_id_map"] = {s: i for i, s in enumerate(speakers)}
    onnx.with_name(onnx.name + ".json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return onnx


def multi_speaker_graph(dst: Path, speakers: int, seed: int = 0) -> Path:
    """The embedded graph with a ``sid`` input (int64 ``[1]``) conditioning its decoder."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    source, _ = embedded()
    model = onnx.load(str(source))
    g = model.graph
    # the exporter named the phoneme embedding table "sid"; the input takes that name here
    for t in g.initializer:
        if t.name == "sid":
            t.name = "test_phoneme_emb"
    for node in g.node:
        node.input[:] = ["test_phoneme_emb" if i == "sid" else i for i in node.input]
    conv = next(n for n in g.node if n.name == "/dec/conv_pre/Conv")
    channels = next(numpy_helper.to_array(t).shape[0] for t in g.initializer if t.name == "dec.conv_pre.bias")
    table = np.random.default_rng(seed).normal(0, 0.5, (speakers, channels)).astype(np.float32)
    g.initializer.extend([numpy_helper.from_array(table, "test_speaker_emb"),
                          numpy_helper.from_array(np.array([2], np.int64), "test_speaker_axis")])
    g.input.append(helper.make_tensor_value_info("sid", TensorProto.INT64, [1]))
    pre = conv.output[0]
    conv.output[0] = pre + "/no_speaker"
    at = list(g.node).index(conv) + 1
    for i, node in enumerate([
        helper.make_node("Gather", ["test_speaker_emb", "sid"], ["/test_speaker/emb"], name="/test_speaker/Gather"),
        helper.make_node("Unsqueeze", ["/test_speaker/emb", "test_speaker_axis"], ["/test_speaker/g"],
                         name="/test_speaker/Unsqueeze"),
        helper.make_node("Add", [pre + "/no_speaker", "/test_speaker/g"], [pre], name="/test_speaker/Add"),
    ]):
        g.node.insert(at + i, node)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return dst
