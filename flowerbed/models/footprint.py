"""What a model takes in memory, read off the model itself on torch's meta device.

The pre-flight's estimate (``runtime.needs``) sizes a run before anything is built; these functions
give it the model's part without a second description of each architecture, so a new model
needs no pre-flight edit. Each takes a model built on the meta device (shapes only: nothing
is computed or allocated) and one sample's input shape:

* ``parameter_count``: the model's parameters;
* ``activations``: one sample through the model in evaluation mode, without gradients, and
  two numbers of it: ``kept``, the values of every leaf module's output, added up by forward
  hooks (what training keeps for the backward pass), and ``peak_bytes``, the most bytes alive
  at once, followed op by op below autograd (``TorchDispatchMode``): every fresh tensor an op
  returns counts until it is freed, views and in-place results count nothing. The peak sees
  what no module hook sees: the ``(1, m, N)`` distances, masks and ranks of PointNet++'s ball
  query (``models.point_ops``) as much as the input and output of the widest layer.

One sample, not a batch: what does not grow with the batch (an ``arange`` over the points) is
then counted once per sample, at most 0.13 % of the registered models' peaks (measured against
the difference of a batch of two and a batch of one). Every op the registered models use runs
on the meta device, PointNet++'s farthest-point sampling and ball query (``cumsum``,
``scatter_``, ``argmin``) included; an op that cannot (a data-dependent shape, ``.item()``)
raises ``RuntimeError`` or ``NotImplementedError`` here.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode


def parameter_count(model: nn.Module) -> int:
    """The number of values of the model's parameters (buffers not counted)."""
    return sum(parameter.numel() for parameter in model.parameters())


def _tensors(value) -> list[torch.Tensor]:
    """The tensors in ``value``: a tensor, or tuples, lists and dicts of them (an op's
    arguments, a module's output)."""
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [tensor for item in value for tensor in _tensors(item)]
    return []


@dataclass(frozen=True)
class Activations:
    """One sample's activations in one forward pass of a model."""

    kept: int  # values of every leaf module's output: what training keeps for backward
    peak_bytes: int  # the most bytes alive at once without gradients (evaluation)


class _LiveBytes(TorchDispatchMode):
    """Bytes of the tensors that ops return, from their creation until they are freed: the
    current total and its peak. A view or an op's own input (in place) is not new memory."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0

    def _release(self, size: int) -> None:
        self.live -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func.is_view:
            return result
        inputs = {id(tensor) for tensor in _tensors([args, kwargs or {}])}
        for tensor in _tensors(result):
            if id(tensor) not in inputs:
                size = tensor.numel() * tensor.element_size()
                self.live += size
                weakref.finalize(tensor, self._release, size)
        self.peak = max(self.peak, self.live)
        return result


def activations(model: nn.Module, input_shape: tuple[int, ...]) -> Activations:
    """One sample of ``input_shape`` through ``model`` (built on the meta device) in
    evaluation mode and without gradients (batch norm's statistics, dropout's output: the same
    shapes as in training): the values of every leaf module's output (a module called twice
    counts twice), and the most bytes alive at once, the input's included, the parameters'
    not."""
    kept = 0

    def add_output(module, inputs, output):
        nonlocal kept
        kept += sum(tensor.numel() for tensor in _tensors(output))

    leaves = [module for module in model.modules() if not list(module.children())]
    hooks = [module.register_forward_hook(add_output) for module in leaves]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad(), _LiveBytes() as tracker:
            model(torch.empty((1, *input_shape), device="meta"))
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    return Activations(kept, tracker.peak)
