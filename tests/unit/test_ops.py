"""nbaccel.ops on one process: nested helpers, identity collectives, argument errors, XLA wiring."""

from __future__ import annotations

import subprocess
import sys
import types
from collections import OrderedDict, defaultdict, namedtuple
from typing import Any

import pytest
import torch

import nbaccel.ops.collectives as collectives
from nbaccel.enums import DistributedType
from nbaccel.ops import (
    REDUCTIONS,
    broadcast,
    broadcast_object_list,
    concatenate,
    convert_to_fp32,
    find_batch_size,
    find_device,
    gather,
    gather_object,
    has_only_tensors,
    honor_type,
    ignorant_find_batch_size,
    is_namedtuple,
    listify,
    pad_across_processes,
    recursively_apply,
    reduce,
    send_to_device,
    slice_tensors,
    truncate,
)
from nbaccel.ops.exchange import Context, Layout, flatten_tensors

Point = namedtuple("Point", ["x", "y"])


def nested() -> dict[str, Any]:
    return OrderedDict(
        a=torch.ones(2, 3),
        b=[torch.zeros(2), (torch.arange(2), Point(torch.ones(2), torch.ones(2, 1)))],
        d=defaultdict(list, {"k": torch.full((2,), 5.0)}),  # type: ignore[arg-type]
    )


# --- nested helpers ---------------------------------------------------------------------------


def test_recursively_apply_keeps_every_container_type() -> None:
    out = recursively_apply(lambda t, k: t * k, nested(), 2)
    assert type(out) is OrderedDict and list(out) == ["a", "b", "d"]
    assert type(out["b"]) is list and type(out["b"][1]) is tuple
    assert type(out["b"][1][1]) is Point and out["b"][1][1].x.tolist() == [2.0, 2.0]
    assert type(out["d"]) is defaultdict and out["d"].default_factory is list
    assert out["d"]["k"].tolist() == [10.0, 10.0] and out["a"].eq(2).all()


def test_recursively_apply_other_types() -> None:
    data = {"t": torch.ones(1), "name": "x", "n": 3}
    out = recursively_apply(lambda t: t + 1, data)
    assert out["name"] == "x" and out["n"] == 3 and out["t"].item() == 2
    with pytest.raises(TypeError) as raised:
        recursively_apply(torch.tensor, (torch.tensor(1), 1), error_on_other_type=True)
    assert str(raised.value) == (  # Accelerate's exact wording
        "Unsupported types (<class 'int'>) passed to `tensor`. Only nested list/tuple/dicts of "
        "objects that are valid for `is_torch_tensor` should be passed."
    )
    with pytest.raises(TypeError, match=r"Unsupported types \(<class 'str'>\)"):
        recursively_apply(lambda t: t, data, error_on_other_type=True)
    out = recursively_apply(str.upper, ["a", ("b",)], test_type=lambda o: isinstance(o, str))
    assert out == ["A", ("B",)]


def test_honor_type_and_is_namedtuple() -> None:
    assert honor_type(Point(1, 2), iter([3, 4])) == Point(3, 4)
    assert honor_type((1, 2), (x for x in [5])) == (5,)
    assert is_namedtuple(Point(1, 2)) and not is_namedtuple((1, 2))
    result = torch.tensor([[1.0, 3.0]]).max(dim=1)  # a torch.return_types structseq
    rebuilt = recursively_apply(lambda t: t + 1, result)
    assert type(rebuilt) is torch.return_types.max
    assert rebuilt.values.item() == 4.0 and rebuilt.indices.item() == 2


def test_send_to_device_moves_nested_and_skips_keys() -> None:
    class Movable:
        def __init__(self) -> None:
            self.where = "cpu"

        def to(self, device: Any) -> Movable:  # no non_blocking parameter
            self.where = str(device)
            return self

    data = {"x": torch.ones(2), "keep": torch.ones(1), "m": Movable(), "p": Point(torch.ones(1), 7)}
    out = send_to_device(data, "meta", skip_keys="keep")
    assert out["x"].device.type == "meta" and out["keep"].device.type == "cpu"
    assert out["m"].where == "meta" and type(out["p"]) is Point and out["p"].y == 7
    assert out["p"].x.device.type == "meta"
    out = send_to_device([data], torch.device("meta"), non_blocking=True, skip_keys=["x", "keep"])
    assert out[0]["x"].device.type == "cpu" and out[0]["keep"].device.type == "cpu"


