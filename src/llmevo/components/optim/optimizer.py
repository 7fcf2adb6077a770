"""A small optimizer base, a per-group learning-rate schedule and the base of the batched
twins, without ``torch._dynamo``.

Every ``torch.optim.Optimizer`` imports ``torch._dynamo`` (and sympy) on first use: its
``add_param_group``, ``zero_grad`` and ``state_dict`` are wrapped in
``torch._disable_dynamo`` and its ``step`` in ``_use_grad_for_differentiable``. That import
alone costs more than a smoke reproduction's training (issue 11, docs/LOG.md). The classes
here keep the parts of that interface this platform uses and import nothing from
``torch.optim``:

- ``Optimizer``: ``param_groups`` (dicts with ``params`` and the hyperparameters, defaults
  filled in), ``state`` (per parameter), ``zero_grad(set_to_none=True)``, ``step()`` under
  ``torch.no_grad()`` calling ``update_group`` once per group in order (by default the
  subclass's ``update`` for each parameter with a gradient), and
  ``state_dict()`` / ``load_state_dict()`` in ``torch.optim``'s layout (parameters numbered
  in group order).
- Three hooks the trainer calls, no-ops here: ``set_run_steps(steps)`` before the first step
  (AdEMAMix's schedulers span the run), ``at_evaluation_point()`` around its per-step hook and
  ``to_evaluation_point()`` after the last step (schedule-free AdamW takes its gradients at y
  but is evaluated at its average x).
- ``LambdaSchedule``: ``torch.optim.lr_scheduler.LambdaLR``'s rule: each group's lr is its
  own base lr (its lr when the schedule was built) times ``factor(step)``; the factor for
  step 0 is applied on construction, ``step()`` moves to the next step.

- ``BatchedOptimizer``: the base of an optimizer's batched twin, which updates R replicas
  of one model at once (``llmevo.train.replicas``): every parameter stacked along a leading
  replica dimension, every hyperparameter an (R,) tensor; ``bind(model)`` (before the first
  step) and ``to_evaluation_point(params)`` (after the last) are its hooks, no-ops here;
  ``at_evaluation_point(params)`` (around a mid-run validation point) follows from the latter.

Not kept: closures, hooks, sparse or complex parameters, ``foreach``/``fused`` paths.
Reference tests (tests/reference/test_optim_reference.py): AdamW bit-identical to
``torch.optim.AdamW`` on CPU; ``LambdaSchedule`` equal to ``LambdaLR`` on two groups;
``zero_grad`` and the state-dict round trip; each batched twin against its optimizer.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn


class Optimizer:
    """Param groups, per-parameter state, ``zero_grad`` and a no-grad ``step``.

    Subclasses implement ``update(param, grad, state, group)``, one parameter's step at its
    group's settings (or ``update_group(group)``, the step of every parameter of ``group`` that
    has a gradient, which calls ``update`` by default).
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], defaults: dict[str, Any]):
        self.defaults = dict(defaults)
        self.state: dict[Tensor, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        groups = list(params)
        if not groups:
            raise ValueError("an optimizer needs at least one parameter")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for existing in self.param_groups for p in existing["params"]}
        if len({id(p) for p in params}) != len(params) or seen & {id(p) for p in params}:
            raise ValueError("a parameter appears more than once in the optimizer's groups")
        # the group's own keys win over the defaults; group-only keys (Muon's ``use_muon``) stay
        self.param_groups.append({**self.defaults, **group, "params": params})

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    def step(self) -> None:
        with torch.no_grad():
            for group in self.param_groups:
                self.update_group(group)

    def update_group(self, group: dict[str, Any]) -> None:
        for p, state in with_grads(group, self.state):
            self.update(p, p.grad, state, group)

    def update(self, param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError  # pragma: no cover

    def set_run_steps(self, steps: int) -> None:
        """The run's number of steps, told by the trainer before the first step (AdEMAMix's
        alpha and beta3 schedulers span the run); ignored by default."""

    def to_evaluation_point(self) -> None:
        """Leave the parameters where the model is evaluated; the trainer calls it once after
        the last step. Nothing by default (schedule-free AdamW moves them to its average x)."""

    @contextlib.contextmanager
    def at_evaluation_point(self) -> Iterator[None]:
        """The parameters at the evaluation point inside the block, as they were after it (the
        trainer wraps its per-step hook: evolution's hurdles evaluate the model mid-run)."""
        yield

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: state}, "param_groups": [{..., "params": [index]}]}``.

        Parameters are numbered in group order, as ``torch.optim`` does; the state tensors
        are the optimizer's own (copy them to keep a snapshot).
        """
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            groups.append({**group, "params": [index[id(p)] for p in group["params"]]})
        state = {index[id(p)]: values for p, values in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a ``state_dict()`` of an optimizer built the same way (copies its tensors)."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups) or any(
            len(saved["params"]) != len(group["params"])
            for saved, group in zip(saved_groups, self.param_groups, strict=True)
        ):
            raise ValueError("the state dict's param groups do not match this optimizer's")
        by_index = {
            index: p
            for saved, group in zip(saved_groups, self.param_groups, strict=True)
            for index, p in zip(saved["params"], group["params"], strict=True)
        }
        self.state = {
            by_index[index]: {
                key: _to_param(value, by_index[index], key) for key, value in values.items()
            }
            for index, values in state_dict["state"].items()
        }
        for group, saved in zip(self.param_groups, saved_groups, strict=True):
            options = {k: copy.deepcopy(v) for k, v in saved.items() if k != "params"}
            group.update(options)


def _to_param(value: Any, param: Tensor, key: str) -> Any:
    """A copy of a saved state value: buffers on ``param``'s device (floats in its dtype); the
    ``step`` count stays a CPU scalar where it was, as ``torch.optim`` keeps it."""
    if not isinstance(value, Tensor):
        return copy.deepcopy(value)
    if key == "step":
        return value.clone()
    if value.is_floating_point() and param.is_floating_point():
        return value.to(device=param.device, dtype=param.dtype, copy=True)
    return value.to(device=param.device, copy=True)


class LambdaSchedule:
    """Each group's lr = its base lr (the lr when built) * ``factor(step)``, like ``LambdaLR``.

    Call ``step()`` once after each ``optimizer.step()``; the factor for step 0 is applied
    on construction.
    """

    def __init__(self, optimizer: Optimizer, factor: Callable[[int], float]):
        self.optimizer = optimizer
        self.factor = factor
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.last_step = 0
        self._apply()

    def step(self) -> None:
        self.last_step += 1
        self._apply()

    def refactor(self, factor: Callable[[int], float]) -> None:
        """Follow ``factor`` from this step on (a decay branch's own schedule)."""
        self.factor = factor
        self._apply()

    def _apply(self) -> None:
        factor = self.factor(self.last_step)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * factor


def with_grads(group: dict[str, Any], state: dict[Tensor, dict[str, Any]]) -> Iterator[tuple[Tensor, dict[str, Any]]]:
    """Each parameter of ``group`` that has a gradient, in order, with its entry of ``state``
    (created empty on first use)."""
    return ((p, state.setdefault(p, {})) for p in group["params"] if p.grad is not None)


def per_replica(values: Tensor, like: Tensor) -> Tensor:
    """(R,) -> (R, 1, ..., 1), broadcasting one value per replica against a stacked (R, ...) tensor."""
    return values.view(-1, *([1] * (like.dim() - 1)))


class BatchedOptimizer:
    """An optimizer's batched twin: one update of R replicas' stacked parameters at once.

    Each parameter is a stacked (R, ...) tensor (``torch.func.stack_module_state``) and each
    hyperparameter an (R,) tensor, so the replicas may differ in every numeric setting;
    nothing is read back to the host. ``step(params, grads, lr)`` applies decoupled weight
    decay ``p <- p (1 - lr wd)`` to every parameter, then ``update`` — the operations of the
    optimizer's own ``update_group``, with the hyperparameters as columns, so each replica
    follows its sequential run to float rounding (the parity tests: tests/unit/test_replicas.py,
    tests/contract).

    A subclass is built as ``cls(configs, lr, weight_decay, roles, device, steps)``: per
    replica its component's config and the learning rate and weight decay the component's
    ``build`` receives; ``roles``, the role (``optim/base.py``, ``parameter_roles``) of each
    stacked parameter, in stacking order; the device; the number of steps. ``shared`` names
    the config fields every replica of one batched run must share (settings that choose the
    code, not a number, such as Muon's ``nesterov``). ``sign_sensitive`` marks an update that
    branches on the sign of each gradient entry (cautious AdamW's mask): an entry whose gradient
    is within rounding of zero may take the other branch in a batched run than in its sequential
    one (the batched forward rounds differently), so that entry alone moves by about one lr step;
    given identical gradients the twin still equals its optimizer (the reference test), and the
    contract suite allows at most one such entry in a thousand per tensor.
    """

    shared: ClassVar[tuple[str, ...]] = ()
    sign_sensitive: ClassVar[bool] = False

    def __init__(self, configs: Sequence[Any], lr: Sequence[float], weight_decay: Sequence[float],
                 roles: dict[str, str], device: torch.device, steps: int):
        self.device = device
        self.roles = roles
        self.names = list(roles)
        self.base_lr = self.column(lr)  # (R,)
        self.weight_decay = self.column(weight_decay)  # (R,)
        self.step_count = 0
        self.state: dict[str, dict[str, Tensor]] = {name: {} for name in self.names}
        self.last_errors: Tensor | None = None  # (R,) mean orthogonality error of the last step

    def column(self, values: Sequence[float]) -> Tensor:
        """One value per replica, as an (R,) float32 tensor on the device."""
        return torch.tensor(values, dtype=torch.float32, device=self.device)  # (R,)

    @torch.no_grad()
    def step(self, params: dict[str, Tensor], grads: dict[str, Tensor], lr: Tensor) -> None:
        """One update; ``lr`` (R,) is this step's schedule factor x alive (0 freezes a replica)."""
        self.step_count += 1
        lr = self.base_lr * lr  # (R,)
        errors = []
        for name in self.names:
            param = params[name]
            param_lr = self.parameter_lr(name, lr)  # (R,)
            param.mul_(per_replica(1 - param_lr * self.weight_decay, param))
            error = self.update(name, param, grads[name], self.state[name], param_lr)
            if error is not None:
                errors.append(error)
        if errors:
            self.last_errors = torch.stack(errors).mean(0)  # (R,)

    def bind(self, model: nn.Module) -> None:
        """Read what the update needs from one replica's module structure (``train_replicas``
        passes its template before the first step; Adam-mini's blocks per attention head);
        nothing by default."""

    @torch.no_grad()
    def to_evaluation_point(self, params: dict[str, Tensor]) -> None:
        """``Optimizer.to_evaluation_point`` for the stacked ``params`` (after the last step,
        before the replicas are unstacked); nothing by default."""

    @contextlib.contextmanager
    def at_evaluation_point(self, params: dict[str, Tensor]) -> Iterator[None]:
        """``Optimizer.at_evaluation_point`` for the stacked ``params``: at the evaluation point
        inside the block (``to_evaluation_point``), bit for bit as they were after it (a
        mid-run validation curve, ``train.replicas``). A twin that keeps the default
        ``to_evaluation_point`` (its model is evaluated where it trains) copies nothing."""
        if type(self).to_evaluation_point is BatchedOptimizer.to_evaluation_point:
            yield
            return
        saved = {name: param.detach().clone() for name, param in params.items()}
        self.to_evaluation_point(params)
        try:
            yield
        finally:
            with torch.no_grad():
                for name, param in params.items():
                    param.copy_(saved[name])

    def parameter_lr(self, name: str, lr: Tensor) -> Tensor:
        """This step's learning rates (R,) for parameter ``name``: the step's own, unless an
        optimizer gives a role its own lr (Muon's AdamW groups); its weight decay follows."""
        return lr

    def update(self, name: str, param: Tensor, grad: Tensor, state: dict[str, Tensor],
               lr: Tensor) -> Tensor | None:  # pragma: no cover
        """Update the stacked ``param`` in place at this step's learning rates ``lr`` (R,);
        ``state`` is this parameter's, empty on the first step. Returns the (R,)
        orthogonality error of an orthogonalised update, else None."""
        raise NotImplementedError
