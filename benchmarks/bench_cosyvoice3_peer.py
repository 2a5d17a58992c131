"""Upstream CosyVoice3 (PyTorch) as ``ttscli bench cosyvoice3 --random-weights --peer pytorch`` runs
it: ttscli calls this script with the Python of an environment that has torch and upstream's
dependencies (scripts/reference-venv.sh), and the upstream checkout (scripts/goldens/
cosyvoice_fetch.sh) in ``src``.

Reads ``{"text", "repeats", "frames", "threads", "src"}`` as JSON on stdin, prints the median
figures as one JSON line. The modules come from upstream's own cosyvoice3.yaml (the published
Fun-CosyVoice3-0.5B sizes; the Qwen2 LM built from Qwen2.5-0.5B's config instead of read from a
pretrained folder) with PyTorch's default random initialisation, float32 on the CPU. One
run is upstream's non-streamed ``tts``: the LM's prefill and ``frames`` speech tokens (its stop
ids masked, as ttscli's random-weights run ignores end of speech), then the flow over them and
HiFT over the mel. The prompt is what ttscli's random-weights run sends: the text's UTF-8 bytes
after "You are a helpful assistant.<|endofprompt|>" (cross-lingual mode), a 50-token reference.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

QWEN2_05B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
             "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
             "rope_theta": 1000000.0, "vocab_size": 151936, "tie_word_embeddings": True, "hidden_act": "silu"}
PROMPT_TOKENS = 50


def build(src: Path):
    import torch
    from hyperpyyaml import load_hyperpyyaml
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from cosyvoice.llm.llm import Qwen2Encoder

    class RandomQwen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Qwen2ForCausalLM(Qwen2Config(**QWEN2_05B))

    RandomQwen.forward = Qwen2Encoder.forward
    RandomQwen.forward_one_step = Qwen2Encoder.forward_one_step
    sys.modules["__main__"].RandomQwen = RandomQwen
    text = (src / "examples/libritts/cosyvoice3/conf/cosyvoice3.yaml").read_text().split("# gan related module")[0]
    text = text.replace("!new:cosyvoice.llm.llm.Qwen2Encoder\n        pretrain_path: !ref <qwen_pretrain_path>",
                        "!new:__main__.RandomQwen")
    configs = load_hyperpyyaml(text)
    return configs["llm"].eval(), configs["flow"].eval(), configs["hift"].eval()


def run(llm, flow, hift, text_ids, frames: int) -> dict:
    import torch

    n = llm.speech_token_size
    base = llm.sampling

    def no_stop(scores, decoded, k):
        scores[n:] = -float("inf")
        return base(scores, decoded, k)

    llm.sampling = no_stop
    gen = torch.Generator().manual_seed(0)
    prompt_tok = torch.randint(0, n, (1, PROMPT_TOKENS), generator=gen)
    prompt_feat = torch.randn(1, 2 * PROMPT_TOKENS, 80, generator=gen)
    emb = torch.randn(1, 192, generator=gen)
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        text = torch.tensor([text_ids])
        sos = llm.speech_embedding.weight[llm.sos].reshape(1, 1, -1)
        task = llm.speech_embedding.weight[llm.task_id].reshape(1, 1, -1)
        lm_input = torch.concat([sos, llm.llm.model.model.embed_tokens(text), task], dim=1)
        tokens, stamps = [], []
        for tok in llm.inference_wrapper(lm_input, 25, 0, frames, "bench"):
            tokens.append(tok)
            stamps.append(time.perf_counter())
        t_lm = time.perf_counter()
        mel, _ = flow.inference(torch.tensor([tokens]), torch.tensor([len(tokens)]), prompt_tok,
                                torch.tensor([PROMPT_TOKENS]), prompt_feat, torch.tensor([2 * PROMPT_TOKENS]), emb,
                                streaming=False, finalize=True)
        t_flow = time.perf_counter()
        wav, _ = hift.inference(mel, finalize=True)
    t_end = time.perf_counter()
    steps = [b - a for a, b in zip(stamps, stamps[1:])]
    audio_s = wav.shape[1] / 24000
    return {"total_s": t_end - t0, "cpu_s": time.process_time() - c0, "first_audio_s": t_end - t0,
            "audio_s": audio_s, "frames": len(tokens), "prefill_ms": (stamps[0] - t0) * 1e3,
            "lm_prefill_s": stamps[0] - t0, "lm_tokens_per_s": len(steps) / sum(steps),
            "flow_s": t_flow - t_lm, "hift_s": t_end - t_flow,
            "token2wav_s_per_audio_s": (t_end - t_lm) / audio_s}


def main() -> None:
    args = json.loads(sys.stdin.read())
    src = Path(args["src"])
    sys.path.insert(0, str(src))
    sys.path.insert(0, str(Path(sys.prefix) / "cosyvoice-transformers"))   # upstream's pinned transformers
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import reference_stubs

    reference_stubs.install_matcha_utils()
    import torch

    if args.get("threads"):
        torch.set_num_threads(int(args["threads"]))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    llm, flow, hift = build(src)
    load_s = time.perf_counter() - t0
    ids = list(("You are a helpful assistant.").encode()) + [151646] + list(args["text"].encode())
    run(llm, flow, hift, ids, 4)                      # warm-up
    runs = [run(llm, flow, hift, ids, int(args["frames"])) for _ in range(int(args["repeats"]))]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    med["load_s"] = load_s
    med["rtf"] = med["total_s"] / med["audio_s"]
    print(json.dumps(med))


if __name__ == "__main__":
    main()