def test_find_batch_size_and_device() -> None:
    assert find_batch_size(nested()) == 2
    assert find_batch_size([{"ids": torch.ones(7, 3)}]) == 7
    with pytest.raises(ValueError, match="empty list"):
        find_batch_size([])
    with pytest.raises(TypeError, match="got str"):
        find_batch_size({"text": "hello"})
    with pytest.raises(ValueError, match="0-d"):
        find_batch_size(torch.tensor(1.0))
    assert ignorant_find_batch_size({}) is None and ignorant_find_batch_size([torch.ones(4)]) == 4
    assert find_device({"a": "x", "b": [torch.ones(1, device="meta")]}) == torch.device("meta")
    assert find_device(["no tensors"]) is None


def test_concatenate_slice_listify_fp32() -> None:
    parts = [
        {"x": torch.ones(2, 2), "y": (torch.zeros(1),)},
        {"x": torch.zeros(3, 2), "y": (torch.ones(2),)},
    ]
    out = concatenate(parts)
    assert (
        out["x"].shape == (5, 2) and type(out["y"]) is tuple and out["y"][0].tolist() == [0, 1, 1]
    )
    assert concatenate([torch.ones(2, 1), torch.ones(2, 2)], dim=1).shape == (2, 3)
    with pytest.raises(ValueError, match="empty"):
        concatenate([])
    with pytest.raises(TypeError, match="only join tensors"):
        concatenate([1, 2])
    marker = object()  # a lone non-tensor comes back unchanged, as in Accelerate
    assert concatenate([marker]) is marker and concatenate([None]) is None
    assert concatenate([{"ids": "text", "x": torch.ones(1)}])["ids"] == "text"
    sliced = slice_tensors(nested(), slice(0, 1))
    assert sliced["a"].shape == (1, 3) and sliced["b"][1][1].y.shape == (1, 1)
    assert listify({"v": torch.tensor([1.5], dtype=torch.bfloat16), "n": [torch.tensor(2)]}) == {
        "v": [1.5],
        "n": [2],
    }
    half = convert_to_fp32(
        {"h": torch.ones(1, dtype=torch.float16), "i": torch.ones(1, dtype=torch.int8)}
    )
    assert half["h"].dtype == torch.float32 and half["i"].dtype == torch.int8


def test_truncate_tensors_and_samples() -> None:
    data = (torch.arange(6), {"labels": torch.arange(6).reshape(6, 1)})
    out = truncate(data, 4)
    assert type(out) is tuple and out[0].tolist() == [0, 1, 2, 3]
    assert out[1]["labels"].shape == (4, 1)
    assert truncate(["a", "b", "c"], 2) == ["a", "b"] and truncate(("a",), 5) == ("a",)
    assert truncate(torch.arange(3), 0).numel() == 0
    with pytest.raises(ValueError, match="0 or more"):
        truncate(torch.arange(3), -1)
    with pytest.raises(TypeError, match="must be an int"):
        truncate(torch.arange(3), 2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="nested tensors or a list"):
        truncate("abc", 1)


def test_has_only_tensors() -> None:
    assert has_only_tensors(nested()) and has_only_tensors(torch.ones(1))
    assert not has_only_tensors([]) and not has_only_tensors([torch.ones(1), "x"])


# --- collectives on one process ----------------------------------------------------------------


def test_collectives_return_their_input_on_one_process() -> None:
    data = nested()
    assert gather(data) is data
    scalar = torch.tensor(3.0)
    assert gather(scalar) is scalar
    assert pad_across_processes(data, dim=1, pad_index=-1, pad_first=True) is data
    assert broadcast(data) is data
    objects = [1, "two"]
    assert gather_object(objects) is objects and gather_object(5) == [5]
    assert broadcast_object_list(objects) is objects and objects == [1, "two"]


def test_reduce_on_one_process_copies() -> None:
    data = {"x": torch.tensor([2.0, 4.0]), "n": [torch.tensor(3)]}
    for reduction in REDUCTIONS:
        out = reduce(data, reduction)
        assert out["x"] is not data["x"] and out["x"].tolist() == [2.0, 4.0]
    assert reduce(data, "sum", scale=0.5)["x"].tolist() == [1.0, 2.0]
    assert reduce(data, "sum")["n"][0].dtype == torch.int64
    assert reduce(data)["n"][0].is_floating_point()  # a mean is a float, as with many processes


