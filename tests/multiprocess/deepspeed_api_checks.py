"""More rank-side DeepSpeed checks (registered with deepspeed_checks' list, run in the same
launch): Accelerate's config templates, named plugins, ZeRO-3's shards and gathered weights,
schedulers, bad input refused before any engine exists, and free_memory."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from deepspeed_checks import LR, MICRO, Net, check, loader, prepared, same, train
from safetensors.torch import load_file
from torch import nn

from nbaccel import Accelerator, PartialState
from nbaccel.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler
from tests.support.deepspeed_configs import TEMPLATES, template


def template_check(name: str) -> None:
    def trains(root: str) -> None:
        plugin = DeepSpeedPlugin(hf_ds_config=template(name))
        acc = Accelerator(deepspeed_plugin=plugin)
        model = Net()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        opt = DummyOptim(model.parameters(), lr=LR)
        sched = DummyScheduler(opt, total_num_steps=16, warmup_num_steps=2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine, opt, data, sched = acc.prepare(model, opt, loader(), sched)
        assert any("enables fp16" in str(w.message) for w in caught), [str(w) for w in caught]
        config = plugin.deepspeed_config
        assert config["train_micro_batch_size_per_gpu"] == MICRO
        assert config["zero_optimization"]["reduce_bucket_size"] == 16 * 16
        assert config["optimizer"]["params"]["lr"] == LR
        assert config["scheduler"]["params"]["total_num_steps"] == 16 // acc.num_processes
        assert engine.zero_optimization_stage() == int(name[4])
        assert engine.zero_cpu_offload() == name.endswith("offload")
        lrs = []
        for x, y in data:
            acc.backward(nn.functional.mse_loss(engine(x), y))
            opt.step()
            sched.step()
            opt.zero_grad()
            lrs.append(sched.get_last_lr()[0])
        assert lrs[0] < lrs[1], lrs  # DeepSpeed's warm-up ran, stepped by the engine
        after = acc.get_state_dict(engine)
        if PartialState().is_main_process:
            assert all(torch.isfinite(v).all() for v in after.values())
            assert any(not torch.equal(after[k], before[k]) for k in before)

    trains.__name__ = f"template_{name}_trains"
    check(trains)


for _name in TEMPLATES:
    template_check(_name)


@check
def zero3_holds_half_the_parameters_and_gathers_them_whole(root: str) -> None:
    acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3))
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(8, 512), nn.ReLU(), nn.Linear(512, 512), nn.Linear(512, 1))
    full = {k: v.clone() for k, v in model.state_dict().items()}
    total = sum(v.numel() for v in full.values())
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    engine, opt, _ = acc.prepare(model, opt, loader())
    world = acc.num_processes
    params = list(engine.module.parameters())
    held = sum(p.ds_tensor.numel() for p in params)
    assert all(p.numel() == 0 for p in params), "a parameter stayed whole on this rank"
    assert total / world <= held <= total / world + world * len(params), (held, total)
    moments = sum(
        t.numel()
        for state in opt.optimizer.optimizer.state.values()
        for t in state.values()
        if torch.is_tensor(t) and t.dim() > 0
    )
    assert moments <= 2 * (total / world + world * len(params)), (moments, total)
    gathered = acc.get_state_dict(engine)
    if acc.is_main_process:
        same(gathered, full, atol=0.0)
    else:
        assert gathered == {}
    target = Path(root) / "zero3_model"
    acc.save_model(engine, target)
    acc.wait_for_everyone()
    same(load_file(target / "model.safetensors"), full, atol=0.0)


@check
def named_plugins_build_one_engine_each(root: str) -> None:
    teacher_config = {"train_micro_batch_size_per_gpu": MICRO, "zero_optimization": {"stage": 3}}
    plugins = {
        "student": DeepSpeedPlugin(zero_stage=2),
        "teacher": DeepSpeedPlugin(hf_ds_config=teacher_config),
    }
    acc = Accelerator(deepspeed_plugins=plugins)
    assert acc.deepspeed_plugin is plugins["student"] and plugins["student"].selected
    assert acc.state.get_deepspeed_plugin("teacher") is plugins["teacher"]
    model = Net()
    student, opt, data = acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=LR), loader())
    acc.state.select_deepspeed_plugin("teacher")
    assert acc.deepspeed_plugin is plugins["teacher"] and not plugins["student"].selected
    teacher = acc.prepare(Net(seed=1))
    assert teacher.zero_optimization_stage() == 3 and student.zero_optimization_stage() == 2
    assert acc.deepspeed_engine_wrapped.engine is student
    for x, y in data:
        with torch.no_grad():
            target = teacher(x)
        acc.backward(nn.functional.mse_loss(student(x), target + y))
        opt.step()
        opt.zero_grad()
    assert student.global_steps == len(data)


@check
def a_torch_scheduler_follows_the_engines_steps(root: str) -> None:
    acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    engine, opt, data, sched = acc.prepare(model, opt, loader(), sched)
    for x, y in list(data)[:2]:
        acc.backward(nn.functional.mse_loss(engine(x), y))
        opt.step()
        sched.step()
        opt.zero_grad()
    # stepped once per process on each optimizer step, as without DeepSpeed
    assert sched.get_last_lr()[0] == LR * 0.5 ** (2 * acc.num_processes)


@check
def bad_input_is_refused_before_any_engine(root: str) -> None:
    cases = [
        (
            {"train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 2}},
            "train_micro_batch_size_per_gpu=3 contradicts the data loader",
            None,
        ),
        (
            {"train_batch_size": 5, "zero_optimization": {"stage": 2}},
            "train_batch_size=5 contradicts",
            None,
        ),
        ({"zero_optimization": {"stage": 2}}, "DummyOptim, but the DeepSpeed config", "dummy"),
        (
            {"optimizer": {"type": "AdamW", "params": {"lr": 0.1}}, "zero_optimization": {}},
            "names an optimizer and prepare() got one too",
            None,
        ),
    ]
    for config, message, optimizer in cases:
        acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config))
        model = Net()
        opt = DummyOptim(model.parameters()) if optimizer else torch.optim.SGD(model.parameters())
        try:
            acc.prepare(model, opt, loader())
        except ValueError as exc:
            assert message in str(exc), (message, str(exc))
        else:
            raise AssertionError(f"not refused: {config}")
        assert acc.strategy.engines == [] and acc._models == []
        acc.state._reset_state()
    acc = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    model = Net()
    try:
        acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    except ValueError as exc:
        assert "needs a data loader" in str(exc), str(exc)
    else:
        raise AssertionError("a model without a loader and an 'auto' micro batch was accepted")


@check
def free_memory_releases_the_engines(root: str) -> None:
    acc, engine, opt, data = prepared(DeepSpeedPlugin(zero_stage=2))
    train(acc, engine, opt, data, range(0, 1))
    assert acc.deepspeed_engine_wrapped is not None
    acc.free_memory()
    assert acc.deepspeed_engine_wrapped is None and acc.strategy.engines == []
    assert acc._models == [] and acc._optimizers == []
    model = Net()
    foreign = torch.optim.AdamW(Net().parameters())
    try:
        acc.prepare(model, foreign, loader())
    except ValueError as exc:
        assert "not the parameters of the Net" in str(exc), str(exc)
    else:
        raise AssertionError("an optimizer of another model was accepted")
    engine, opt, data = acc.prepare(model, torch.optim.AdamW(model.parameters()), loader())
    train(acc, engine, opt, data, range(0, 1))
    assert engine.global_steps == 1
    json.dumps(acc.deepspeed_plugin.deepspeed_config, default=str)
