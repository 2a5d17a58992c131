"""A tiny Fun-CosyVoice3 checkpoint and its goldens, computed by the upstream CosyVoice code.

Upstream is not a PyPI package: fetch it first (scripts/goldens/cosyvoice_fetch.sh), then, from
the repository root, with the reference venv (scripts/goldens/README.md; it holds upstream's
pinned transformers 4.51.3 in a side folder, which this script puts first):

    COSYVOICE_SRC=../refsrc/CosyVoice REFVENV/bin/python scripts/goldens/cosyvoice3_upstream.py

Writes tests/fixtures/cosyvoice3/:

- ``tiny/``: the published Fun-CosyVoice3-0.5B layout at tiny sizes: ``cosyvoice3.yaml``
  (upstream's own yaml, only sizes changed: LM width 64, DiT width 64 x 2 blocks, HiFT 32 base
  channels, a 64-token speech codebook) read by upstream's hyperpyyaml, and ``llm.pt``,
  ``flow.pt``, ``hift.pt``: ``state_dict()``s of the modules that yaml builds (upstream's
  ``CosyVoice3LM`` around transformers' ``Qwen2ForCausalLM``, ``CausalMaskedDiffWithDiT``,
  ``CausalHiFTGenerator``), saved by ``torch.save`` as upstream's checkpoints are, every tensor
  re-initialised deterministically at a scale that keeps activations lively.
  ``CosyVoice-BlankEN/config.json`` is the Qwen2 config the LM was built from, and
  ``vocab.json`` / ``merges.txt`` / ``tokenizer_config.json`` a byte-level BPE without merges in
  Qwen's layout (ids inside the tiny LM's 300-row embedding). ``campplus.onnx`` and
  ``speech_tokenizer_v3.onnx`` have upstream's interfaces but tiny stand-in networks (not CAM++
  nor the v3 tokenizer), so the clone path runs end to end; they produce no goldens.
  ``spk2info.pt``: one stored speaker in upstream's layout (random prompt values), the default voice.
- ``goldens.npz``: the LM prompt (``lm_text`` ids, ``lm_prompt_speech``), its prefill hidden
  states (``lm_hidden``, upstream ``Qwen2Encoder.forward_one_step``) and last log-probs
  (``lm_logp``), 20 greedy tokens from upstream ``inference_wrapper`` (``lm_greedy``); the flow
  inputs (``flow_tokens``, ``flow_prompt_tokens``, ``flow_prompt_feat``, ``flow_embedding``), the
  fixed noise the CFM reads (``flow_noise``, upstream's ``rand_noise`` slice), the one-shot mel
  (``flow_mel``, streaming=False) and the chunk-masked one (``flow_mel_stream``, streaming=True),
  both finalize=True, and the first chunk as upstream's streaming path makes it
  (``flow_mel_chunk``, finalize=False over the first ``flow_chunk_tokens`` tokens); the HiFT
  input ``hift_mel``, its ``hift_f0``, source ``hift_source`` and waveform ``hift_wav``, and the
  fixed draws the causal source reads (``hift_rand_ini`` [9], ``hift_sine_noise`` [L, 9]).
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "cosyvoice3"
SRC = Path(os.environ.get("COSYVOICE_SRC", ROOT.parent / "refsrc" / "CosyVoice"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(SRC))
# upstream's pinned transformers (scripts/reference-venv.sh says why)
sys.path.insert(0, str(Path(sys.prefix) / "cosyvoice-transformers"))
import reference_stubs

reference_stubs.install_matcha_utils()
import torch
from hyperpyyaml import load_hyperpyyaml

SPEECH_TOKENS = 64
QWEN = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "vocab_size": 300, "tie_word_embeddings": True,
        "hidden_act": "silu", "torch_dtype": "float32", "use_sliding_window": False}

# (pattern, replacement) on upstream's example yaml: sizes only
TINY = [
    (r"llm_input_size: 896", "llm_input_size: 64"),
    (r"llm_output_size: 896", "llm_output_size: 64"),
    (r"speech_token_size: 6561", f"speech_token_size: {SPEECH_TOKENS}"),
    (r"vocab_size: 6561", f"vocab_size: {SPEECH_TOKENS}"),
    (r"channels: 1024\n", "channels: 64\n"),
    (r"dim: 1024\n", "dim: 64\n"),
    (r"depth: 22", "depth: 2"),
    (r"heads: 16", "heads: 4"),
    (r"dim_head: 64", "dim_head: 16"),
    (r"base_channels: 512", "base_channels: 32"),
    (r"cond_channels: 512", "cond_channels: 32"),
]


class TinyQwen(torch.nn.Module):
    """Stands in for ``Qwen2Encoder.__init__``'s ``from_pretrained`` (no pretrained folder): the
    same ``.model`` attribute, a ``Qwen2ForCausalLM`` built from :data:`QWEN`; forward and
    ``forward_one_step`` are upstream's own, bound below."""

    def __init__(self):
        super().__init__()
        from transformers import Qwen2Config, Qwen2ForCausalLM
        self.model = Qwen2ForCausalLM(Qwen2Config(**QWEN))


