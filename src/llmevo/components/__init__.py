"""Every registered component, imported explicitly (no discovery by file scanning).

Adding a component: write its module, then add one import line here.
"""

from llmevo.components.attention import (  # noqa: F401
    diff_attn,
    gated_attn,
    gqa,
    mha,
    mla,
    mqa,
    qk_norm,
    sigmoid_attn,
    sliding_window,
    softcap,
    value_residual,
)
from llmevo.components.block import (  # noqa: F401
    deepnorm,
    peri_ln,
    post_norm,
    pre_norm,
    rezero,
    sandwich,
)
from llmevo.components.data import concat, curriculum, mixture, quality  # noqa: F401
from llmevo.components.feedforward import geglu, gelu, moe, relu2, swiglu  # noqa: F401
from llmevo.components.kvcache import rope_relay  # noqa: F401
from llmevo.components.norm import dyt, layernorm, rmsnorm, scalenorm  # noqa: F401
from llmevo.components.optim import (  # noqa: F401
    adam_mini,
    adamw,
    ademamix,
    cautious_adamw,
    lion,
    muon,
    normuon,
    schedule_free_adamw,
    soap,
)
from llmevo.components.position import alibi, learned, nope, rope, sinusoidal  # noqa: F401
from llmevo.components.post_training import dpo, grpo, neftune, none, sft  # noqa: F401
