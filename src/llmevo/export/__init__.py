"""Carrying trained llmevo models into other tools (Hugging Face ``transformers``)."""
