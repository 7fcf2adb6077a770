"""The post-training stage: runs after pretraining, on the same model, with its own steps,
learning rate and seed, and returns what it measured.

A method is a registered ``post_training`` component (``llmevo.components.post_training``);
this module holds what they share: the settings (each preset's are its ``post_training``
field, ``llmevo.runner.presets``), batching of scored sequences, the optimizer, sampling and
greedy decoding. ``run_post_training`` refuses to start without a pretrained stage; the
runner's ``post_train_and_evaluate`` runs it for a reproduction's arms and an evolution
genome's post-training gene alike.

Public API: ``PostTrainSettings``, ``PretrainedModel``, ``StageContext``, ``StageResult``,
``run_post_training``, ``sample_completions``, ``decode_ids``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
)
from torch import Tensor, nn

from llmevo.components.optim.base import scale_learning_rates
from llmevo.components.optim.optimizer import Optimizer
from llmevo.components.post_training.objectives import masked_mean_nll, response_target_mask
from llmevo.components.post_training.tasks import ArithmeticConfig, PostTrainData
from llmevo.data.codec import TextCodec
from llmevo.data.suites import ScoredSequence
from llmevo.errors import ConfigError
from llmevo.registry import REGISTRY, ComponentChoice, StrictModel, one_line_error

TASKS = ("instruction", "preference", "arithmetic")


class PostTrainSettings(StrictModel):
    """The stage's own budget: steps x batch_size examples (records, pairs or prompts)."""

    steps: PositiveInt = 60
    batch_size: PositiveInt = 16
    lr: PositiveFloat = 1e-3
    weight_decay: NonNegativeFloat = 0.0
    grad_clip: NonNegativeFloat = 1.0
    seed_offset: NonNegativeInt = Field(
        default=1000, description="The stage's seed is the run seed plus this offset.")
    arithmetic: ArithmeticConfig = Field(default_factory=ArithmeticConfig)
    held_out_pairs: PositiveInt = 128
    max_new_tokens: PositiveInt = 4
    self_consistency: bool = Field(
        default=False, description="Also score held-out arithmetic by majority vote over k = 1, 4, 8 "
                                   "sampled answers (evaluate.self_consistency).")
    sampling_temperature: PositiveFloat = 0.7  # of the self-consistency samples

    @property
    def examples(self) -> int:
        return self.steps * self.batch_size

    def override(self, values: dict[str, Any]) -> PostTrainSettings:
        """A copy with the non-None ``values`` replaced (``arithmetic.<field>`` for the
        arithmetic task's settings), validated; a bad value is a one-line ``ConfigError``."""
        data = self.model_dump()
        for key, value in values.items():
            if value is None:
                continue
            if key.startswith("arithmetic."):
                data["arithmetic"][key.split(".", 1)[1]] = value
            else:
                data[key] = value
        try:
            return PostTrainSettings.model_validate(data)
        except ValidationError as error:
            raise one_line_error(error, "post-training settings") from None


@dataclass
class PretrainedModel:
    """A model after its pretraining stage (``steps_done`` > 0), or a pretrained checkpoint
    loaded as it is (``from_checkpoint``, ``--init-from``: no steps here)."""

    model: nn.Module
    steps_done: int
    from_checkpoint: bool = False


@dataclass
class StageResult:
    """What one post-training stage did and measured."""

    method: str
    losses: list[float] = field(default_factory=list)  # per step, that step's objective
    phases: list[str] = field(default_factory=list)  # per step: "sft", "dpo", "grpo", ...
    examples: int = 0  # records, pairs or prompts consumed
    rewards: list[float] = field(default_factory=list)  # GRPO: mean reward per step
    reward_bearing_rates: list[float] = field(default_factory=list)  # GRPO: per step
    grad_norms: list[float] = field(default_factory=list)  # per step, total norm before clipping
    extra: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @property
    def post_training_loss(self) -> float:
        """Mean loss of the method's own objective steps (all steps for SFT; 0 when none ran)."""
        own = [loss for loss, phase in zip(self.losses, self.phases, strict=True)
               if phase == self.method]
        return sum(own) / len(own) if own else 0.0

    @property
    def reward_bearing_group_rate(self) -> float:
        """Share of sampled groups whose rewards are not all equal; 0 when no RL stage ran."""
        rates = self.reward_bearing_rates
        return sum(rates) / len(rates) if rates else 0.0