# typed Any so that the type checker lets the tests pass wrong types on purpose
NOT_A_NUMBER: Any = "2"
A_TUPLE: Any = (1,)
A_FLOAT: Any = 1.0


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: reduce(torch.ones(1), "avg"), ValueError, r"'avg'.*'sum', 'mean', 'none'"),
        (lambda: reduce(torch.ones(1), scale=NOT_A_NUMBER), TypeError, "scale"),
        (lambda: broadcast(torch.ones(1), from_process=1), ValueError, r"from_process=1.*0\.\.0"),
        (lambda: broadcast(torch.ones(1), from_process=NOT_A_NUMBER), TypeError, "must be an int"),
        (lambda: broadcast_object_list([1], from_process=-1), ValueError, "out of range"),
        (lambda: broadcast_object_list(A_TUPLE), TypeError, r"needs a list.*\[value\]"),
        (lambda: pad_across_processes(torch.ones(1), dim=A_FLOAT), TypeError, "dim"),
        (lambda: pad_across_processes(torch.ones(1), pad_index=None), TypeError, "pad_index"),
        (lambda: gather({"name": "x"}), TypeError, r"data\['name'\] \(str\).*gather_object"),
        (lambda: reduce([torch.ones(1), 3]), TypeError, r"data\[1\] \(int\)"),
    ],
)
def test_bad_arguments(call: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_layout_round_trip_and_paths() -> None:
    tensors, others = flatten_tensors({"a": [torch.ones(2, 3), "s"], "b": torch.tensor(1)})
    assert [p for p, _ in tensors] == ["data['a'][0]", "data['b']"] and others == [
        "data['a'][1] (str)"
    ]
    layout = Layout.of(tensors)
    assert Layout.decode(layout.encode()) == layout
    assert layout.shape(0) == (2, 3) and layout.shape(1) == () and layout.dtype(1) == "int64"


def test_no_torch_xla_import_without_xla() -> None:
    code = (
        "import sys, torch; from nbaccel.ops import gather, reduce, broadcast, gather_object;"
        "gather(torch.ones(1)); reduce(torch.ones(1)); broadcast(torch.ones(1)); gather_object(1);"
        "assert 'torch_xla' not in sys.modules, 'torch_xla was imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# --- the XLA path, against a stand-in xla_model where the other replica holds the same data -----


@pytest.fixture
def fake_xla(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    xm = types.ModuleType("torch_xla.core.xla_model")
    xm.REDUCE_SUM = "sum"  # type: ignore[attr-defined]
    xm.mark_step = lambda: calls.append("mark_step")  # type: ignore[attr-defined]

    def all_gather(tensor: torch.Tensor) -> torch.Tensor:
        calls.append("all_gather")
        return torch.cat([tensor, tensor])

    xm.all_gather = all_gather  # type: ignore[attr-defined]

    def all_reduce(kind: str, tensors: list[torch.Tensor], scale: float) -> None:
        calls.append(f"all_reduce:{kind}")
        for t in tensors:
            t.mul_(2 * scale)

    def mesh_reduce(tag: str, data: Any, fn: Any) -> Any:
        calls.append(f"mesh_reduce:{tag}")
        return fn([data, data])

    xm.all_reduce = all_reduce  # type: ignore[attr-defined]
    xm.mesh_reduce = mesh_reduce  # type: ignore[attr-defined]
    root, core = types.ModuleType("torch_xla"), types.ModuleType("torch_xla.core")
    root.core, core.xla_model = core, xm  # type: ignore[attr-defined]
    for name, module in (
        ("torch_xla", root),
        ("torch_xla.core", core),
        ("torch_xla.core.xla_model", xm),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    ctx = Context(DistributedType.XLA, 2, 0, torch.device("cpu"), "xla")
    monkeypatch.setattr(collectives, "context", lambda: ctx)
    return calls


def test_xla_collectives(fake_xla: list[str]) -> None:
    out = gather({"x": torch.tensor(1.0), "y": [torch.ones(2, 2)]})
    assert out["x"].tolist() == [1.0, 1.0] and out["y"][0].shape == (4, 2)
    assert fake_xla[:2] == ["mesh_reduce:nbaccel.ops.gather", "all_gather"]
    assert reduce(torch.tensor([3.0]), "mean", scale=2.0).tolist() == [6.0]
    assert "all_reduce:sum" in fake_xla
    assert broadcast({"w": torch.ones(1)}, from_process=1)["w"].tolist() == [1.0]
    assert gather_object(["a"]) == ["a", "a"]
    assert broadcast_object_list([7], from_process=1) == [7]
