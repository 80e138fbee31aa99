"""Tied parameters survive a device move that replaces parameters (as moves to XLA do)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

from nbaccel.modeling import find_tied_parameters, move_model_to_device, retie_parameters


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight


@pytest.fixture
def replacing_moves() -> Iterator[None]:
    """Make .to() build new parameters instead of changing them in place (what XLA does)."""
    before = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    yield
    torch.__future__.set_overwrite_module_params_on_conversion(before)


def test_find_tied_parameters() -> None:
    assert find_tied_parameters(TiedLM()) == [["embed.weight", "head.weight"]]
    assert find_tied_parameters(nn.Linear(2, 2)) == []


def test_a_replacing_move_unties_and_move_model_to_device_reties(replacing_moves: None) -> None:
    plain = TiedLM()
    plain.to(torch.float64)
    assert plain.head.weight is not plain.embed.weight  # the move broke the tie

    moved = move_model_to_device(TiedLM(), torch.float64)
    assert moved.head.weight is moved.embed.weight
    assert moved.embed.weight.dtype == torch.float64
    # training one updates the other
    moved.embed.weight.data.zero_()
    assert moved.head.weight.abs().sum().item() == 0


def test_retie_parameters_restores_identity() -> None:
    model = TiedLM()
    tied = find_tied_parameters(model)
    model.head.weight = nn.Parameter(model.embed.weight.detach().clone())
    assert find_tied_parameters(model) == []
    retie_parameters(model, tied)
    assert model.head.weight is model.embed.weight


def test_prepare_points_optimizers_at_parameters_a_move_replaced(replacing_moves: None) -> None:
    # what a move to the XLA device does: new parameter objects; the optimizer built from the
    # old ones must follow them, or it would update copies the model no longer uses
    from nbaccel import Accelerator

    accelerator = Accelerator(cpu=True)
    first, second = TiedLM(), nn.Linear(4, 2)
    early = torch.optim.SGD(second.parameters(), lr=1.0)
    early = accelerator.prepare(early)  # prepared before its model
    optimizer = torch.optim.SGD(first.parameters(), lr=1.0)
    originals = list(first.parameters())
    first, optimizer, second = accelerator.prepare(first, optimizer, second)
    assert all(new is not old for new, old in zip(first.parameters(), originals, strict=True))
    assert optimizer.param_groups[0]["params"] == list(first.parameters())
    assert early.param_groups[0]["params"] == list(second.parameters())
    assert first.head.weight is first.embed.weight
    before = first.embed.weight.detach().clone()
    first.head(first.body(first.embed(torch.tensor([1, 2])))).sum().backward()
    optimizer.step()
    assert not torch.equal(first.embed.weight, before)  # the model itself trained