@dataclass
class StageContext:
    """Everything a method needs to run on one model."""

    model: nn.Module
    data: PostTrainData
    task: str
    settings: PostTrainSettings
    seed: int
    device: torch.device
    generator: torch.Generator = field(init=False)
    last_grad_norm: float = field(init=False, default=math.nan)  # of the latest ``step``

    def __post_init__(self) -> None:
        self.generator = torch.Generator().manual_seed(self.seed)

    def optimizer(self) -> Optimizer:
        spec = REGISTRY.get("optimizer", "adamw")
        component = spec.cls(spec.make_config({}))
        optimizer = component.build(self.model, lr=self.settings.lr,
                                    weight_decay=self.settings.weight_decay)
        scale_learning_rates(optimizer, self.model, component, "adamw")  # a parametrization's (mup) lrs
        return optimizer

    def draw(self, pool_size: int) -> list[int]:
        """``batch_size`` indices into a pool, from the stage's seeded generator."""
        if pool_size < 1:
            raise ConfigError(f"post-training task '{self.task}' has no training examples")
        return torch.randint(0, pool_size, (self.settings.batch_size,),
                             generator=self.generator).tolist()

    def step(self, optimizer: Optimizer, loss: Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.settings.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm(
                [p.grad for p in self.model.parameters() if p.grad is not None])
        self.last_grad_norm = float(norm)  # before clipping, as the trainer logs train/grad_norm
        optimizer.step()


@dataclass
class SequenceBatch:
    inputs: Tensor  # (B, T)
    targets: Tensor  # (B, T)
    mask: Tensor  # (B, T) response targets
    lengths: Tensor  # (B,) unpadded lengths (tokens incl. <bos>)


def batch_sequences(
    sequences: Sequence[ScoredSequence], pad_id: int, device: torch.device
) -> SequenceBatch:
    """Right-pad scored sequences into inputs/targets with the response-target mask."""
    width = max(len(s.tokens) for s in sequences)
    tokens = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # (B, T+1)
    for row, sequence in enumerate(sequences):
        tokens[row, : len(sequence.tokens)] = torch.tensor(sequence.tokens)
    lengths = torch.tensor([len(s.tokens) for s in sequences])
    starts = torch.tensor([s.response_start for s in sequences])
    mask = response_target_mask(lengths, starts, width - 1)
    tokens = tokens.to(device)
    return SequenceBatch(tokens[:, :-1], tokens[:, 1:], mask.to(device), lengths.to(device))


def sft_step(context: StageContext, optimizer: Optimizer,
             demonstrations: Sequence[ScoredSequence]) -> float:
    """One SFT step on a seeded batch of demonstrations; returns the loss."""
    batch = batch_sequences([demonstrations[i] for i in context.draw(len(demonstrations))],
                            context.data.codec.pad_id, context.device)
    logits = context.model(batch.inputs)  # (B, T, V)
    loss = masked_mean_nll(logits, batch.targets, batch.mask)
    context.step(optimizer, loss)
    return loss.item()


def decode_ids(codec: TextCodec, ids: Sequence[int]) -> str:
    """Text of token ids (special tokens dropped)."""
    tokenizer = getattr(codec, "tokenizer", None)
    if tokenizer is not None:
        return tokenizer.decode(list(ids), skip_special_tokens=True)
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


@torch.no_grad()
def sample_completions(
    model: nn.Module,
    prompts: Tensor,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Continue equal-length prompts ``(N, P)``: greedy at temperature 0, else sampled.

    Batched and without a KV cache (every step re-reads the whole rows; completions here are
    a few tokens); ``llmevo.inference.generate`` is the cached decoder for checkpoints.
    Returns the new tokens ``(N, max_new_tokens)``; after a row's ``<eos>`` it holds ``pad_id``.
    """
    was_training = model.training
    model.eval()
    rows = prompts
    done = torch.zeros(prompts.shape[0], dtype=torch.bool, device=prompts.device)
    new_tokens = []
    for _ in range(max_new_tokens):
        logits = model(rows)[:, -1].float()  # (N, V)
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1).cpu()
            chosen = torch.multinomial(probs, 1, generator=generator).squeeze(-1).to(rows.device)
        else:
            chosen = logits.argmax(dim=-1)
        chosen = torch.where(done, torch.full_like(chosen, pad_id), chosen)  # (N,)
        new_tokens.append(chosen)
        done = done | (chosen == eos_id)
        rows = torch.cat([rows, chosen[:, None]], dim=1)
        if bool(done.all()):
            break
    model.train(was_training)
    out = torch.full((prompts.shape[0], max_new_tokens), pad_id, dtype=torch.long,
                     device=prompts.device)
    out[:, : len(new_tokens)] = torch.stack(new_tokens, dim=1)
    return out


def completion_text(codec: TextCodec, completion: Sequence[int]) -> str:
    """The text a completion holds before its first ``<eos>`` (padding ignored)."""
    ids: list[int] = []
    for token in completion:
        if token == codec.eos_id:
            break
        if token != codec.pad_id:
            ids.append(int(token))
    return decode_ids(codec, ids)


def run_post_training(
    pretrained: PretrainedModel | None,
    method: ComponentChoice,  # of the post_training slot
    data: PostTrainData,
    task: str,
    settings: PostTrainSettings,
    seed: int,
    device: torch.device,
) -> StageResult:
    """Post-train ``pretrained.model`` in place with ``method``; refuses a missing pretraining."""
    if pretrained is None or (pretrained.steps_done < 1 and not pretrained.from_checkpoint):
        raise ConfigError(
            "post-training needs a pretrained stage: pretrain the model first (steps > 0)")
    if task not in TASKS:
        raise ConfigError(f"unknown post-training task '{task}'; known: {', '.join(TASKS)}")
    spec = REGISTRY.get("post_training", method.name)
    component: Any = spec.cls(spec.make_config(method.config))
    pretrained.model.to(device).train()
    context = StageContext(pretrained.model, data, task, settings, seed, device)
    started = time.perf_counter()
    result = component.run(context)
    result.wall_seconds = time.perf_counter() - started
    pretrained.model.eval()
    return result
