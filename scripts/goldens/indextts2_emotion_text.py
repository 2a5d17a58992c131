"""IndexTTS2's text-to-emotion classifier (upstream ``QwenEmotion``, ``indextts/infer_v2.py``) on a
tiny Qwen3 folder, with goldens from transformers and upstream's own parsing code.

Run from the repository root with the reference venv (no upstream download needed beyond
scripts/goldens/indextts2_fetch.sh):

    INDEXTTS_SRC=../refsrc/index-tts REFVENV/bin/python scripts/goldens/indextts2_emotion_text.py

Writes ``tests/fixtures/indextts2/tiny/qwen0.6bemo4-merge/``: a byte-level BPE (``vocab.json``,
``merges.txt``, ``tokenizer_config.json`` with Qwen's special tokens and a chat template laid out
as Qwen3's for a system and a user message, with ``enable_thinking``), a Qwen3 causal LM at width
32 (``config.json``, ``model.safetensors``, random), ``generation_config.json`` (greedy); and
``tests/fixtures/indextts2/emotion_text.json``: for each test text the prompt ids of
``apply_chat_template(..., add_generation_prompt=True, enable_thinking=False)`` as upstream calls
it, and 12 greedy ids from transformers' ``generate``; and, for a set of classifier answers,
the eight weights upstream's ``QwenEmotion.inference`` makes of them (its JSON / ``key: value``
parsing, label normalisation, clamping, the calm default and the melancholic swap), run from
upstream's class with its model call replaced by the recorded answer.
"""
from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "indextts2"
SRC = Path(os.environ.get("INDEXTTS_SRC", ROOT.parent / "refsrc" / "index-tts"))
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs  # noqa: F401  (torchaudio's CUDA-linked extension loader)
import torch

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# Qwen3's layout for what QwenEmotion sends: a system and a user message, the assistant's turn
# opened, an empty think block when thinking is off
TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)
CORPUS = ["文本情感分类", "今天真是太开心了！", "我好难过，心情很低落。", "I feel so gloomy and depressed today.",
          '{"高兴": 0.9, "愤怒": 0.0, "悲伤": 0.1, "恐惧": 0.0, "反感": 0.0, "低落": 0.0, "惊讶": 0.2, "自然": 0.3}',
          "What a surprise, I did not expect that at all!"]
TEXTS = ["今天真是太开心了！", "I feel so gloomy and depressed today.", "What a surprise!"]
ANSWERS = [
    ('{"高兴": 0.9, "愤怒": 0.0, "悲伤": 0.1, "恐惧": 0.0, "反感": 0.0, "低落": 0.0, "惊讶": 0.2, "自然": 0.3}',
     "今天真是太开心了！"),
    ('{"高兴": 0.0, "悲伤": 0.8, "低落": 0.1, "自然": 0.2}', "I feel so gloomy and depressed today."),
    ('高兴: 1.5, 惊讶: 0.4', "What a surprise!"),
    ('{"emotion": "surprised"}', "What a surprise!"),
    ('"愤怒"', "Stop that."),
    ('{"高兴": "悲伤"}', "oh"),
    ('nothing useful here', "plain words"),
    ('{"高兴": 0, "自然": 0}', "plain words"),
]


def build_tokenizer(folder: Path):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import Qwen2Tokenizer

    bpe = ByteLevelBPETokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(CORPUS * 10) + "\n")
        bpe.train([str(corpus)], vocab_size=400, min_frequency=1, show_progress=False)
        bpe.save_model(tmp)
        tok = Qwen2Tokenizer(str(Path(tmp) / "vocab.json"), str(Path(tmp) / "merges.txt"),
                             unk_token=None, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": [t for t in SPECIALS if t not in ("<|im_end|>",
                                                                                           "<|endoftext|>")]})
    tok.chat_template = TEMPLATE
    tok.save_pretrained(str(folder))
    return tok


def upstream_qwen_emotion():
    """Upstream's ``QwenEmotion`` class compiled from infer_v2.py's source (its module imports every
    model library), with transformers' loaders in place of modelscope's."""
    import re
    import time

    tree = ast.parse((SRC / "indextts" / "infer_v2.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "QwenEmotion")

    class NoTokenizer:
        @staticmethod
        def from_pretrained(*a, **k):
            return None

    scope = {"json": json, "re": re, "time": time, "AutoTokenizer": NoTokenizer,
             "AutoModelForCausalLM": NoTokenizer}
    exec(compile(ast.Module([node], []), "infer_v2.py", "exec"), scope)
    return scope["QwenEmotion"]


def parse_goldens() -> list:
    """``QwenEmotion.inference`` of each recorded answer: the tokenizer and model calls answer
    with the recorded text, everything after them is upstream's."""
    cls = upstream_qwen_emotion()
    out = []
    for answer, text in ANSWERS:
        q = cls("unused")

        class Inputs(dict):
            input_ids = torch.tensor([[0]])

            def to(self, device):
                return self

        class Tok:
            eos_token_id = 0
            said = answer

            def apply_chat_template(self, *a, **k):
                return ""

            def __call__(self, *a, **k):
                return Inputs()

            def decode(self, ids, skip_special_tokens=True):
                return self.said

        class Model:
            device = "cpu"

            def generate(self, **k):
                return torch.tensor([[0, 1]])

        q.tokenizer, q.model = Tok(), Model()
        out.append({"answer": answer, "text": text, "weights": list(q.inference(text).values())})
    return out


def main() -> None:
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    folder = OUT / "tiny" / "qwen0.6bemo4-merge"
    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(folder)
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
                      tie_word_embeddings=False, rms_norm_eps=1e-6, rope_theta=1000000.0,
                      eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                      pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(torch.randn(p.shape) / p.shape[-1] ** 0.5)
    model.save_pretrained(str(folder), safe_serialization=True)
    GenerationConfig(do_sample=False, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id).save_pretrained(
        str(folder))
    cases = []
    for text in TEXTS:
        messages = [{"role": "system", "content": "文本情感分类"}, {"role": "user", "content": text}]
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
        ids = tok([prompt], return_tensors="pt")
        with torch.inference_mode():
            gen = model.generate(**ids, max_new_tokens=12, min_new_tokens=12, do_sample=False,
                                 pad_token_id=cfg.pad_token_id)
        n = ids.input_ids.shape[1]
        cases.append({"text": text, "prompt": prompt, "prompt_ids": ids.input_ids[0].tolist(),
                      "greedy": gen[0, n:].tolist()})
    (OUT / "emotion_text.json").write_text(json.dumps({"cases": cases, "answers": parse_goldens()},
                                                      ensure_ascii=False, indent=1) + "\n")
    print(len(tok), [len(c["prompt_ids"]) for c in cases])


if __name__ == "__main__":
    main()
