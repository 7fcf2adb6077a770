"""Every registered component, imported explicitly (no discovery by file scanning).

Adding a component: write its module, then add one import line here.
"""

from llmevo.components.attention import mha  # noqa: F401
from llmevo.components.block import pre_norm  # noqa: F401
from llmevo.components.feedforward import swiglu  # noqa: F401
from llmevo.components.kvcache import rope_relay  # noqa: F401
from llmevo.components.norm import rmsnorm  # noqa: F401
from llmevo.components.optim import adamw  # noqa: F401
from llmevo.components.position import learned, rope  # noqa: F401
