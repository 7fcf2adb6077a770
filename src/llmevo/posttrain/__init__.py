"""The post-training stage (SFT, NEFTune, DPO, GRPO) after pretraining, and its reproductions.

``objectives`` holds the math, ``tasks`` the data, ``stage`` the shared loop pieces,
``evaluate`` the held-out metrics and ``reproduce`` the paired comparison; the methods
themselves are registered components in ``llmevo.components.post_training``.
"""
