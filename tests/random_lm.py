"""A decoder stack (ttscli.lm.model.DecoderLM) with random weights and an output head, for the
tests that run an exported LM (Core ML, ONNX) against our MLX LM, and the configs they use."""
import numpy as np

# Llama: no q/k norm, attention biases; a short original context puts the 8 rotary pairs in all
# three llama3 bands (kept, blended, divided)
LLAMA = {"model_type": "llama", "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64, "rms_norm_eps": 1e-5,
         "attention_bias": True, "rope_theta": 500000.0,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 64}}
QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 96, "rms_norm_eps": 1e-6,
         "rope_theta": 1000000.0}


def random_stack(args, seed: int, vocab: int, stored=np.float32):
    """(DecoderLM, its weights by name, head ``[vocab, hidden]``), every tensor rounded through
    ``stored`` (what the exported file keeps, e.g. float16) so both sides hold the same values."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from ttscli.lm.model import DecoderLM

    lm = DecoderLM(args, embed_tokens=False)
    rng = np.random.default_rng(seed)
    w = {}
    for k, v in tree_flatten(lm.parameters()):
        scale = 0.3 if v.ndim == 1 and not k.endswith("bias") else 1 / np.sqrt(v.shape[-1])
        centre = 1.0 if k.endswith(("norm.weight", "layernorm.weight")) else 0.0
        w[k] = (centre + scale * rng.standard_normal(v.shape)).astype(stored).astype(np.float32)
    lm.load_weights([(k, mx.array(v)) for k, v in w.items()])
    head = (rng.standard_normal((vocab, args.hidden_size)) / np.sqrt(args.hidden_size)).astype(stored)
    return lm, w, head.astype(np.float32)