def tiny_yaml() -> str:
    text = (SRC / "examples/libritts/cosyvoice3/conf/cosyvoice3.yaml").read_text()
    for pat, rep in TINY:
        text, n = re.subn(pat, rep, text)
        assert n >= 1, pat
    return text


def build():
    """The three modules from the tiny yaml, by upstream's hyperpyyaml."""
    from cosyvoice.llm.llm import Qwen2Encoder
    TinyQwen.forward = Qwen2Encoder.forward
    TinyQwen.forward_one_step = Qwen2Encoder.forward_one_step
    # the model sections only: the rest names training tools (datasets, discriminators)
    encoder = "!new:cosyvoice.llm.llm.Qwen2Encoder\n        pretrain_path: !ref <qwen_pretrain_path>"
    text = tiny_yaml().split("# gan related module")[0].replace(encoder, "!new:__main__.TinyQwen")
    configs = load_hyperpyyaml(text)
    return configs["llm"].eval(), configs["flow"].eval(), configs["hift"].eval()


def tiny_tokenizer(folder: Path) -> None:
    """A byte-level BPE in Qwen2's file layout with no merges: the 256 byte symbols, then
    <|endoftext|>, <|im_start|>, <|im_end|> as Qwen's tokenizer_config.json adds them; the
    CosyVoice3 specials follow at load time, as upstream's tokenizer adds them."""
    # GPT-2's byte -> printable-character table, which Qwen's byte-level BPE uses
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): b for b, c in sorted(zip(bs, cs))}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    added = {str(256 + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                            "single_word": False, "special": True} for i, t in enumerate(specials)}
    (folder / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added,
                                                              "tokenizer_class": "Qwen2Tokenizer"}, indent=1))


