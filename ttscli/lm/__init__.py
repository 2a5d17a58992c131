"""What codec LMs share: the decoder-only LM (Qwen3 / Llama blocks, RoPE variants), per-request
KV caches, the code-decoder protocol and samplers. Nothing here imports a model family."""
