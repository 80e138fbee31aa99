"""The helpers nbaccel.utils adds for Accelerate's names: environment, memory, nested data,
models, files, versions (one process; the collectives are in tests/multiprocess)."""

from __future__ import annotations

import collections
import logging
import os
import pickle
import platform
import socket
from typing import NamedTuple

import numpy as np
import pytest
import torch
from torch import nn

from nbaccel import utils
from nbaccel.enums import CustomDtype


def _oom(batch_size: int, limit: int) -> None:
    if batch_size > limit:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")


def test_find_executable_batch_size_reduces_until_it_fits() -> None:
    tried: list[int] = []

    @utils.find_executable_batch_size(starting_batch_size=32)
    def train(batch_size: int, arg: str) -> tuple[int, str]:
        tried.append(batch_size)
        _oom(batch_size, 20)
        return batch_size, arg

    expected, size = [32], 32
    while size > 20:
        size = int(size * 0.9)
        expected.append(size)
    assert train("x") == (expected[-1], "x")
    assert tried == expected


def test_find_executable_batch_size_custom_reduction_zero_and_other_errors() -> None:
    sizes = iter([16, 0])
    tried: list[int] = []

    @utils.find_executable_batch_size(
        starting_batch_size=32, reduce_batch_size_fn=lambda: next(sizes)
    )
    def never_fits(batch_size: int) -> None:
        tried.append(batch_size)
        _oom(batch_size, 0)

    with pytest.raises(RuntimeError, match="No executable batch size found, reached zero"):
        never_fits()
    assert tried == [32, 16]

    @utils.find_executable_batch_size(starting_batch_size=8)
    def broken(batch_size: int) -> None:
        raise ValueError("Oops, we had an error!")

    with pytest.raises(ValueError, match="Oops"):
        broken()

    @utils.find_executable_batch_size(starting_batch_size=8)
    def takes_two(batch_size: int, arg1: str) -> None:
        pass

    with pytest.raises(TypeError, match="Batch size was passed into `takes_two`"):
        takes_two(8, "hello")


def test_release_memory_returns_nones_and_clear_device_cache_runs() -> None:
    a, b = torch.ones(4), torch.ones(4)
    assert utils.release_memory(a, b) == [None, None]
    utils.clear_device_cache(garbage_collection=True)


def test_patch_and_clear_environment_restore_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NBACCEL_T_KEEP", "old")
    monkeypatch.delenv("NBACCEL_T_NEW", raising=False)
    with utils.patch_environment(nbaccel_t_keep=1, nbaccel_t_new="x"):
        assert os.environ["NBACCEL_T_KEEP"] == "1"
        assert os.environ["NBACCEL_T_NEW"] == "x"
    assert os.environ["NBACCEL_T_KEEP"] == "old"
    assert "NBACCEL_T_NEW" not in os.environ
    before = dict(os.environ)
    with utils.clear_environment():
        assert dict(os.environ) == {}
        os.environ["NBACCEL_T_INSIDE"] = "1"
    assert dict(os.environ) == before


def test_purge_accelerate_environment_function_and_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_T_OLD", "1")

    @utils.purge_accelerate_environment
    def sets_variables() -> None:
        os.environ["ACCELERATE_T_NEW"] = "fp16"
        os.environ["ACCELERATE_T_OLD"] = "2"

    sets_variables()
    assert "ACCELERATE_T_NEW" not in os.environ
    assert os.environ["ACCELERATE_T_OLD"] == "1"

    @utils.purge_accelerate_environment
    class Base:
        def test_a(self) -> None:
            os.environ["ACCELERATE_T_A"] = "1"

    class Child(Base):
        def test_b(self) -> None:
            os.environ["ACCELERATE_T_B"] = "1"

    Child().test_a()
    Child().test_b()
    assert "ACCELERATE_T_A" not in os.environ and "ACCELERATE_T_B" not in os.environ


def test_env_parsing_helpers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert utils.str_to_bool("YES") == 1 and utils.str_to_bool("off", to_bool=True) is False
    with pytest.raises(ValueError, match="invalid truth value"):
        utils.str_to_bool("maybe")
    monkeypatch.setenv("NBACCEL_T_FLAG", "true")
    monkeypatch.setenv("NBACCEL_T_INT", "3")
    assert utils.parse_flag_from_env("NBACCEL_T_FLAG") is True
    assert utils.parse_flag_from_env("NBACCEL_T_UNSET", default=True) is True
    assert utils.parse_choice_from_env("NBACCEL_T_UNSET") == "no"
    assert utils.get_int_from_env(["NBACCEL_T_UNSET", "NBACCEL_T_INT"], 7) == 3
    with caplog.at_level(logging.WARNING):
        lines = utils.convert_dict_to_env_variables({"A": "1", "BAD": "<x", "B": "2"})
    assert lines == ["A=1\n", "B=2\n"]
    assert "BAD" in caplog.text


@pytest.mark.parametrize(("release", "warns"), [("4.19.0-1-amd64", True), ("6.8.0-45", False)])
def test_check_os_kernel(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, release: str, warns: bool
) -> None:
    real = platform.uname()
    monkeypatch.setattr(platform, "uname", lambda: real._replace(system="Linux", release=release))
    with caplog.at_level(logging.WARNING):
        utils.check_os_kernel()
    assert ("below the recommended minimum of 5.5.0" in caplog.text) is warns
    assert not warns or release.split("-")[0] in caplog.records[0].msg


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