def tiny_onnx_encoders(folder: Path, gen: torch.Generator) -> None:
    """``campplus.onnx`` and ``speech_tokenizer_v3.onnx`` with upstream's interfaces (as its front
    end calls them: fbank ``[1, T, 80]`` -> x-vector ``[1, 192]``; 128-bin log-mel ``[1, 128, T]``
    and its length -> ``[1, T / 4]`` token ids) but tiny stand-in networks, not CAM++ or the v3
    tokenizer: they let the clone path run end to end; what they compute is not a golden."""

    class XVector(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(80, 192)

        def forward(self, feats):
            return self.proj(feats.mean(dim=1))

    class Tokens(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(128, 1)

        def forward(self, feats, feats_length):
            x = self.proj(feats[:, :, ::4].transpose(1, 2))[..., 0] * (feats_length[:, None] > 0)
            return (torch.sigmoid(x) * (SPEECH_TOKENS - 1)).floor().to(torch.int64)

    for m in (XVector, Tokens):
        reinit(m_ := m(), gen)
        if m is XVector:
            torch.onnx.export(m_, (torch.randn(1, 50, 80),), folder / "campplus.onnx", input_names=["input"],
                              output_names=["output"], dynamic_axes={"input": {1: "T"}}, dynamo=False)
        else:
            torch.onnx.export(m_, (torch.randn(1, 128, 200), torch.tensor([200], dtype=torch.int32)),
                              folder / "speech_tokenizer_v3.onnx", input_names=["feats", "feats_length"],
                              output_names=["indices"], dynamic_axes={"feats": {2: "T"}}, dynamo=False)


def tiny_speakers(folder: Path, gen: torch.Generator) -> None:
    """``spk2info.pt`` as upstream's ``add_zero_shot_spk`` + ``save_spkinfo`` write it (one speaker,
    ``frontend_zero_shot``'s tensors less the text), with random prompt values."""
    n = 12
    tokens = torch.randint(0, SPEECH_TOKENS, (1, n), generator=gen, dtype=torch.int32)
    text = torch.tensor([list(b"A reference.")], dtype=torch.int32)
    emb = torch.randn(1, 192, generator=gen)
    info = {"prompt_text": text, "prompt_text_len": torch.tensor([text.shape[1]], dtype=torch.int32),
            "llm_prompt_speech_token": tokens, "llm_prompt_speech_token_len": torch.tensor([n], dtype=torch.int32),
            "flow_prompt_speech_token": tokens, "flow_prompt_speech_token_len": torch.tensor([n], dtype=torch.int32),
            "prompt_speech_feat": torch.randn(1, 2 * n, 80, generator=gen) - 4.0,
            "prompt_speech_feat_len": torch.tensor([2 * n], dtype=torch.int32),
            "llm_embedding": emb, "flow_embedding": emb}
    torch.save({"tiny_speaker": info}, folder / "spk2info.pt")


def reinit(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Fan-in-scaled normals for matrices, g of weight norm near 1, norms near 1, small biases."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name and name.endswith("weight") and p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("alpha"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith("original0"):
                p.copy_(0.8 + 0.4 * torch.rand(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p[0].numel()))


def lm_goldens(llm, gen) -> dict:
    with torch.no_grad():   # greedy tokens only from the codebook: stop rows never win
        llm.llm_decoder.weight[SPEECH_TOKENS:] = 0.0
    text = torch.randint(0, QWEN["vocab_size"], (1, 12), generator=gen)
    prompt_speech = torch.randint(0, SPEECH_TOKENS, (1, 8), generator=gen)
    # the prompt as upstream's CosyVoice3 inference concatenates it (sos, text, task id, speech)
    sos = llm.speech_embedding.weight[llm.sos].reshape(1, 1, -1)
    task = llm.speech_embedding.weight[llm.task_id].reshape(1, 1, -1)
    lm_input = torch.concat([sos, llm.llm.model.model.embed_tokens(text), task,
                             llm.speech_embedding(prompt_speech)], dim=1)
    n = lm_input.shape[1]
    with torch.inference_mode():
        hidden, _ = llm.llm.forward_one_step(lm_input, torch.tril(torch.ones(1, n, n)).bool())
        logp = llm.llm_decoder(hidden[:, -1]).log_softmax(dim=-1)
        llm.sampling = lambda scores, decoded, k: int(scores.argmax())
        greedy = list(llm.inference_wrapper(lm_input, 25, 0, 20, "golden"))
    assert len(greedy) == 20
    return {"lm_text": text[0].numpy(), "lm_prompt_speech": prompt_speech[0].numpy(),
            "lm_input": lm_input[0].detach().numpy(), "lm_hidden": hidden[0].numpy(),
            "lm_logp": logp[0].numpy(), "lm_greedy": np.array(greedy, dtype=np.int64)}


def flow_goldens(flow, gen) -> dict:
    n_prompt, n_tok, n_chunk = 10, 30, 15
    prompt_tokens = torch.randint(0, SPEECH_TOKENS, (1, n_prompt), generator=gen)
    tokens = torch.randint(0, SPEECH_TOKENS, (1, n_tok), generator=gen)
    prompt_feat = torch.randn(1, 2 * n_prompt, 80, generator=gen)
    embedding = torch.randn(1, 192, generator=gen)

    def run(tok, streaming, finalize):
        mel, _ = flow.inference(tok, torch.tensor([tok.shape[1]]), prompt_tokens, torch.tensor([n_prompt]),
                                prompt_feat, torch.tensor([2 * n_prompt]), embedding,
                                streaming=streaming, finalize=finalize)
        return mel[0].T.numpy()

    with torch.inference_mode():
        out = {"flow_mel": run(tokens, False, True), "flow_mel_stream": run(tokens, True, True),
               "flow_mel_chunk": run(tokens[:, :n_chunk], True, False)}
    noise = flow.decoder.rand_noise[0, :, : 2 * (n_prompt + n_tok)].T.numpy()
    return {**out, "flow_tokens": tokens[0].numpy(), "flow_prompt_tokens": prompt_tokens[0].numpy(),
            "flow_prompt_feat": prompt_feat[0].numpy(), "flow_embedding": embedding[0].numpy(),
            "flow_noise": noise, "flow_chunk_tokens": np.array(n_chunk)}


def hift_goldens(hift, gen) -> dict:
    mel = torch.randn(1, 80, 24, generator=gen) * 0.6 - 2.0
    with torch.inference_mode():
        wav, source = hift.inference(mel, finalize=True)
        f0 = hift.f0_predictor(mel.double(), finalize=True)
    n = source.shape[-1]
    sine = hift.m_source.l_sin_gen
    return {"hift_mel": mel[0].T.numpy(), "hift_f0": f0[0].float().numpy(), "hift_source": source[0, 0].numpy(),
            "hift_wav": wav[0].numpy(), "hift_rand_ini": sine.rand_ini[0].numpy(),
            "hift_sine_noise": sine.sine_waves[0, :n].numpy()}


def main() -> None:
    torch.manual_seed(0)
    llm, flow, hift = build()
    gen = torch.Generator().manual_seed(1234)
    for m in (llm, flow, hift):
        reinit(m, gen)
    with torch.no_grad():   # log-magnitudes near 0, so the waveform stays below the clip level
        hift.conv_post.parametrizations.weight.original0.mul_(0.05)
    tiny = OUT / "tiny"
    (tiny / "CosyVoice-BlankEN").mkdir(parents=True, exist_ok=True)
    goldens = {**lm_goldens(llm, gen), **flow_goldens(flow, gen), **hift_goldens(hift, gen)}
    (tiny / "cosyvoice3.yaml").write_text(tiny_yaml())
    (tiny / "CosyVoice-BlankEN" / "config.json").write_text(json.dumps(QWEN, indent=1) + "\n")
    tiny_tokenizer(tiny / "CosyVoice-BlankEN")
    tiny_onnx_encoders(tiny, gen)
    tiny_speakers(tiny, gen)
    for name, module in (("llm", llm), ("flow", flow), ("hift", hift)):
        torch.save({k: v.contiguous() for k, v in module.state_dict().items()}, tiny / f"{name}.pt")
    np.savez_compressed(OUT / "goldens.npz", **{k: np.asarray(v) for k, v in goldens.items()})
    for k, v in goldens.items():
        print(f"{k:20s} {np.asarray(v).shape}")


if __name__ == "__main__":
    main()
