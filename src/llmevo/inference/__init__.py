"""Inference: KV-cache decoding and sampling, checkpoints, streaming evaluation."""
