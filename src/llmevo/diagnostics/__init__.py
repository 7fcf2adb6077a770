"""L1 mechanism diagnostics, one module per component, registered by explicit import."""

from llmevo.diagnostics import muon, rope, rope_relay  # noqa: F401
