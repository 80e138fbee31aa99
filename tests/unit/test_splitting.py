"""Unit tests for nbaccel.splitting.split_for_process, the arithmetic of split_between_processes."""

from __future__ import annotations

import math
from collections import OrderedDict, defaultdict

import pytest
import torch

from nbaccel.splitting import split_for_process


def shares(inputs, n: int, padding: bool = False) -> list:
    return [split_for_process(inputs, n, i, padding) for i in range(n)]


# --- lists and tuples -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "n", "expected", "padded"),
    [
        (["A", "B", "C"], 2, [["A", "B"], ["C"]], [["A", "B"], ["C", "C"]]),
        (["A", "B", "C", "D"], 2, [["A", "B"], ["C", "D"]], [["A", "B"], ["C", "D"]]),
        ([1, 2, 3], 3, [[1], [2], [3]], [[1], [2], [3]]),
        (
            [0, 1, 2, 3, 4, 5, 6],
            3,
            [[0, 1, 2], [3, 4], [5, 6]],
            [[0, 1, 2], [3, 4, 4], [5, 6, 6]],
        ),
        ([0, 1, 2, 3], 3, [[0, 1], [2], [3]], [[0, 1], [2, 2], [3, 3]]),
        (["x"], 2, [["x"], []], [["x"], ["x"]]),
        (["x", "y"], 3, [["x"], ["y"], []], [["x"], ["y"], ["y"]]),
        (["x"], 3, [["x"], [], []], [["x"], ["x"], ["x"]]),
        ([], 2, [[], []], [[], []]),
        ([], 3, [[], [], []], [[], [], []]),
    ],
)
def test_split_list(items: list, n: int, expected: list, padded: list) -> None:
    assert shares(items, n) == expected
    assert shares(items, n, padding=True) == padded
    assert all(isinstance(s, list) for s in shares(items, n) + shares(items, n, True))


@pytest.mark.parametrize(
    ("items", "n", "expected", "padded"),
    [
        (("A", "B", "C"), 2, [("A", "B"), ("C",)], [("A", "B"), ("C", "C")]),
        ((1, 2, 3, 4, 5), 3, [(1, 2), (3, 4), (5,)], [(1, 2), (3, 4), (5, 5)]),
        (("only",), 3, [("only",), (), ()], [("only",), ("only",), ("only",)]),
        ((), 2, [(), ()], [(), ()]),
    ],
)
def test_split_tuple(items: tuple, n: int, expected: list, padded: list) -> None:
    assert shares(items, n) == expected
    assert shares(items, n, padding=True) == padded
    assert all(isinstance(s, tuple) for s in shares(items, n) + shares(items, n, True))


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("length", range(0, 11))
def test_split_covers_input_in_order_and_padding_evens_lengths(n: int, length: int) -> None:
    items = list(range(length))
    plain = shares(items, n)
    assert [x for share in plain for x in share] == items
    sizes = [len(s) for s in plain]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first ranks take the remainder
    padded = shares(items, n, padding=True)
    assert {len(s) for s in padded} == {math.ceil(length / n)}
    for share, pad in zip(plain, padded, strict=True):
        assert pad[: len(share)] == share
        filler = share[-1:] or items[-1:]
        assert pad[len(share) :] == filler * (len(pad) - len(share))


def test_one_process_returns_the_input_itself() -> None:
    for value in (["a"], ("a",), {"k": [1]}, torch.ones(2), []):
        assert split_for_process(value, 1, 0) is value
        assert split_for_process(value, 1, 0, True) is value


# --- tensors ----------------------------------------------------------------------------------


def test_split_tensor_rows_two_processes() -> None:
    t = torch.arange(10).reshape(5, 2)
    plain = shares(t, 2)
    assert [s.tolist() for s in plain] == [[[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9]]]
    padded = shares(t, 2, padding=True)
    assert [s.tolist() for s in padded] == [
        [[0, 1], [2, 3], [4, 5]],
        [[6, 7], [8, 9], [8, 9]],
    ]
    assert all(isinstance(s, torch.Tensor) and s.dtype == t.dtype for s in plain + padded)


