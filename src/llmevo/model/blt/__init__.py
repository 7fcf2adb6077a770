"""Byte Latent Transformer (arXiv 2412.09871) and its token-level stand-in.

Importing this package registers the architectures ``blt`` and ``blt_standin`` in
``llmevo.model.transformer.ARCHITECTURES`` (``register_architectures``; a second
registration of a name is an error, as in the component registry).
"""

from __future__ import annotations

from torch import nn

from llmevo.data.bytes import byte_stream
from llmevo.errors import ConfigError
from llmevo.model.blt.model import BLTSettings, ByteLatentTransformer
from llmevo.model.blt.prepare import blt_model_config, prepare_blt
from llmevo.model.blt.standin import BLTStandin, blt_standin_config
from llmevo.model.transformer import ARCHITECTURES

BLT_ARCHITECTURES: dict[str, type[nn.Module]] = {
    "blt": ByteLatentTransformer,
    "blt_standin": BLTStandin,
}


def register_architectures() -> None:
    """Add the BLT architectures to ``ARCHITECTURES``; a name taken by another class is an error."""
    for name, cls in BLT_ARCHITECTURES.items():
        present = ARCHITECTURES.get(name)
        if present is not None and present is not cls:
            raise ConfigError(f"architecture '{name}' is registered twice")
        ARCHITECTURES[name] = cls


register_architectures()

__all__ = [
    "BLTSettings",
    "BLTStandin",
    "ByteLatentTransformer",
    "blt_model_config",
    "blt_standin_config",
    "byte_stream",
    "prepare_blt",
    "register_architectures",
]
