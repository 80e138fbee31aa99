"""Accelerator in one process: prepare, the training step, precision and housekeeping."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nbaccel
import nbaccel.utils
from nbaccel import Accelerator, GradientAccumulationPlugin, GradScalerKwargs
from nbaccel.optim import AcceleratedOptimizer, AcceleratedScheduler
from nbaccel.testing import reset_state


def tiny(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))


def data(n: int = 12, seed: int = 1) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=gen)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def sgd(model: nn.Module, lr: float = 0.1) -> torch.optim.SGD:
    return torch.optim.SGD(model.parameters(), lr=lr)


def halving(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.StepLR:
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --- prepare ---------------------------------------------------------------------------------


def test_prepare_returns_the_objects_in_the_given_order_and_passes_others_through() -> None:
    acc = Accelerator()
    model = tiny()
    optimizer = sgd(model)
    scheduler = halving(optimizer)
    loader = DataLoader(data(), batch_size=4)
    marker, settings = object(), {"lr": 1}
    out = acc.prepare(scheduler, marker, loader, model, None, optimizer, settings, 7)
    assert isinstance(out[0], AcceleratedScheduler) and out[0].scheduler is scheduler
    assert out[1] is marker
    assert isinstance(out[2], DataLoader) and out[2].dataset is loader.dataset
    assert out[3] is model  # one process: no wrapper
    assert out[4] is None
    assert isinstance(out[5], AcceleratedOptimizer) and out[5].optimizer is optimizer
    assert isinstance(out[5], torch.optim.Optimizer)
    assert out[6] is settings and out[7] == 7


def test_prepare_of_one_object_returns_it_alone() -> None:
    acc = Accelerator()
    model = tiny()
    assert acc.prepare(model) is model
    assert acc.prepare("text") == "text"


def test_prepare_one_kind_at_a_time() -> None:
    acc = Accelerator()
    model = acc.prepare_model(tiny())
    optimizer = acc.prepare_optimizer(sgd(model))
    scheduler = acc.prepare_scheduler(halving(optimizer.optimizer))
    loader = acc.prepare_data_loader(DataLoader(data(), batch_size=4))
    assert isinstance(optimizer, AcceleratedOptimizer)
    assert isinstance(scheduler, AcceleratedScheduler)
    assert len(loader) == 3 and loader.total_batch_size == 4
    assert acc._models == [model] and acc._optimizers == [optimizer]
    assert acc._schedulers == [scheduler] and acc._dataloaders == [loader]


def test_the_prepared_optimizer_shares_the_user_optimizer() -> None:
    acc = Accelerator()
    model = tiny()
    inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer = acc.prepare(inner)
    assert optimizer.param_groups is inner.param_groups
    optimizer.param_groups[0]["lr"] = 0.5
    assert inner.param_groups[0]["lr"] == 0.5
    assert optimizer.defaults["momentum"] == 0.9
    loss_of(model, *data()[:]).backward()
    optimizer.step()
    assert optimizer.state is inner.state and len(inner.state) == 4
    assert optimizer.state_dict()["param_groups"][0]["lr"] == 0.5


def test_an_object_prepared_twice_is_refused() -> None:
    acc = Accelerator()
    model, optimizer, loader = tiny(), None, DataLoader(range(4))
    optimizer = sgd(model)
    p_model, p_opt, p_loader = acc.prepare(model, optimizer, loader)
    for again in (optimizer, p_opt, loader, p_loader):
        with pytest.raises(ValueError, match="already prepared"):
            acc.prepare(again)
    # a prepared model comes back as it is, as in Accelerate (never wrapped twice)
    assert acc.prepare(p_model) is p_model and acc._models == [p_model]
    assert all(o._is_accelerate_prepared for o in (p_model, p_opt, p_loader))


def test_prepared_loader_keeps_the_dataset_and_counts_batches() -> None:
    acc = Accelerator()
    dataset = data(10)
    loader = acc.prepare(DataLoader(dataset, batch_size=3))
    assert loader.dataset is dataset
    assert len(loader) == 4
    assert [len(x) for x, _ in loader] == [3, 3, 3, 1]


def test_skip_first_batches_method_and_functions() -> None:
    acc = Accelerator()
    plain = DataLoader(list(range(10)), batch_size=2)
    loader = acc.prepare(DataLoader(list(range(10)), batch_size=2))
    expected = [[6, 7], [8, 9]]
    for skipper in (acc.skip_first_batches, nbaccel.skip_first_batches):
        assert [b.tolist() for b in skipper(loader, 3)] == expected
    assert nbaccel.utils.skip_first_batches is nbaccel.skip_first_batches
    assert [b.tolist() for b in nbaccel.utils.skip_first_batches(plain, 3)] == expected
    assert len(acc.skip_first_batches(loader, 3)) == 2


# --- the optimizer and scheduler -------------------------------------------------------------


def test_scheduler_steps_with_the_optimizer() -> None:
    acc = Accelerator()
    model = tiny()
    optimizer = sgd(model, lr=0.8)
    model, optimizer, scheduler = acc.prepare(model, optimizer, halving(optimizer))
    x, y = data()[:]
    lrs = []
    for _ in range(3):
        acc.backward(loss_of(model, x, y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        lrs.append(scheduler.get_last_lr()[0])
    assert lrs == [0.4, 0.2, 0.1]


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_scheduler_waits_for_accumulation_and_step_scheduler_with_optimizer_false() -> None:
    def run(**kwargs: Any) -> list[float]:
        reset_state()
        acc = Accelerator(gradient_accumulation_steps=2, **kwargs)
        model = tiny()
        optimizer = sgd(model, lr=0.8)
        model, optimizer, scheduler = acc.prepare(model, optimizer, halving(optimizer))
        x, y = data()[:]
        lrs = []
        for _ in range(4):
            with acc.accumulate(model):
                acc.backward(loss_of(model, x, y))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            lrs.append(scheduler.get_last_lr()[0])
        return lrs

    assert run() == [0.8, 0.4, 0.4, 0.2]
    assert run(step_scheduler_with_optimizer=False) == [0.4, 0.2, 0.1, 0.05]


@pytest.mark.parametrize(("adjust", "count"), [(True, 5), (False, 3)])
def test_adjust_scheduler_counts_the_accumulated_batches(adjust: bool, count: int) -> None:
    plugin = GradientAccumulationPlugin(num_steps=2, adjust_scheduler=adjust)
    acc = Accelerator(gradient_accumulation_plugin=plugin)
    model = tiny()
    optimizer = sgd(model)
    model, optimizer, scheduler = acc.prepare(model, optimizer, halving(optimizer))
    for _ in range(4):
        with acc.accumulate(model):
            acc.backward(loss_of(model, *data()[:]))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    assert scheduler.get_last_lr() == [0.025]  # two real steps either way
    assert scheduler.scheduler._step_count == count


def test_gradient_accumulation_steps_can_be_changed() -> None:
    acc = Accelerator()
    acc.gradient_accumulation_steps = 4
    assert acc.gradient_accumulation_steps == 4
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        acc.gradient_accumulation_steps = 0
    assert acc.gradient_accumulation_steps == 4


def test_fp16_on_the_cpu_trains_as_fp32_without_autocast_or_scaler() -> None:
    """As in Accelerate: fp16 autocast and its gradient scaler run only where the device
    trains in fp16; on the CPU the step is fp32's, bit for bit (the scaler's skipping and
    unscaling are checked where fp16 trains: tests/gpu)."""
    handler = GradScalerKwargs(init_scale=1024.0)
    with pytest.warns(UserWarning, match=r"full precision \(fp32\).*mixed_precision='bf16'"):
        acc = Accelerator(mixed_precision="fp16", kwargs_handlers=[handler])
    assert acc.mixed_precision == "fp16" and acc.scaler is None
    model = tiny()
    optimizer = sgd(model)
    model, optimizer, scheduler = acc.prepare(model, optimizer, halving(optimizer))
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    with acc.autocast():
        assert not torch.is_autocast_enabled("cpu")
        acc.backward(loss_of(model, *data()[:]))
    assert seen == [torch.float32]
    reference = tiny()
    loss_of(reference, *data()[:]).backward()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine.grad, theirs.grad)  # not scaled
    optimizer.step()
    scheduler.step()
    sgd(reference).step()
    assert acc.optimizer_step_was_skipped is False
    assert scheduler.get_last_lr() == [0.05]
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine, theirs)


def test_backward_divides_by_the_accumulation_steps() -> None:
    acc = Accelerator(gradient_accumulation_steps=4)
    model = acc.prepare(tiny())
    acc.backward(loss_of(model, *data()[:]))
    reference = tiny()
    loss_of(reference, *data()[:]).backward()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad / 4)


# --- accumulation ----------------------------------------------------------------------------


def test_accumulate_equals_one_step_on_the_whole_batch() -> None:
    acc = Accelerator(gradient_accumulation_steps=3)
    model = tiny()
    model, optimizer = acc.prepare(model, sgd(model))
    x, y = data(12)[:]
    syncs = []
    for i in range(3):
        with acc.accumulate(model):
            acc.backward(loss_of(model, x[4 * i : 4 * i + 4], y[4 * i : 4 * i + 4]))
            syncs.append(acc.sync_gradients)
            optimizer.step()
            optimizer.zero_grad()
    assert syncs == [False, False, True]
    reference = tiny()
    loss_of(reference, x, y).backward()
    sgd(reference).step()
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize(
    ("plugin", "expected"),
    [
        (GradientAccumulationPlugin(num_steps=2), [False, True, False, True, True]),
        (GradientAccumulationPlugin(num_steps=4), [False, False, False, True, True]),
        (
            GradientAccumulationPlugin(num_steps=2, sync_with_dataloader=False),
            [False, True, False, True, False],
        ),
    ],
    ids=["2-steps", "4-steps", "no-sync-with-dataloader"],
)
def test_the_last_batch_of_an_epoch_synchronises(
    plugin: GradientAccumulationPlugin, expected: list[bool]
) -> None:
    acc = Accelerator(gradient_accumulation_plugin=plugin)
    model = tiny()
    model, optimizer, loader = acc.prepare(model, sgd(model), DataLoader(data(10), batch_size=2))
    syncs = []
    for x, y in loader:
        with acc.accumulate(model):
            acc.backward(loss_of(model, x, y))
            syncs.append(acc.sync_gradients)
            optimizer.step()
            optimizer.zero_grad()
    assert syncs == expected


def test_zero_grad_waits_while_accumulating() -> None:
    acc = Accelerator(gradient_accumulation_steps=2)
    model = tiny()
    model, optimizer = acc.prepare(model, sgd(model))
    with acc.accumulate(model):
        acc.backward(loss_of(model, *data()[:]))
        optimizer.zero_grad()
        assert all(p.grad is not None for p in model.parameters())
    with acc.accumulate(model):
        optimizer.zero_grad()
        assert all(p.grad is None for p in model.parameters())


def test_no_sync_in_one_process_is_harmless() -> None:
    acc = Accelerator()
    model = acc.prepare(tiny())
    with acc.no_sync(model):
        acc.backward(loss_of(model, *data()[:]))
    assert all(p.grad is not None for p in model.parameters())


# --- precision -------------------------------------------------------------------------------


def dtypes_inside(model: nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            layer.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    return seen


def test_bf16_autocast_context() -> None:
    acc = Accelerator(mixed_precision="bf16")
    layer = nn.Linear(3, 3)
    with acc.autocast():
        assert layer(torch.ones(2, 3)).dtype == torch.bfloat16
    assert layer(torch.ones(2, 3)).dtype == torch.float32


def test_bf16_prepared_model_computes_in_bf16_and_returns_fp32() -> None:
    acc = Accelerator(mixed_precision="bf16")
    model = tiny()
    seen = dtypes_inside(model)
    model = acc.prepare(model)
    out = model(torch.ones(2, 3))
    assert seen == [torch.bfloat16, torch.bfloat16]
    assert out.dtype == torch.float32
    out.sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())


def test_autocast_without_mixed_precision_stays_fp32() -> None:
    acc = Accelerator()
    with acc.autocast():
        assert nn.Linear(3, 3)(torch.ones(2, 3)).dtype == torch.float32


def test_unwrap_model_keep_fp32_wrapper() -> None:
    acc = Accelerator(mixed_precision="bf16")
    model = tiny()
    seen = dtypes_inside(model)
    prepared = acc.prepare(model)
    kept = acc.unwrap_model(prepared)
    assert kept is model
    assert kept(torch.ones(1, 3)).dtype == torch.float32 and seen[-1] == torch.bfloat16
    plain = acc.unwrap_model(prepared, keep_fp32_wrapper=False)
    assert plain is model
    assert plain(torch.ones(1, 3)).dtype == torch.float32 and seen[-1] == torch.float32


# --- clipping --------------------------------------------------------------------------------


def big_gradients(acc: Accelerator) -> tuple[nn.Module, Any, torch.Tensor]:
    """A prepared model whose gradients are large; returns the true total gradient norm."""
    model = tiny()
    model, optimizer = acc.prepare(model, sgd(model, lr=1.0))
    x, y = data()[:]
    acc.backward(loss_of(model, x, y * 100))
    reference = tiny()
    loss_of(reference, x, y * 100).backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in reference.parameters()])
    return model, optimizer, norm


@pytest.mark.parametrize("precision", ["no", "fp16"])
def test_clip_grad_norm_(precision: str) -> None:
    acc = Accelerator(
        mixed_precision=precision, kwargs_handlers=[GradScalerKwargs(init_scale=16.0)]
    )
    model, optimizer, true_norm = big_gradients(acc)
    assert true_norm > 10
    before = weights(model)
    returned = acc.clip_grad_norm_(model.parameters(), max_norm=1.0)
    torch.testing.assert_close(returned, true_norm, rtol=1e-2, atol=1e-2)
    clipped = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    torch.testing.assert_close(clipped, torch.tensor(1.0), rtol=1e-3, atol=1e-3)
    optimizer.step()  # lr 1: every weight moves by its (clipped, unscaled) gradient
    moved = [before[k] - v for k, v in weights(model).items()]
    torch.testing.assert_close(
        torch.nn.utils.get_total_norm(moved), torch.tensor(1.0), rtol=1e-2, atol=1e-2
    )
    assert acc.optimizer_step_was_skipped is False


@pytest.mark.parametrize("precision", ["no", "fp16"])
def test_clip_grad_value_(precision: str) -> None:
    acc = Accelerator(
        mixed_precision=precision, kwargs_handlers=[GradScalerKwargs(init_scale=16.0)]
    )
    model, optimizer, _ = big_gradients(acc)
    before = weights(model)
    acc.clip_grad_value_(model.parameters(), clip_value=0.01)
    assert max(p.grad.abs().max().item() for p in model.parameters()) <= 0.01 + 1e-7
    optimizer.step()
    assert max((before[k] - v).abs().max().item() for k, v in weights(model).items()) <= 0.0101


# --- housekeeping ----------------------------------------------------------------------------


def test_free_memory_releases_the_prepared_objects() -> None:
    acc = Accelerator()
    model = tiny()
    optimizer = sgd(model)
    model, optimizer, scheduler, loader = acc.prepare(
        model, optimizer, halving(optimizer), DataLoader(data(), batch_size=4)
    )
    for x, y in loader:
        acc.backward(loss_of(model, x, y))
        optimizer.step()
        scheduler.step()
    refs = [weakref.ref(o) for o in (model, optimizer, optimizer.optimizer, scheduler, loader)]
    assert acc.free_memory() == ()
    assert acc._models == [] and acc._optimizers == [] and acc._dataloaders == []
    assert acc._schedulers == []
    del model, optimizer, scheduler, loader, x, y
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)


def test_free_memory_returns_none_for_each_object_given() -> None:
    acc = Accelerator()
    model = acc.prepare(tiny())
    ref = weakref.ref(model)
    model, extra = acc.free_memory(model, object())
    assert model is None and extra is None
    gc.collect()
    assert ref() is None


def test_print_wait_and_process_helpers_in_one_process(capsys: pytest.CaptureFixture) -> None:
    acc = Accelerator()
    acc.print("hello", 3)
    acc.wait_for_everyone()
    with acc.main_process_first():
        ran = True
    with acc.split_between_processes([1, 2, 3]) as mine:
        assert mine == [1, 2, 3]
    assert ran and capsys.readouterr().out == "hello 3\n"

    @acc.on_main_process
    def main() -> str:
        return "main"

    @acc.on_process(process_index=0)
    def first() -> str:
        return "first"

    @acc.on_last_process
    def last() -> str:
        return "last"

    assert (main(), first(), last()) == ("main", "first", "last")


def test_collectives_in_one_process() -> None:
    acc = Accelerator()
    t = torch.arange(6.0).reshape(3, 2)
    assert torch.equal(acc.gather(t), t)
    assert torch.equal(acc.reduce(t, reduction="sum"), t)
    assert torch.equal(acc.reduce(t, reduction="mean"), t)
    assert torch.equal(acc.pad_across_processes(t, dim=1), t)
    loader = acc.prepare(DataLoader(list(range(10)), batch_size=3))
    got = torch.cat([acc.gather_for_metrics(b) for b in loader])
    assert got.tolist() == list(range(10))
    assert acc.gather_for_metrics(["a", "b"], use_gather_object=True) == ["a", "b"]


# --- torch.compile ---------------------------------------------------------------------------


def train_three_steps(acc: Accelerator) -> tuple[dict[str, torch.Tensor], list[float]]:
    model = tiny()
    model, optimizer, loader = acc.prepare(model, sgd(model), DataLoader(data(12), batch_size=4))
    losses = []
    for x, y in loader:
        loss = loss_of(model, x, y)
        acc.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return weights(acc.unwrap_model(model, keep_torch_compile=False)), losses


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_dynamo_backend_trains_like_eager_mode(backend: str) -> None:
    expected, expected_losses = train_three_steps(Accelerator())
    reset_state()
    torch._dynamo.reset()
    acc = Accelerator(dynamo_backend=backend)
    model = acc.prepare(tiny())
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    assert isinstance(acc.unwrap_model(model, keep_torch_compile=False), nn.Sequential)
    assert acc.unwrap_model(model) is model  # compiled around the user's model: kept as it is
    reset_state()
    got, losses = train_three_steps(Accelerator(dynamo_backend=backend))
    assert losses == pytest.approx(expected_losses, rel=1e-5)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value)
    torch._dynamo.reset()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_training_loop_inside_autocast_sees_the_updated_weights(precision: str) -> None:
    acc = Accelerator(
        mixed_precision=precision, kwargs_handlers=[GradScalerKwargs(init_scale=16.0)]
    )
    model = tiny()
    model, optimizer = acc.prepare(model, sgd(model))
    x, y = data()[:]
    with acc.autocast():
        outputs = []
        for _ in range(2):
            out = model(x)
            outputs.append(out.detach().clone())
            acc.backward(nn.functional.mse_loss(out, y))
            optimizer.step()
            optimizer.zero_grad()
    assert not acc.optimizer_step_was_skipped
    assert not torch.equal(outputs[0], outputs[1])  # the weights moved, so must the outputs
