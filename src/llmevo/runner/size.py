"""The size dial: one integer (a rung) sets the model's size and everything that follows it.

Rung 0 is today's ``quick`` preset with ``llama_modern`` exactly: d_model 64, 2 layers, 4
heads, SwiGLU hidden 192, 139,584 parameters, 330 steps of batch 48 x 64 tokens (1,013,760
training tokens), warmup 30. ``size_at(rung)`` returns everything a rung sets (``Size``: the
geometry, the model, the resolved preset, the parameter count and training tokens); a ladder
calls it once per rung, and ``reproduce --rung`` / ``evolve --rung`` call it through their
requests.

What a rung sets, and the rule for each:

- **Geometry** (``RUNGS``): each rung about doubles the parameters (rung -3, the smallest
  width with one 16-dimension head, is 2.9x below rung -2). The head dimension stays
  16 (heads = d_model / 16); the width grows by about sqrt(2) per rung (rounded to a multiple
  of 16) at depth 2 up to rung 2, then depth doubles at rungs 3 and 6 with the width growing
  in between. Depth never goes below 2: two layers are the fewest that can form induction
  heads (Olsson et al. 2022), so a one-layer bottom rung would change what the model can do,
  not only its size.
- **Component sizes** follow the width: every size-bearing field of a model component's
  typed config declares how it scales (``registry.Scaling`` on the field, in the component's
  own file: a feed-forward ``hidden`` and MLA's latent widths follow the width, attention
  ``kv_heads`` the heads, RoPE ``rotary_dim`` the head dimension); it is read at the base
  model's size (its explicit value, else its config's default) and scaled by that factor (SwiGLU 192 stays 3 x d_model; GELU / ReLU² 288 stays 4.5 x
  d_model; kv_heads follow the heads). A size that does not scale to a whole number (a
  kv_heads of 2 over 4 heads taken to 3 heads) is refused. A sliding attention ``window`` is
  a length in tokens, and every rung keeps quick's 64-token sequence, so its rule keeps it
  as it is; GQA's ``group_size`` (query heads per key/value head) is a ratio, kept, so its
  key/value heads stay half the heads (refused where it does not divide them); MQA has no
  size field (one key/value head at every rung). A mixture of experts keeps its
  ``experts`` and ``top_k`` (counts) while each expert's ``hidden`` follows the width.
- **Training tokens** at quick's tokens-per-parameter ratio (``TOKENS_PER_PARAMETER`` =
  330 x 48 x 64 / 139,584 ≈ 7.26) of the rung's model, as whole steps of the rung's batch.
- **Batch** grows by sqrt(2) per rung (``8 * round(6 * 2 ** (rung / 2))``: 48 at rung 0),
  so steps and batch each take about half of the token growth (the batch size a model
  trains well at grows as its loss falls).
- **Warmup** stays quick's share of the steps (30 of 330, one eleventh).
- **Learning rate** stays quick's 3e-3: a ladder tunes it at each rung, and the default
  tuning grid (lr/3 .. 3 lr) is centred on it.
- **Evaluation protocol** is quick's at every rung: the whole validation and test splits and
  the public suite, so losses at different rungs are measured on the same tokens.
- The post-training stage is quick's.

The rungs (``rung_table()`` computes this; ``tests/unit/test_size.py`` checks it):

====  =======  ======  =====  ==========  =====  =====  ===========  =========
rung  d_model  layers  heads  parameters  batch  steps  tokens       6·N·D
====  =======  ======  =====  ==========  =====  =====  ===========  =========
  -3       16       2      1      14,928     16    106      108,544  9.722e+09
  -2       32       2      2      43,168     24    204      313,344  8.116e+10
  -1       48       2      3      84,720     32    300      614,400  3.123e+11
   0       64       2      4     139,584     48    330    1,013,760  8.490e+11
   1       96       2      6     289,248     64    513    2,101,248  3.647e+12
   2      128       2      8     492,160     96    582    3,575,808  1.056e+13
   3      128       4      8     918,656    136    767    6,675,968  3.680e+13
   4      192       4     12   2,016,960    192  1,192   14,647,296  1.773e+14
   5      256       4     16   3,541,248    272  1,477   25,711,616  5.463e+14
   6      256       8     16   6,951,168    384  2,054   50,479,104  2.105e+15
   7      384       8     24  15,538,560    544  3,241  112,838,656  1.052e+16
====  =======  ======  =====  ==========  =====  =====  ===========  =========

Negative rungs exist so that a ladder can reach below today's model: the issue asks for four
rungs spanning >= 8x parameters (>= 64x compute). With the head dimension kept and depth at
least 2, rungs -2..+1 span 6.7x parameters (45x compute); -3..0 span 9.4x (87x) at a fraction
of a rung 2's cost, and -3..+1 19.4x (375x). Rung -3's one head of 16 dimensions is the
narrowest model the dial builds (its embeddings are over half its parameters). From
rung 3 on a rung trains more tokens than quick's training stream holds (about 6.0M: the
WikiText-2 train split's 5.3M plus the narrative and instruction records), so it repeats
data; its artifact records the epochs.

**Context** stays quick's 64 tokens unless ``seq_len`` is given (``--seq-len``; a ladder's
``--context grow`` takes ``context_length(rung)``: 64 up to rung 0, then x sqrt(2) per rung),
so that position components (rope, alibi, nope) can be judged at longer windows. The steps
still train the rung's tokens; evaluation and the suites use the same window, so losses at
two context lengths are not on equal footing (a longer window predicts each token from more).

Explicit ``d_model`` / ``n_layers`` / ``n_heads`` replace the rung's geometry for a user who
wants one particular size; the component sizes, tokens and warmup then follow that model.

Public API: ``RUNGS``, ``Geometry``, ``Size``, ``size_at``, ``resize_model``, ``rung_table``,
``size_dial`` (a request's rung and sizes), ``size_label`` (in file and study names),
``check_parametrization`` (can a model and optimizer honour ``--param mup``?),
``context_length`` (the ladder's growing context),
``TOKENS_PER_PARAMETER``, ``RULES`` (each declared ``Scaling``'s rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from llmevo.catalog import build_optimizer, full_registry
from llmevo.components.base import Attention, Block
from llmevo.errors import ConfigError
from llmevo.model.config import ModelConfig
from llmevo.model.parametrization import attention_scale, hidden_matrix_names, residual_scale
from llmevo.registry import MODEL_SLOTS, ComponentChoice, Scaling, integer_fields
from llmevo.runner.presets import Preset, get_preset
from llmevo.skeleton import build_skeleton, parameter_count

REFERENCE_PRESET = "quick"  # rung 0 is this preset, with llama_modern
TOKENS_PER_PARAMETER = 330 * 48 * 64 / 139_584  # quick's: 1,013,760 tokens over 139,584 parameters
WARMUP_SHARE = 30 / 330  # quick's warmup steps over its steps
MIN_SEQ_LEN, MAX_SEQ_LEN = 8, 4096


@dataclass(frozen=True)
class Geometry:
    """The sizes a rung gives the model: width, depth and heads."""

    d_model: int
    n_layers: int
    n_heads: int

    def check(self) -> Geometry:
        if min(self.d_model, self.n_layers, self.n_heads) < 1:
            raise ConfigError(f"d_model {self.d_model}, {self.n_layers} layers, {self.n_heads} heads: "
                              "every size must be at least 1")
        if self.d_model % self.n_heads:
            raise ConfigError(f"--heads {self.n_heads} does not divide --d-model {self.d_model}; "
                              "choose heads that divide the width")
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


RUNGS: dict[int, Geometry] = {
    -3: Geometry(16, 2, 1),
    -2: Geometry(32, 2, 2),
    -1: Geometry(48, 2, 3),
    0: Geometry(64, 2, 4),
    1: Geometry(96, 2, 6),
    2: Geometry(128, 2, 8),
    3: Geometry(128, 4, 8),
    4: Geometry(192, 4, 12),
    5: Geometry(256, 4, 16),
    6: Geometry(256, 8, 16),
    7: Geometry(384, 8, 24),
}


def _factor(name: str, value: int, new: int, old: int) -> int:
    scaled, remainder = divmod(value * new, old)
    if remainder or scaled < 1:
        raise ConfigError(f"{name}={value} at {old} does not scale to a whole size at {new}")
    return scaled


def _divides(name: str, value: int, heads: int) -> int:
    if heads % value:
        raise ConfigError(f"{name}={value} does not divide the {heads} head(s) of this size; choose a "
                          f"rung whose heads are a multiple of {value} (rung 0 has 4, rung 1 has 6) or "
                          f"a {name.split('.')[-1]} that divides {heads}")
    return value


# each declared ``Scaling`` -> a field's value at the new geometry, from (field, value, the
# base model's geometry, the new geometry); which field follows which rule is declared on the
# field, in the component's own file
RULES: dict[Scaling, Callable[[str, int, Geometry, Geometry], int]] = {
    Scaling.WIDTH: lambda name, value, old, new: _factor(name, value, new.d_model, old.d_model),
    Scaling.HEADS: lambda name, value, old, new: _factor(name, value, new.n_heads, old.n_heads),
    Scaling.HEAD_DIM: lambda name, value, old, new: _factor(name, value, new.head_dim, old.head_dim),
    Scaling.KEPT: lambda name, value, old, new: value,
    Scaling.DIVIDES_HEADS: lambda name, value, old, new: _divides(name, value, new.n_heads),
}


def _scaled_choice(slot: str, choice: ComponentChoice, old: Geometry, new: Geometry) -> ComponentChoice:
    """``choice`` with each size-bearing field (its value, else its config's default) scaled by
    the rule its config declares."""
    config_cls = full_registry().get(slot, choice.name).config_cls
    config = dict(choice.config)
    for field, rule in integer_fields(config_cls).items():
        if rule is None:  # a plugin's size the dial would otherwise keep, silently
            raise ConfigError(f"{slot} component '{choice.name}': its integer field '{field}' declares no "
                              "Scaling, so the size dial cannot size it; declare one on the field "
                              f"(e.g. `{field}: Annotated[PositiveInt, Scaling.WIDTH]`, llmevo.registry)")
        assert config_cls is not None
        value = config.get(field, config_cls.model_fields[field].default)
        if value is not None:
            config[field] = RULES[rule](f"{choice.name}.{field}", int(value), old, new)
    return choice.model_copy(update={"config": config})


def resize_model(model: ModelConfig, geometry: Geometry) -> ModelConfig:
    """``model`` at ``geometry``: width, depth and heads replaced, every component's sizes
    scaled from the model's own geometry. Whole architectures other than the transformer
    have sizes of their own and are refused."""
    if model.architecture != "transformer":
        raise ConfigError(f"a rung scales llama_modern's slots; the {model.architecture} "
                          "architecture has sizes of its own (drop --rung / --d-model / --layers / --heads)")
    old = Geometry(model.d_model, model.n_layers, model.n_heads)
    geometry.check()
    update = {slot: _scaled_choice(slot, getattr(model, slot), old, geometry) for slot in MODEL_SLOTS}
    return model.model_copy(update={"d_model": geometry.d_model, "n_layers": geometry.n_layers,
                                    "n_heads": geometry.n_heads, **update})


def batch_size(rung: int) -> int:
    """48 at rung 0, times sqrt(2) per rung, a multiple of 8."""
    return 8 * round(6 * 2 ** (rung / 2))


@dataclass(frozen=True)
class Size:
    """Everything one rung sets. ``rung`` is None for an explicit size without a rung."""

    rung: int | None
    geometry: Geometry
    model: ModelConfig  # the base model at this size
    preset: Preset  # quick with this size's batch, steps and warmup
    parameters: int  # of ``model``

    @property
    def training_tokens(self) -> int:
        return self.preset.train.steps * self.preset.train.tokens_per_step

    @property
    def compute(self) -> float:
        """6 N D: training FLOPs of ``model`` over the training tokens."""
        return 6.0 * self.parameters * self.training_tokens


def geometry(rung: int, d_model: int | None = None, n_layers: int | None = None,
             n_heads: int | None = None) -> Geometry:
    """The rung's geometry with any explicit size replacing the rung's (checked)."""
    if rung not in RUNGS:
        raise ConfigError(f"--rung {rung}: unknown rung; known: {min(RUNGS)}..{max(RUNGS)}")
    base = RUNGS[rung]
    return replace(base, **{key: value for key, value in
                            (("d_model", d_model), ("n_layers", n_layers), ("n_heads", n_heads))
                            if value is not None}).check()


def size_at(rung: int | None = 0, *, d_model: int | None = None, n_layers: int | None = None,
          n_heads: int | None = None, batch: int | None = None,
          base_model: ModelConfig | None = None, preset: Preset | None = None,
          tokens_per_parameter: float | None = None, seq_len: int | None = None) -> Size:
    """Everything rung ``rung`` sets (None: rung 0's batch under an explicit size): the
    model (``base_model``, default llama_modern, at the rung's geometry or the explicit
    sizes), the preset (``preset``, default quick) with the batch (``batch`` replaces the
    rung's), the steps that train ``tokens_per_parameter`` (default
    ``TOKENS_PER_PARAMETER``) tokens per parameter and the warmup. A size that cannot be
    built or that trains no step is refused. ``seq_len`` replaces quick's 64-token window
    (training, evaluation and the suites; ``context_length`` gives the ladder's growing
    one); the model's ``max_seq_len`` grows to hold it."""
    if seq_len is not None and not MIN_SEQ_LEN <= seq_len <= MAX_SEQ_LEN:
        raise ConfigError(f"--seq-len {seq_len}: need {MIN_SEQ_LEN}..{MAX_SEQ_LEN} tokens")
    ratio = TOKENS_PER_PARAMETER if tokens_per_parameter is None else tokens_per_parameter
    if not (math.isfinite(ratio) and ratio > 0):
        raise ConfigError(f"--tokens-per-parameter {ratio}: need a positive number (quick's is "
                          f"{TOKENS_PER_PARAMETER:.2f})")
    shape = geometry(0 if rung is None else rung, d_model, n_layers, n_heads)
    model = resize_model(base_model or ModelConfig(), shape)
    if seq_len is not None and seq_len > model.max_seq_len:
        model = model.model_copy(update={"max_seq_len": seq_len})
    parameters = parameter_count(model)
    quick = preset or get_preset(REFERENCE_PRESET)
    if seq_len is not None:
        quick = quick.override({"seq_len": seq_len})
    batch = batch or batch_size(0 if rung is None else rung)
    steps = round(ratio * parameters / (batch * quick.train.seq_len))
    if steps < 1:
        raise ConfigError(
            f"{parameters:,} parameters at {ratio:.2f} tokens each are "
            f"{ratio * parameters:,.0f} tokens, less than one step of batch {batch}; "
            "choose a larger model or more tokens per parameter (reproduce also takes a "
            "smaller --batch-size)")
    preset = quick.override({"batch_size": batch, "steps": steps,
                             "warmup_steps": round(steps * WARMUP_SHARE)})
    return Size(rung=rung, geometry=shape, model=model, preset=preset, parameters=parameters)


def context_length(rung: int) -> int:
    """The ladder's growing context (``--context grow``): quick's 64 tokens up to rung 0,
    then x sqrt(2) per rung (a multiple of 16): 96, 128, 176, 256, … at rungs 1, 2, 3, 4."""
    return 16 * round(4 * 2 ** (max(rung, 0) / 2))


def rung_table() -> list[dict[str, int | float]]:
    """One row per rung: its geometry, parameters, batch, steps, tokens and 6 N D."""
    rows = []
    for rung in RUNGS:
        size = size_at(rung)
        rows.append({"rung": rung, "d_model": size.geometry.d_model, "layers": size.geometry.n_layers,
                     "heads": size.geometry.n_heads, "parameters": size.parameters,
                     "batch": size.preset.train.batch_size, "steps": size.preset.train.steps,
                     "tokens": size.training_tokens, "compute": size.compute})
    return rows


def size_dial(rung: int | None, d_model: int | None, layers: int | None, heads: int | None,
              preset: str | Preset, batch_size: int | None, base_model: ModelConfig,
              tokens_per_parameter: float | None = None, seq_len: int | None = None) -> Size | None:
    """A request's size dial (``rung`` and the explicit sizes) resolved on ``preset`` (a name
    or a ``Preset``), which must be quick (rung 0 is quick's llama_modern); None when no size
    is asked for."""
    if rung is None and d_model is None and layers is None and heads is None:
        for option, value in (("--tokens-per-parameter", tokens_per_parameter), ("--seq-len", seq_len)):
            if value is not None:
                raise ConfigError(f"{option} is a setting of the size dial; add --rung "
                                  "(or --d-model / --layers / --heads)")
        return None
    base = get_preset(preset) if isinstance(preset, str) else preset
    if base.name != REFERENCE_PRESET:
        raise ConfigError(f"--rung / --d-model / --layers / --heads scale the {REFERENCE_PRESET} "
                          f"preset (rung 0 is {REFERENCE_PRESET}); got --preset {base.name}")
    return size_at(rung, d_model=d_model, n_layers=layers, n_heads=heads, batch=batch_size,
                 base_model=base_model, preset=base, tokens_per_parameter=tokens_per_parameter,
                 seq_len=seq_len)


def size_label(size: Size | None) -> str | None:
    """What a sized run's file names carry: ``rung1``, ``d96-l2-h6``; None at rung 0."""
    if size is None:
        return None
    shape = size.geometry
    if size.rung is not None and shape == RUNGS[size.rung]:
        return f"rung{size.rung}" if size.rung else None
    return f"d{shape.d_model}-l{shape.n_layers}-h{shape.n_heads}"


def check_parametrization(model: ModelConfig, optimizer: ComponentChoice) -> None:
    """Refuse, in one line, a model or optimizer that cannot honour its parametrization
    (``model/parametrization.py``; ``standard`` always can). Under ``mup`` and ``completep``: the transformer
    only; an optimizer that declares ``per_group_lr``; every ``nn.Linear`` weight in the
    blocks a hidden matrix (both dimensions follow the width) and no other parameter with two
    dimensions that follow it, read by comparing the model's shapes with its own at twice the
    width (``resize_model``: every component's sizes by their declared ``Scaling``); an
    attention that reads ``ModelDims.attention_scale`` where the head dimension is not the
    base's; under ``completep`` away from the base depth, a block that reads
    ``ModelDims.residual_scale``."""
    if model.parametrization == "standard":
        return
    what = f"--param {model.parametrization}"
    if model.architecture != "transformer":
        raise ConfigError(f"{what}: the {model.architecture} architecture has no parametrization "
                          "rule (only the transformer's slots do); use --param standard")
    if not build_optimizer(optimizer).per_group_lr:
        raise ConfigError(f"{what}: optimizer '{optimizer.name}' does not take per-parameter learning "
                          "rates (μP's rule is for Adam-family updates: adamw, cautious_adamw, lion, "
                          "ademamix); use --param standard")
    here = Geometry(model.d_model, model.n_layers, model.n_heads).check()
    built = build_skeleton(model)
    wide = build_skeleton(resize_model(model, Geometry(2 * here.d_model, here.n_layers, 2 * here.n_heads)))
    hidden = set(hidden_matrix_names(built))
    wide_shapes = {name: tuple(p.shape) for name, p in wide.named_parameters()}
    for name, parameter in built.named_parameters():
        grows = [new != old for old, new in zip(parameter.shape, wide_shapes[name], strict=True)]
        doubled = all(new == 2 * old for old, new, g in zip(parameter.shape, wide_shapes[name], grows,
                                                             strict=True) if g)
        if name in hidden and not (all(grows) and doubled):
            raise ConfigError(f"{what}: {name} {tuple(parameter.shape)} has a dimension that does not "
                              "follow the width (an output-like weight, e.g. a router), which this "
                              "rule does not scale; use --param standard")
        if name not in hidden and sum(grows) > 1:
            raise ConfigError(f"{what}: {name} {tuple(parameter.shape)} is a matrix of the width that is "
                              "not an nn.Linear of the blocks, which this rule does not scale; use "
                              "--param standard")
    if attention_scale(model.parametrization, here.head_dim) is not None:
        for module in built.modules():
            if isinstance(module, Attention) and not module.honours_attention_scale:
                raise ConfigError(f"{what}: attention '{model.attention.name}' computes its own score scale, "
                                  f"so it cannot take μP's 1/d_head at head dimension {here.head_dim}; "
                                  "keep the head dimension 16 or use --param standard")
    if residual_scale(model.parametrization, here.n_layers) is not None:
        for module in built.modules():
            if isinstance(module, Block) and not module.honours_residual_scale:
                raise ConfigError(f"{what}: block '{model.block.name}' does not scale its residual branches "
                                  f"(CompleteP's rule is for the pre-norm block), so it cannot take depth "
                                  f"{here.n_layers}; use --param mup or the base depth 2")
