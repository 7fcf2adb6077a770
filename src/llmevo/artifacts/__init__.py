"""Artifacts (schema v2): typed schema, lossless load/dump, atomic writes, provenance."""

from llmevo.artifacts.io import (
    save_artifact,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from llmevo.artifacts.provenance import collect_provenance, module_files, sha256_file
from llmevo.artifacts.schema import (
    SCHEMA_VERSION,
    ArmResult,
    Artifact,
    DiagnosticArtifact,
    MeanStd,
    ReproductionArtifact,
    dump_artifact,
    load_artifact,
    validate_artifact,
)

__all__ = [
    "SCHEMA_VERSION",
    "ArmResult",
    "Artifact",
    "DiagnosticArtifact",
    "MeanStd",
    "ReproductionArtifact",
    "collect_provenance",
    "dump_artifact",
    "load_artifact",
    "module_files",
    "save_artifact",
    "sha256_file",
    "validate_artifact",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_text_atomic",
]
