"""A whole genome against llama_modern: the comparison behind ``reproduce --genome`` and
``ladder --genome`` (e.g. the fair evolution's champion across scale, issue 21 item 9).

The method arm is the genome's model (every model slot, with its configs), optimizer (with
its config) and data recipe; the baseline arm is llama_modern with AdamW. Both arms are then
what any reproduction's arms are (``reproduction.run_reproduction``, the one comparison
path): tuned on one learning-rate grid per arm (the genome's own ``train.lr`` is a starting
point the tuning replaces), trained under the same report seeds on the same tokens, and sized
together by the size dial. The genome is read from a file: an evolution report's
``summary.json`` (its champion) or a genome's JSON (``runner.genome.Genome``).

An evolution's own final comparison is this comparison: ``llmevo.evolve`` plans its champion
with ``genome_comparison(..., allow_noop=True)`` (a champion that builds llama_modern itself
is compared anyway, and classed no-op) and runs it through the same reproduction, so
``reproduce --genome <report>/summary.json`` at the study's final preset, seeds and tuning
plan trains the same runs.

Deviations from the genome as a study trained it: its other training genes (``warmup_steps``,
``weight_decay``) are not carried, since a reproduction trains both arms under one preset (at
each rung its warmup, one eleventh of the steps, and weight decay 0.1); the fair study's
knockouts measured reverting each of them to llama_modern's as negligible
(``docs/evolution/evolve-quick-fair``). Untuned, both arms train at the preset's learning
rate. A genome with a post-training stage is refused (its arms would share one pretraining,
and a tuned comparison of pretraining does not apply).

The comparison is extra evidence about a design, never a component's claim: promotion reads
component reproductions only. It lives apart from ``experiments.plans`` on purpose: the arm
cache's key covers the code a reproduction's runs reach, and this module is not on that path,
so the baseline runs it shares with other ladders stay cached.

Public API: ``GENOME_SLOT``, ``read_genome``, ``genome_comparison``.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from llmevo.errors import ConfigError
from llmevo.experiments.plans import Comparison, check_distinct
from llmevo.model.config import ModelConfig
from llmevo.registry import ComponentChoice, ComponentSpec, EmptyConfig, Manifest
from llmevo.runner.arm import Arm
from llmevo.runner.genome import NO_POST_TRAINING, Genome

GENOME_SLOT = "genome"  # what a genome comparison's spec says it fills: no registry slot
NAME_CHARACTERS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def read_genome(path: Path) -> tuple[Genome, str]:
    """The genome in ``path`` and a default name for its comparison: an evolution report's
    ``summary.json`` gives its champion (``<study>-champion``), a genome JSON its hash
    (``genome-<hash>``). A missing, unreadable or malformed file is a ``ConfigError``."""
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "no such file"
        raise ConfigError(f"--genome {path}: {what}; give an evolution report's summary.json "
                          "(e.g. docs/evolution/evolve-quick-fair/summary.json) or a genome JSON")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"--genome {path}: not readable JSON ({error})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--genome {path}: expected a JSON object, found {type(data).__name__}")
    champion = data.get("champion") if data.get("kind") == "evolution" else None
    if data.get("kind") == "evolution" and not (isinstance(champion, dict)
                                                and isinstance(champion.get("genome"), dict)):
        raise ConfigError(f"--genome {path}: the evolution summary has no champion genome (an object "
                          "at champion.genome)")
    try:
        genome = Genome.from_json(champion["genome"] if champion else data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<genome>"
        raise ConfigError(f"--genome {path}: not a genome ({where}: {first['msg']})") from None
    name = f"{data.get('study', 'evolution')}-champion" if champion else f"genome-{genome.hash()[:12]}"
    return genome, name


def genome_comparison(genome: Genome, name: str, source: Path,
                      base_model: ModelConfig | None = None, allow_noop: bool = False) -> Comparison:
    """llama_modern (``base_model``, AdamW) against ``genome``'s model, optimizer and data
    recipe; ``name`` labels the method arm and the files. Refused: a post-training stage, a
    name that cannot be a file name, a genome that builds llama_modern itself (unless
    ``allow_noop``: the plan then runs it with ``allow_noop`` and the verdict is classed no-op)."""
    if set(name) - NAME_CHARACTERS or not name:
        raise ConfigError(f"genome comparison name {name!r}: use lower-case letters, digits, '-', '_' or '.'")
    if genome.post_training != NO_POST_TRAINING:
        raise ConfigError(f"--genome {source}: it has a post-training stage "
                          f"({genome.post_training.label()}); a tuned comparison of pretraining "
                          f"does not apply (use `reproduce {genome.post_training.name}`)")
    from llmevo.skeleton import build_skeleton

    build_skeleton(genome.model)  # its own configs and sizes, checked before the size dial scales them
    manifest = Manifest(
        name=name, slot=GENOME_SLOT, manifest_ref=source.as_posix(), ablation="llama_modern",
        scope=(f"The genome {genome.label()} (from {source.as_posix()}) against llama_modern with "
               "AdamW, each arm's learning rate tuned; the genome's warmup and weight decay genes "
               "are not carried (both arms train under the preset's)."),
    )
    spec = ComponentSpec(cls=Genome, config_cls=EmptyConfig, manifest=manifest, origin="genome")
    model = base_model or ModelConfig()
    baseline = Arm("baseline", "llama_modern", model, ComponentChoice(name="adamw"))
    method = Arm("method", name, genome.model, genome.optimizer, recipe=genome.data)
    comparison = Comparison(spec=spec, baseline=baseline, method=method)
    if not allow_noop:
        check_distinct(comparison)
    return comparison
