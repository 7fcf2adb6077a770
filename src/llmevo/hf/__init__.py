"""Hugging Face ``transformers`` interchange, both directions: ``export`` writes a trained
checkpoint as a ``LlamaForCausalLM`` directory (``llmevo export --format hf``), ``load`` reads
one back as both arms' starting point (``reproduce --init-from DIR``)."""
