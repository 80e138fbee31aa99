"""The quick-tour seed's examples (Accelerate 0.24 quick tour, Chinese edition), import changed.

Each function follows the code shape of one section of the seed with ``accelerate`` replaced by
``nbaccel`` and nothing else changed, except where the seed downloads something:

* ``load_dataset('my_dataset')`` and the Oxford pets images -> ``ClusterImages``, a synthetic,
  well-separated data set of 3x8x8 "images" (dict batches ``{"image", "label"}`` like the
  seed's pets data set) or ``(source, targets)`` pairs for the plain loops;
* ``torch.nn.Transformer`` / ``timm.create_model("resnet50d", pretrained=True)`` ->
  ``SmallNet``, a tiny CNN with timm's ``get_classifier()`` and ``default_cfg`` (mean / std);
* ``datasets`` metrics (``metric.add_batch`` / ``metric.compute``) -> ``Accuracy`` below.

They run in one process and on every rank of a launch (``accelerator_checks``); each asserts
what the seed says happens. Section 2.1's ``training_loop`` is launched as the seed launches it
by ``test_accelerator_seed_examples.py``.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import OneCycleLR
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from nbaccel import Accelerator, DistributedType, set_seed

EXAMPLES: list[Callable[[], None]] = []
NUM_CLASSES = 3
label_to_id = {"cat": 0, "dog": 1, "bird": 2}


def example(function: Callable[[], None]) -> Callable[[], None]:
    EXAMPLES.append(function)
    return function


class ClusterImages(Dataset):
    """Stand-in for the seed's downloaded data sets: one Gaussian cluster of images per class."""

    def __init__(self, n: int, seed: int = 0, as_dict: bool = True) -> None:
        gen = torch.Generator().manual_seed(seed)
        centers = torch.randn(NUM_CLASSES, 3, 8, 8, generator=torch.Generator().manual_seed(99))
        self.labels = torch.arange(n) % NUM_CLASSES
        self.images = centers[self.labels] * 2 + torch.randn(n, 3, 8, 8, generator=gen)
        self.as_dict = as_dict

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):  # type: ignore[no-untyped-def]
        if self.as_dict:
            return {"image": self.images[i], "label": self.labels[i]}
        return self.images[i], self.labels[i]


class SmallNet(nn.Module):
    """Stand-in for timm's resnet50d: a feature extractor plus a classifier head."""

    default_cfg = {"mean": (0.1, 0.0, -0.1), "std": (1.0, 1.1, 0.9)}

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten())
        self.head = nn.Linear(4 * 6 * 6, num_classes)

    def get_classifier(self) -> nn.Module:
        return self.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def create_model(name: str, pretrained: bool = False, num_classes: int = NUM_CLASSES) -> SmallNet:
    """Stand-in for ``timm.create_model`` (no download)."""
    return SmallNet(num_classes)


class Accuracy:
    """Stand-in for a ``datasets`` metric: ``add_batch`` then ``compute``."""

    def __init__(self) -> None:
        self.predictions: list[int] = []
        self.references: list[int] = []

    def add_batch(self, predictions: torch.Tensor, references: torch.Tensor) -> None:
        self.predictions += predictions.tolist()
        self.references += references.tolist()

    def compute(self) -> float:
        hits = sum(p == r for p, r in zip(self.predictions, self.references, strict=True))
        return hits / len(self.references)


def shared_directory(accelerator: Accelerator) -> str:
    """One temporary directory for every rank (the seed saves to a path all ranks see)."""
    path = [tempfile.mkdtemp(prefix="nbaccel-seed-") if accelerator.is_main_process else None]
    if accelerator.use_distributed:
        dist.broadcast_object_list(path, src=0)
    return str(path[0])


# --- 1.2: the four added lines --------------------------------------------------------------


