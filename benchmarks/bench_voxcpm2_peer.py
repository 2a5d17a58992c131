"""Upstream VoxCPM2 (voxcpm 2.0.3, PyTorch) timed as `ttscli bench voxcpm2 --peer voxcpm` times
ours: run by ttscli.models.voxcpm2.bench with the python of an environment holding voxcpm and
torch ($TTSCLI_VOXCPM_PYTHON); reads {"text", "repeats", "patches", "threads"} as JSON on stdin
and prints one JSON line of figures.

The model is upstream's VoxCPM2Model built from the released dimensions
(ttscli/models/voxcpm2/release_config.json, the file ttscli's --random-weights builds ours from)
with random weights and nothing downloaded, in upstream's config dtype (bfloat16; its AudioVAE
float32). Its tokenizer is replaced by UTF-8 bytes, as ttscli's random-weights run reads text, so
both prompts have the same length; its stop is disabled (``min_len``) and its patch budget set to
``patches``, so both sides generate the same number of patches. It runs
``generate_with_prompt_cache_streaming`` (one VAE chunk per patch), so first audio is what a
streaming user waits for; total time covers all patches and their decoding.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RELEASE_CONFIG = ROOT / "ttscli" / "models" / "voxcpm2" / "release_config.json"
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs  # noqa: E402

reference_stubs.install()

import torch  # noqa: E402


class ByteTokenizer:
    """UTF-8 bytes as tokens, each spelt as the character of its value (the interface upstream's
    CJK wrapper calls: string tokens, then their ids)."""

    vocab: dict[str, int] = {}

    def tokenize(self, text: str, **kwargs) -> list[str]:
        return [chr(b) for b in text.encode()]

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [ord(t) for t in tokens]


def build():
    from voxcpm.model.voxcpm2 import VoxCPM2Model, VoxCPMConfig
    from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2

    cfg = json.loads(RELEASE_CONFIG.read_text())
    cfg["dit_config"]["cfm_config"] = {"sigma_min": 1e-6, "solver": "euler", "t_scheduler": "log-norm",
                                       "inference_cfg_rate": 2.0}
    cfg.update(device="cpu", dtype="bfloat16")
    conf = VoxCPMConfig.model_validate(cfg)
    vae = AudioVAEV2(config=AudioVAEConfigV2(**cfg["audio_vae_config"]))
    model = VoxCPM2Model(conf, ByteTokenizer(), vae, device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, p[0].numel() ** -0.5)
    model = model.to(torch.bfloat16)
    model.audio_vae = model.audio_vae.to(torch.float32)
    return model.eval()


def run(model, text: str, patches: int) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    first, n, gaps = None, 0, []
    last = t0
    for wav, _, _ in model.generate_with_prompt_cache_streaming(
            target_text=text, prompt_cache=None, min_len=patches, max_len=patches, inference_timesteps=10,
            cfg_value=2.0):
        now = time.perf_counter()
        if first is None:
            first = now - t0
        else:
            gaps.append(now - last)      # one patch: both LMs, the diffusion head, its VAE chunk
        last = now
        n += wav.shape[-1]
    total = time.perf_counter() - t0
    return {"total_s": total, "cpu_s": time.process_time() - c0, "first_audio_s": first,
            "audio_s": n / model.sample_rate, "frames": len(gaps) + 1,
            "frame_ms_p50": 1e3 * statistics.median(gaps) if gaps else None}


def main() -> None:
    args = json.loads(sys.stdin.read())
    import logging

    logging.disable(logging.WARNING)
    if args.get("threads"):
        torch.set_num_threads(int(args["threads"]))
    model = build()
    with torch.inference_mode():
        run(model, args["text"], args["patches"])                          # warm-up
        runs = [run(model, args["text"], args["patches"]) for _ in range(max(1, args["repeats"]))]
    med = {k: float(statistics.median(r[k] for r in runs)) for k in runs[0] if runs[0][k] is not None}
    med["rtf"] = med["total_s"] / med["audio_s"]
    med["torch_threads"] = torch.get_num_threads()
    print(json.dumps(med))


if __name__ == "__main__":
    main()
