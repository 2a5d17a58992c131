"""Emotion from text: upstream's ``QwenEmotion`` (``qwen0.6bemo4-merge/``, a Qwen3 causal LM
fine-tuned to answer a text's emotions as JSON), on ttscli's shared Qwen3 stack.

The prompt is Qwen3's chat layout with thinking off (what ``apply_chat_template(...,
enable_thinking=False)`` writes): the system message ``文本情感分类`` ("text emotion
classification"), the text as the user message, then the assistant turn with an empty think
block. The answer is decoded until ``<|im_end|>`` (greedy unless the folder's
``generation_config.json`` samples), read as JSON or, failing that, as ``key: number`` pairs; the
eight Chinese labels map to :data:`~ttscli.models.indextts2.config.EMOTIONS`, each clamped to
[0, 1.2], all zero meaning calm. The classifier cannot tell sad from melancholic, so a text that
names melancholy swaps the two, as upstream does.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import mlx.core as mx
from mlx import nn

from ttscli.errors import CheckpointError, GenerationError
from ttscli.models.indextts2.config import EMOTIONS

SYSTEM = "文本情感分类"
CN_LABELS = ("高兴", "愤怒", "悲伤", "恐惧", "反感", "低落", "惊讶", "自然")     # in EMOTIONS' order
MELANCHOLIC_WORDS = ("低落", "melancholy", "melancholic", "depression", "depressed", "gloomy")
MAX_SCORE = 1.2
MAX_ANSWER_TOKENS = 256


def chat_prompt(text: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def _label(value) -> str | None:
    """A Chinese label for ``value`` given as a Chinese or English label, else None."""
    if not isinstance(value, str):
        return None
    v = value.strip()
    if v in CN_LABELS:
        return v
    low = v.lower()
    return CN_LABELS[EMOTIONS.index(low)] if low in EMOTIONS else None


def _normalise(content) -> dict:
    """Upstream ``normalize_content``: a bare label or a labelled field becomes that label at 1;
    label-valued entries become 1 for the named emotion."""
    out = dict(content) if isinstance(content, dict) else {}
    found = _label(content) if isinstance(content, str) else None
    if found is None:
        for alias in ("emotion", "emotion_label", "label", "情感", "情绪"):
            found = _label(out.get(alias))
            if found is not None:
                break
    if found is not None and all(k not in out for k in CN_LABELS):
        out[found] = 1.0
    for key in CN_LABELS:
        named = _label(out.get(key))
        if named is not None:
            out[key] = 1.0 if named == key else 0.0
            if named != key:
                out[named] = 1.0
    return out


def _score(value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GenerationError(f"the emotion classifier answered a non-numeric score {value!r}") from None
    return max(0.0, min(MAX_SCORE, v))


def parse_answer(answer: str, text: str) -> list[float]:
    """The eight weights of the classifier's ``answer`` to ``text`` (module docstring)."""
    try:
        content = json.loads(answer)
    except json.JSONDecodeError:
        content = {m.group(1): float(m.group(2)) for m in re.finditer(r'([^\s":.,]+?)"?\s*:\s*([\d.]+)', answer)}
    if isinstance(content, dict) and any(w in text.lower() for w in MELANCHOLIC_WORDS):
        content["悲伤"], content["低落"] = content.get("低落", 0.0), content.get("悲伤", 0.0)
    content = _normalise(content)
    weights = [_score(content.get(k, 0.0)) for k in CN_LABELS]
    if all(w <= 0.0 for w in weights):
        weights[CN_LABELS.index("自然")] = 1.0
    return weights


class QwenCausalLM(nn.Module):
    """A Hugging Face Qwen3 causal LM: ``model.*`` (the shared decoder) and ``lm_head`` unless tied."""

    def __init__(self, args, tied: bool):
        super().__init__()
        from ttscli.lm.model import DecoderLM

        self.tied = tied
        self.model = DecoderLM(args)
        if not tied:
            self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def __call__(self, ids: mx.array, cache) -> mx.array:
        h = self.model(ids, cache)[:, -1]
        return self.model.embed_tokens.as_linear(h) if self.tied else self.lm_head(h)


class EmotionClassifier:
    def __init__(self, lm: QwenCausalLM, tokenizer, end_ids: set[int], think_end: int | None,
                 sampling: dict | None = None):
        self.lm, self.tokenizer, self.end_ids, self.think_end = lm, tokenizer, end_ids, think_end
        self.sampling = sampling or {}

    @classmethod
    def load(cls, folder: Path) -> "EmotionClassifier":
        from ttscli.checkpoint import load_strict, read_component
        from ttscli.config import read_json
        from ttscli.lm.config import LMArgs
        from ttscli.lm.tokenizer import load_tokenizer

        folder = Path(folder)
        cfg = read_json(folder / "config.json")
        args = LMArgs.from_hf(cfg)
        tied = bool(cfg.get("tie_word_embeddings", False))
        weights, source = read_component(folder, "")
        lm = load_strict(QwenCausalLM(args, tied), weights, source=source, dtype="float32")
        tok = load_tokenizer(folder)
        end = {i for i in (tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")) if i is not None}
        gen = read_json(folder / "generation_config.json") if (folder / "generation_config.json").is_file() else {}
        eos = gen.get("eos_token_id", [])
        end |= set(eos if isinstance(eos, list) else [eos])
        if not end:
            raise CheckpointError(f"{folder}: the tokenizer has no <|im_end|>")
        sampling = {k: gen[k] for k in ("do_sample", "temperature", "top_k", "top_p") if k in gen}
        return cls(lm, tok, end, tok.token_to_id("</think>"), sampling)

    def generate_ids(self, text: str, max_tokens: int = MAX_ANSWER_TOKENS, stop: bool = True,
                     seed: int | None = 0) -> list[int]:
        """The answer's ids (the end id not included; ``stop=False`` runs ``max_tokens`` regardless)."""
        from ttscli.lm.sample import SamplingParams, sample

        cache = self.lm.model.make_cache()
        s = self.sampling
        params = SamplingParams(temperature=float(s.get("temperature", 1.0)), top_k=int(s.get("top_k", 0)),
                                top_p=float(s.get("top_p", 1.0)), do_sample=bool(s.get("do_sample", False)))
        key = mx.random.key(seed or 0)
        out: list[int] = []
        x = mx.array(self.tokenizer.encode(chat_prompt(text)))[None]
        for _ in range(max_tokens):
            logits = self.lm(x, cache)
            if params.greedy:
                nxt = int(mx.argmax(logits, axis=-1).item())
            else:
                key, sub = mx.random.split(key)
                nxt = int(sample(logits, params, sub).item())
            if stop and nxt in self.end_ids:
                break
            out.append(nxt)
            x = mx.array([[nxt]])
        return out

    def answer(self, text: str, seed: int | None = 0) -> str:
        out = self.generate_ids(text, seed=seed)
        if self.think_end is not None and self.think_end in out:
            out = out[len(out) - out[::-1].index(self.think_end):]
        return self.tokenizer.decode(out, skip_special=True).strip()

    def weights(self, text: str) -> list[float]:
        return parse_answer(self.answer(text), text)


class LazyClassifier:
    """The classifier of a folder, loaded on the first request that needs it (a 0.6 B LM that most
    requests never use)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._clf: EmotionClassifier | None = None

    def weights(self, text: str) -> list[float]:
        if self._clf is None:
            self._clf = EmotionClassifier.load(self.folder)
        return self._clf.weights(text)