def test_split_tensor_three_processes() -> None:
    t = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert [s.tolist() for s in shares(t, 3)] == [[1.0, 2.0], [3.0], [4.0]]
    assert [s.tolist() for s in shares(t, 3, True)] == [[1.0, 2.0], [3.0, 3.0], [4.0, 4.0]]


def test_split_tensor_more_processes_than_rows() -> None:
    t = torch.tensor([[7, 8]])
    plain = shares(t, 3)
    assert [tuple(s.shape) for s in plain] == [(1, 2), (0, 2), (0, 2)]
    padded = shares(t, 3, True)
    assert [s.tolist() for s in padded] == [[[7, 8]]] * 3


def test_split_empty_tensor() -> None:
    t = torch.empty(0, 3)
    for padding in (False, True):
        assert [tuple(s.shape) for s in shares(t, 2, padding)] == [(0, 3), (0, 3)]


def test_split_zero_dim_tensor_is_rejected() -> None:
    with pytest.raises(ValueError, match="0-d"):
        split_for_process(torch.tensor(3.0), 2, 0)


# --- dicts ------------------------------------------------------------------------------------


def test_split_dict_two_processes() -> None:
    data = {"ids": [1, 2, 3], "mask": (True, False, True), "x": torch.tensor([10, 20, 30])}
    first, second = shares(data, 2)
    assert first["ids"] == [1, 2] and first["mask"] == (True, False)
    assert first["x"].tolist() == [10, 20]
    assert second["ids"] == [3] and second["mask"] == (True,)
    assert second["x"].tolist() == [30]
    first, second = shares(data, 2, padding=True)
    assert second["ids"] == [3, 3]
    assert second["mask"] == (True, True)
    assert second["x"].tolist() == [30, 30]
    assert list(first) == ["ids", "mask", "x"]


def test_split_dict_three_processes_and_more_processes_than_items() -> None:
    data = {"a": ["p", "q"], "b": [0, 1]}
    assert shares(data, 3) == [{"a": ["p"], "b": [0]}, {"a": ["q"], "b": [1]}, {"a": [], "b": []}]
    assert shares(data, 3, True) == [
        {"a": ["p"], "b": [0]},
        {"a": ["q"], "b": [1]},
        {"a": ["q"], "b": [1]},
    ]


def test_split_dict_keeps_its_type() -> None:
    data = OrderedDict(a=[1, 2, 3, 4])
    share = split_for_process(data, 2, 1)
    assert type(share) is OrderedDict
    assert share == OrderedDict(a=[3, 4])


def test_split_empty_dict() -> None:
    assert shares({}, 2) == [{}, {}]


def test_uneven_dict_is_value_error() -> None:
    with pytest.raises(ValueError, match="same length"):
        split_for_process({"a": [1, 2, 3], "b": [1, 2]}, 2, 0)
    with pytest.raises(ValueError, match="same length"):
        split_for_process({"a": torch.zeros(4), "b": [1, 2]}, 3, 1, True)


def test_dict_with_unsplittable_value_is_type_error() -> None:
    with pytest.raises(TypeError, match="inputs\\['b'\\]"):
        split_for_process({"a": [1, 2], "b": 5}, 2, 0)


# --- unsupported types ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", {1, 2}, 5, range(4), (x for x in [1, 2]), None])
def test_unsupported_type_is_type_error(value: object) -> None:
    with pytest.raises(TypeError, match="list, tuple, dict or"):
        split_for_process(value, 2, 0)


def test_split_defaultdict_keeps_its_type() -> None:
    """A dict subclass whose constructor takes a factory first (defaultdict) must split too."""
    data = defaultdict(list, a=[1, 2, 3, 4], b=[5, 6, 7, 8])
    share = split_for_process(data, 2, 1)
    assert isinstance(share, dict)
    assert dict(share) == {"a": [3, 4], "b": [7, 8]}
    assert type(share) is defaultdict
    assert share.default_factory is list