@example
def section_1_2_training_loop() -> None:
    set_seed(0)
    accelerator = Accelerator()
    model = SmallNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    dataset = ClusterImages(96, as_dict=False)  # stand-in for load_dataset('my_dataset')
    data = torch.utils.data.DataLoader(dataset, shuffle=True, batch_size=8)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    model.train()
    losses = []
    for epoch in range(3):  # noqa: B007 (the seed's loop)
        for source, targets in data:
            optimizer.zero_grad()
            output = model(source)
            loss = F.cross_entropy(output, targets)
            accelerator.backward(loss)
            optimizer.step()
            losses.append(loss.item())
    assert len(losses) == 3 * len(data)
    assert len(data) == -(-96 // (8 * accelerator.num_processes))
    assert np.mean(losses[-3:]) < np.mean(losses[:3]) / 2, losses


# --- 1.3: distributed evaluation ------------------------------------------------------------


def trained_model_and_eval_loader(accelerator: Accelerator) -> tuple[nn.Module, DataLoader]:
    set_seed(0)
    model = SmallNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    train = DataLoader(ClusterImages(96, as_dict=False), shuffle=True, batch_size=8)
    # 31 samples: not divisible by 2 or 3, so the last batch is evened out with duplicates
    validation_dataloader = DataLoader(ClusterImages(31, seed=1, as_dict=False), batch_size=4)
    model, optimizer, train = accelerator.prepare(model, optimizer, train)
    for source, targets in train:
        accelerator.backward(F.cross_entropy(model(source), targets))
        optimizer.step()
        optimizer.zero_grad()
    validation_dataloader = accelerator.prepare(validation_dataloader)
    return model, validation_dataloader


@example
def section_1_3_gather_for_metrics() -> None:
    accelerator = Accelerator()
    model, validation_dataloader = trained_model_and_eval_loader(accelerator)
    metric = Accuracy()
    model.eval()
    for source, targets in validation_dataloader:
        with torch.no_grad():
            predictions = model(source).argmax(dim=-1)
        # 汇总所有的predictions和targets
        all_predictions, all_targets = accelerator.gather_for_metrics((predictions, targets))
        metric.add_batch(all_predictions, all_targets)
    dataset = validation_dataloader.dataset
    assert metric.references == dataset.labels.tolist()  # every sample once, in order
    assert metric.compute() > 0.9


@example
def section_1_3_gather_and_truncate() -> None:
    accelerator = Accelerator()
    model, eval_dataloader = trained_model_and_eval_loader(accelerator)
    predictions, labels = [], []
    for source, targets in eval_dataloader:
        with torch.no_grad():
            output = model(source)
        predictions.append(accelerator.gather(output).cpu().numpy())
        labels.append(accelerator.gather(targets).cpu().numpy())
    predictions = np.concatenate(predictions)
    labels = np.concatenate(labels)
    if accelerator.num_processes > 1:  # the evened-out last batch added samples
        assert len(labels) > len(eval_dataloader.dataset)
    predictions = predictions[: len(eval_dataloader.dataset)]
    labels = labels[: len(eval_dataloader.dataset)]
    assert labels.tolist() == eval_dataloader.dataset.labels.tolist()
    assert (predictions.argmax(-1) == labels).mean() > 0.9


# --- 2.1: notebook_launcher's training function ------------------------------------------------


def get_dataloaders(batch_size: int) -> tuple[DataLoader, DataLoader]:
    """Stand-in for the pets data set: dict batches with "image" and "label"."""
    train = DataLoader(ClusterImages(256), shuffle=True, batch_size=batch_size, drop_last=True)
    evaluation = DataLoader(ClusterImages(64, seed=1), shuffle=False, batch_size=batch_size)
    return train, evaluation


def training_loop(mixed_precision: str = "fp16", seed: int = 42, batch_size: int = 64) -> float:
    """Section 2.1's function as the seed writes it (it returns the last accuracy here)."""
    set_seed(seed)
    # 初始化 accelerator
    accelerator = Accelerator(mixed_precision=mixed_precision)
    # 构建dataloaders
    train_dataloader, eval_dataloader = get_dataloaders(batch_size)
    # 实例化模型
    model = create_model("resnet50d", pretrained=True, num_classes=len(label_to_id))
    # 冻结基础模型
    for param in model.parameters():
        param.requires_grad = False
    for param in model.get_classifier().parameters():
        param.requires_grad = True
    mean = torch.tensor(model.default_cfg["mean"])[None, :, None, None]
    std = torch.tensor(model.default_cfg["std"])[None, :, None, None]
    mean = mean.to(accelerator.device)
    std = std.to(accelerator.device)
    optimizer = torch.optim.Adam(params=model.parameters(), lr=3e-2 / 25)
    lr_scheduler = OneCycleLR(
        optimizer=optimizer, max_lr=3e-2, epochs=5, steps_per_epoch=len(train_dataloader)
    )
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    for epoch in range(5):
        model.train()
        for batch in train_dataloader:
            inputs = (batch["image"] - mean) / std
            outputs = model(inputs)
            loss = torch.nn.functional.cross_entropy(outputs, batch["label"])
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        model.eval()
        accurate = 0
        num_elems = 0
        for batch in eval_dataloader:
            inputs = (batch["image"] - mean) / std
            with torch.no_grad():
                outputs = model(inputs)
            predictions = outputs.argmax(dim=-1)
            accurate_preds = accelerator.gather(predictions) == accelerator.gather(batch["label"])
            num_elems += accurate_preds.shape[0]
            accurate += accurate_preds.long().sum()
        eval_metric = accurate.item() / num_elems
        # 使用 accelerator.print 只在主进程上打印
        accelerator.print(f"epoch {epoch}: {100 * eval_metric:.2f}")
    return eval_metric


@example
def section_2_1_training_loop_on_this_rank() -> None:
    assert training_loop("fp16", 42, 64) > 0.9


# --- 2.2 / 2.3: branching on the setup and on the process ------------------------------------


@example
def section_2_2_and_2_3_process_checks() -> None:
    accelerator = Accelerator()
    if accelerator.distributed_type == DistributedType.TPU:
        raise AssertionError("no TPU here")
    expected = DistributedType.MULTI_CPU if accelerator.num_processes > 1 else DistributedType.NO
    assert accelerator.distributed_type == expected
    progress_bar = tqdm(range(3), disable=not accelerator.is_local_main_process)
    assert progress_bar.disable == (accelerator.local_process_index != 0)
    progress_bar.close()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        accelerator.print("once")
    assert out.getvalue() == ("once\n" if accelerator.is_main_process else "")


# --- 2.4: wait_for_everyone, unwrap_model, saving and loading ---------------------------------


@example
def section_2_4_1_wait_for_everyone() -> None:
    accelerator = Accelerator()
    out = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out):
        if accelerator.is_main_process:
            time.sleep(0.3)
        else:
            print("I'm waiting for the main process to finish its sleep...")
        accelerator.wait_for_everyone()
        # 所有进程会同时打印
        print("Everyone is here")
    assert time.monotonic() - start >= 0.29
    assert out.getvalue().endswith("Everyone is here\n")


class MyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


@example
def section_2_4_2_unwrap_save_and_load() -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(MyModel())
    names = [model.__class__.__name__]
    model = accelerator.unwrap_model(model)
    names.append(model.__class__.__name__)
    wrapper = "DistributedDataParallel" if accelerator.num_processes > 1 else "MyModel"
    assert names == [wrapper, "MyModel"]

    save_directory = shared_directory(accelerator)
    with torch.no_grad():
        model.layer.weight.fill_(0.5)
    accelerator.wait_for_everyone()
    path_to_checkpoint = os.path.join(save_directory, "pytorch_model.bin")
    accelerator.save(model.state_dict(), path_to_checkpoint)  # saves on the main process only
    accelerator.wait_for_everyone()
    unwrapped_model = accelerator.unwrap_model(accelerator.prepare(MyModel()))
    unwrapped_model.load_state_dict(torch.load(path_to_checkpoint))
    assert torch.equal(unwrapped_model.layer.weight, torch.full((2, 4), 0.5))

    # 2.8.3: accelerator.save replaces torch.save
    arr = [0, 1, 2, 3]
    accelerator.save(arr, os.path.join(save_directory, "array.pkl"))
    accelerator.wait_for_everyone()
    assert torch.load(os.path.join(save_directory, "array.pkl")) == arr
    accelerator.wait_for_everyone()  # nobody deletes before everyone has read
    if accelerator.is_main_process:
        for name in os.listdir(save_directory):
            os.remove(os.path.join(save_directory, name))
        os.rmdir(save_directory)


