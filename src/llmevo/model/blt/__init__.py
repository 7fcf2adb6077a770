"""Byte Latent Transformer (arXiv 2412.09871) and its token-level stand-in.

``model.ByteLatentTransformer`` registers as the architecture ``blt-bytes`` and
``standin.BLTStandin`` (a token-level proxy, the reference artifact's ``blt``) as ``blt``;
``llmevo.catalog`` imports both.
"""

from __future__ import annotations

from llmevo.model.blt.model import BLTSettings, ByteLatentTransformer
from llmevo.model.blt.prepare import blt_model_config, prepare_blt
from llmevo.model.blt.standin import BLTStandin, StandinSettings, blt_standin_config

__all__ = [
    "BLTSettings",
    "BLTStandin",
    "ByteLatentTransformer",
    "StandinSettings",
    "blt_model_config",
    "blt_standin_config",
    "prepare_blt",
]