def test_nested_helpers() -> None:
    data = {"x": [torch.zeros(3, 4, 4)], "y": Pair(torch.ones(2), torch.ones(2))}
    assert utils.find_device(data) == torch.device("cpu")
    assert utils.find_device({"k": "no tensor"}) is None
    assert utils.is_namedtuple(data["y"]) and not utils.is_namedtuple((1, 2))
    padded = utils.pad_input_tensors(data["x"], batch_size=3, num_processes=4)
    assert padded[0].shape == (4, 4, 4) and padded[0][3].abs().sum() == 0
    with pytest.raises(TypeError):
        utils.pad_input_tensors(["text"], batch_size=3, num_processes=4)
    structure = utils.get_data_structure(data)
    assert utils.is_tensor_information(structure["x"][0])
    rebuilt = utils.initialize_tensors(structure)
    assert rebuilt["y"].a.shape == (2,) and isinstance(rebuilt["y"], Pair)
    nested = torch.nested.nested_tensor([torch.ones(3), torch.ones(1)], layout=torch.jagged)
    with pytest.warns(utils.CannotPadNestedTensorWarning):
        assert utils.pad_across_processes(nested) is nested


def test_convert_outputs_to_fp32_wraps_and_refuses_pickling() -> None:
    model = nn.Linear(2, 2).to(torch.bfloat16)
    forward = utils.convert_outputs_to_fp32(model.forward)
    assert forward(torch.ones(1, 2, dtype=torch.bfloat16)).dtype == torch.float32
    assert forward.__wrapped__.model_forward == model.forward  # type: ignore[attr-defined]
    with pytest.raises(pickle.PicklingError, match="keep_fp32_wrapper=False"):
        pickle.dumps(forward.__wrapped__)  # type: ignore[attr-defined]
    model._original_forward = model.forward  # how Accelerate records the wrapped forward
    model.forward = forward  # type: ignore[method-assign]
    unwrapped = utils.extract_model_from_parallel(model, keep_fp32_wrapper=False)
    pickle.loads(pickle.dumps(unwrapped))
    assert unwrapped(torch.ones(1, 2, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_extract_model_from_parallel_peels_wrappers_and_keeps_compile() -> None:
    inner = nn.Linear(2, 2)
    compiled = torch.compile(nn.DataParallel(inner))
    assert utils.is_compiled_module(compiled)
    kept = utils.extract_model_from_parallel(compiled)
    assert kept is compiled and kept._orig_mod is inner
    assert utils.extract_model_from_parallel(compiled, keep_torch_compile=False) is inner
    stack = nn.Sequential(nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)]))
    regional = utils.compile_regions(stack)
    assert utils.has_compiled_regions(regional) and not utils.is_compiled_module(regional)
    assert utils.extract_model_from_parallel(regional, keep_torch_compile=False) is stack


def test_model_helpers() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU()))
    names = [n for n, _ in utils.get_module_children_bottom_up(model, return_fqns=True)]
    assert names[-1] == "" and names.index("1.0") < names.index("1")
    assert utils.recursive_getattr(model, "0.weight") is model[0].weight
    assert utils.get_pretty_name(model) == "Sequential"
    assert utils.merge_dicts({"a": {"b": 1}}, {"a": {"c": 2}}) == {"a": {"b": 1, "c": 2}}
    weight = torch.ones(4)
    assert utils.id_tensor_storage(weight[:2]) == utils.id_tensor_storage(weight)
    cleaned = utils.clean_state_dict_for_safetensors({"a": weight, "b": weight, "c": weight * 2})
    assert sorted(cleaned) == ["a", "c"]
    assert not utils.is_peft_model(model)
    with utils.init_empty_weights():
        empty = nn.BatchNorm1d(4)
    assert empty.weight.device.type == "meta" and empty.running_mean.device.type == "cpu"
    with utils.init_empty_weights(include_buffers=True):
        empty = nn.BatchNorm1d(4)
    assert empty.running_mean.device.type == "meta"


def test_sizes_and_versions() -> None:
    assert utils.convert_file_size_to_int("1MiB") == 2**20
    assert utils.convert_file_size_to_int("5GB") == 5 * 10**9
    assert utils.convert_file_size_to_int("8Mb") == 10**6
    with pytest.raises(ValueError, match="not in a valid format"):
        utils.convert_file_size_to_int("lots")
    assert utils.dtype_byte_size(torch.float16) == 2 and utils.dtype_byte_size(torch.bool) == 1 / 8
    assert utils.dtype_byte_size(CustomDtype.INT4) == 1 / 2
    assert utils.convert_bytes(1536) == "1.5 KB"
    assert utils.is_torch_version(">=", "2.0") and not utils.is_torch_version("<", "1.0")
    assert utils.compare_versions("numpy", ">=", "1.0")
    assert utils.is_cuda_available() is (torch.cuda.device_count() > 0)
    assert utils.are_libraries_initialized("torch", "not_a_module") == ["torch"]


def test_is_port_in_use() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert utils.is_port_in_use(server.getsockname()[1])


def test_save_and_load_one_file(tmp_path: os.PathLike[str]) -> None:
    state = {"w": torch.arange(3.0), "rng": np.random.get_state()[1][:4]}
    utils.save(state, os.path.join(tmp_path, "plain.pt"))
    loaded = utils.load(os.path.join(tmp_path, "plain.pt"))
    assert torch.equal(loaded["w"], state["w"]) and (loaded["rng"] == state["rng"]).all()
    shared = torch.ones(2)
    tensors = collections.OrderedDict(a=shared, b=shared)
    utils.save(tensors, os.path.join(tmp_path, "m.safetensors"), safe_serialization=True)
    from safetensors.torch import load_file

    assert sorted(load_file(os.path.join(tmp_path, "m.safetensors"))) == ["a"]