# --- 2.6: mixed precision ---------------------------------------------------------------------


def small_training_objects(accelerator: Accelerator, n: int = 48, batch_size: int = 4):  # type: ignore[no-untyped-def]
    set_seed(0)
    model = SmallNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.99**step)
    dataloader = DataLoader(ClusterImages(n, as_dict=False), batch_size=batch_size)
    return model, optimizer, scheduler, dataloader


@example
def section_2_6_1_training_inside_autocast_learns() -> None:
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, lr_scheduler, dataloader = small_training_objects(accelerator)
    model, optimizer, lr_scheduler, dataloader = accelerator.prepare(
        model, optimizer, lr_scheduler, dataloader
    )
    loss_func = nn.CrossEntropyLoss()

    def train() -> list[float]:
        losses = []
        for source, targets in dataloader:
            optimizer.zero_grad()
            output = model(source)
            assert not torch.is_autocast_enabled("cpu")  # fp16 on the CPU: fp32, as Accelerate
            loss = loss_func(output, targets)
            accelerator.backward(loss)
            optimizer.step()
            losses.append(loss.item())
        return losses

    with accelerator.autocast():
        first = train()
        train()
        last = train()
    assert not torch.is_autocast_enabled("cpu")
    assert all(np.isfinite(first + last))
    assert np.mean(last) < 0.8 * np.mean(first), (first, last)


@example
def section_2_6_2_scheduler_skips_with_the_optimizer() -> None:
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, lr_scheduler, dataloader = small_training_objects(accelerator)
    model, optimizer, lr_scheduler, dataloader = accelerator.prepare(
        model, optimizer, lr_scheduler, dataloader
    )
    steps = skipped = 0
    for source, targets in dataloader:
        with accelerator.autocast():
            loss = F.cross_entropy(model(source), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if not accelerator.optimizer_step_was_skipped:
            lr_scheduler.step()
        steps += 1
        skipped += accelerator.optimizer_step_was_skipped
    per_step = 1 if accelerator.split_batches else accelerator.num_processes
    expected = 0.05 * 0.99 ** ((steps - skipped) * per_step)
    assert abs(lr_scheduler.get_last_lr()[0] - expected) < 1e-9


@example
def section_2_6_3_gradient_clipping() -> None:
    max_grad_norm, clip_value = 1.0, 0.5
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model, optimizer, scheduler, dataloader = small_training_objects(accelerator)
    dataloader, model, optimizer, scheduler = accelerator.prepare(
        dataloader, model, optimizer, scheduler
    )
    loss_func = nn.CrossEntropyLoss()
    for i, (input, target) in enumerate(dataloader):
        optimizer.zero_grad()
        output = model(input)
        loss = loss_func(output, target)
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            if i % 2:
                accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
                norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
                assert norm <= max_grad_norm + 1e-4
            else:
                # 或者是:
                accelerator.clip_grad_value_(model.parameters(), clip_value)
                assert all(p.grad.abs().max() <= clip_value for p in model.parameters())
        optimizer.step()


# --- 2.7: gradient accumulation ----------------------------------------------------------------


@example
def section_2_7_accumulate() -> None:
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model, optimizer, scheduler, training_dataloader = small_training_objects(accelerator)
    model, optimizer, training_dataloader, scheduler = accelerator.prepare(
        model, optimizer, training_dataloader, scheduler
    )
    loss_function = nn.CrossEntropyLoss()
    updates = 0
    for input, label in training_dataloader:
        with accelerator.accumulate(model):
            before = next(iter(model.parameters())).detach().clone()
            predictions = model(input)
            loss = loss_function(predictions, label)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            updates += not torch.equal(before, next(iter(model.parameters())))
    assert updates == len(training_dataloader) // 2 + len(training_dataloader) % 2


# --- 2.8: free_memory --------------------------------------------------------------------------


@example
def section_2_8_2_free_memory() -> None:
    import gc
    import weakref

    accelerator = Accelerator()
    model, optimizer, scheduler, _ = small_training_objects(accelerator)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    refs = [weakref.ref(model), weakref.ref(optimizer), weakref.ref(scheduler)]
    accelerator.free_memory()
    del model, optimizer, scheduler
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
