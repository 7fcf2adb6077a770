"""llmevo: turn LLM papers into trustworthy small-scale evidence, then evolve designs."""

__version__ = "0.1.0"
