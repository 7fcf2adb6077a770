"""Every built-in component, declared by slot, name and module (no discovery by file scanning).

A component's module is imported when a lookup first names it (``llmevo.registry.Registry``):
a run imports the components its arms use, not all of them. Importing this package (which
importing any component module does) declares them all in ``llmevo.registry.REGISTRY``.

Adding a component: write its module, then add its line here (``llmevo new component`` does
both). The order within a slot is the order ``REGISTRY.all()`` lists them in.
"""

from llmevo.registry import REGISTRY

# (slot, registered name, module under llmevo.components)
COMPONENTS: tuple[tuple[str, str, str], ...] = (
    ("position", "rope", "position.rope"),
    ("position", "alibi", "position.alibi"),
    ("position", "learned", "position.learned"),
    ("position", "nope", "position.nope"),
    ("position", "sinusoidal", "position.sinusoidal"),
    ("attention", "mha", "attention.mha"),
    ("attention", "diff_attn", "attention.diff_attn"),
    ("attention", "gated_attn", "attention.gated_attn"),
    ("attention", "gqa", "attention.gqa"),
    ("attention", "mla", "attention.mla"),
    ("attention", "mqa", "attention.mqa"),
    ("attention", "qk_norm", "attention.qk_norm"),
    ("attention", "sigmoid_attn", "attention.sigmoid_attn"),
    ("attention", "sliding_window", "attention.sliding_window"),
    ("attention", "softcap", "attention.softcap"),
    ("attention", "value_residual", "attention.value_residual"),
    ("feedforward", "swiglu", "feedforward.swiglu"),
    ("feedforward", "geglu", "feedforward.geglu"),
    ("feedforward", "gelu", "feedforward.gelu"),
    ("feedforward", "moe", "feedforward.moe"),
    ("feedforward", "relu2", "feedforward.relu2"),
    ("norm", "rmsnorm", "norm.rmsnorm"),
    ("norm", "dyt", "norm.dyt"),
    ("norm", "layernorm", "norm.layernorm"),
    ("norm", "scalenorm", "norm.scalenorm"),
    ("block", "deepnorm", "block.deepnorm"),
    ("block", "peri_ln", "block.peri_ln"),
    ("block", "post_norm", "block.post_norm"),
    ("block", "pre_norm", "block.pre_norm"),
    ("block", "rezero", "block.rezero"),
    ("block", "sandwich", "block.sandwich"),
    ("optimizer", "adamw", "optim.adamw"),
    ("optimizer", "adam_mini", "optim.adam_mini"),
    ("optimizer", "ademamix", "optim.ademamix"),
    ("optimizer", "cautious_adamw", "optim.cautious_adamw"),
    ("optimizer", "lion", "optim.lion"),
    ("optimizer", "muon", "optim.muon"),
    ("optimizer", "normuon", "optim.normuon"),
    ("optimizer", "schedule_free_adamw", "optim.schedule_free_adamw"),
    ("optimizer", "soap", "optim.soap"),
    ("kv_cache", "rope-relay", "kvcache.rope_relay"),
    ("post_training", "sft", "post_training.sft"),
    ("post_training", "dpo", "post_training.dpo"),
    ("post_training", "grpo", "post_training.grpo"),
    ("post_training", "neftune", "post_training.neftune"),
    ("post_training", "none", "post_training.none"),
    ("data", "concat", "data.concat"),
    ("data", "mixture", "data.mixture"),
    ("data", "curriculum", "data.curriculum"),
    ("data", "ppl_filter", "data.quality"),
)

for _slot, _name, _module in COMPONENTS:
    REGISTRY.declare(_slot, _name, f"{__name__}.{_module}")
