#!/usr/bin/env python3
"""Training workload for colloc bench and the collocation study (PyTorch + timm only).

Trains a timm image model with synthetic data on the GPU (default) or from a generated
on-disk image folder through a DataLoader with 4 workers (--data folder), and prints its
throughput every ~1 s in the pattern colloc parses:

    t=<monotonic s> step=<n> img/s=<float> loss=<float> progress=<fraction done>
    epoch=<k> epoch_time=<s> epoch_img_per_s=<float>   (one epoch = --epoch-size images)

Workloads of the study (Robroek et al., arXiv 2209.06018), picked with --workload:
    small   resnet26  at 32x32,   10 classes (CIFAR-10 size)
    medium  resnet50  at 64x64,   1000 classes (64x64 ImageNet)
    large   resnet152 at 224x224, 1000 classes (ImageNet)
    tiny    a plain PyTorch CNN (--model plain: 4 conv layers, no timm import) at 32x32
    micro   a plain PyTorch MLP (--model mlp: 3072-1024-1024-10, no timm import, no cuDNN,
            cudnn.benchmark off, --optim plain) on 32x32 inputs: a run whose start-up is
            as short as PyTorch allows (its import, the CUDA context, cuBLAS' first use)
or any timm model with --model NAME --img-size S --num-classes C.

The optimizer is SGD (momentum 0.9, weight decay 5e-5): torch.optim.SGD (--optim torch,
the default but for --model mlp), or --optim plain, the same update in a few foreach ops
without torch.optim, whose constructor imports torch._dynamo (its add_param_group is
wrapped in torch._disable_dynamo): 3.3 s of start-up with 7 starting at once on an H100
(bench/results/overlap-micro).

FP32 by default (as in the paper); --amp bf16 for autocast in bfloat16. Stops after
--duration seconds of training (or --steps), or when it gets SIGTERM/SIGINT.
--startup-trace prints one more line to stderr with the first throughput line: seconds
from the process's start to each phase of the start-up (the import of torch, the CUDA
context, the model on the device, the optimizer, the data, the first step, the first
throughput line).
"""
import argparse
import os
import signal
import sys
import tempfile
import time

_T_SCRIPT = time.monotonic()

WORKLOADS = {
    "small": ("resnet26", 32, 10, 50000),
    "medium": ("resnet50", 64, 1000, 1281167),
    "large": ("resnet152", 224, 1000, 1281167),
    # A plain PyTorch CNN (no timm import): a run whose start-up is mostly PyTorch's own.
    "tiny": ("plain", 32, 10, 50000),
    # A plain PyTorch MLP (no timm, no cuDNN): the shortest start-up PyTorch allows.
    "micro": ("mlp", 32, 10, 50000),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=sorted(WORKLOADS), help="study preset (model, size, classes)")
    p.add_argument("--model", help="timm model name (overrides the preset's)")
    p.add_argument("--img-size", type=int, help="square image side in pixels")
    p.add_argument("--num-classes", type=int, help="classes")
    p.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of training, then stop (default 60; 0 = no limit)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0 = no limit)")
    p.add_argument("--warmup", type=float, default=0.0, help="seconds of training before throughput lines start")
    p.add_argument("--log-interval", type=float, default=1.0, help="seconds between throughput lines")
    p.add_argument("--amp", choices=["none", "bf16"], default="none", help="mixed precision (default none: FP32)")
    p.add_argument("--data", choices=["synthetic", "folder"], default="synthetic")
    p.add_argument("--data-dir", help="image folder for --data folder (generated there if missing; default: a temp dir)")
    p.add_argument("--folder-images", type=int, default=2560, help="images to generate for --data folder")
    p.add_argument("--workers", type=int, default=4, help="DataLoader workers for --data folder (default 4)")
    p.add_argument("--epoch-size", type=int, help="images per epoch for epoch-time lines (default: the preset's dataset size)")
    p.add_argument("--device", default="auto", help="cuda, cpu or auto (default)")
    p.add_argument("--channels-last", action="store_true", help="use channels-last memory format")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--optim", choices=["torch", "plain"], help="SGD from torch.optim, or the same update without it (default: plain for --model mlp, else torch)")
    p.add_argument("--startup-trace", action="store_true", help="print the start-up's phases (seconds since the process's start) to stderr")
    a = p.parse_args(argv)
    model, size, classes, epoch = WORKLOADS.get(a.workload or "small")
    if a.workload is None and a.model is None:
        p.error("give --workload small|medium|large or --model NAME")
    a.model = a.model or model
    a.img_size = a.img_size or size
    a.num_classes = a.num_classes or classes
    a.epoch_size = a.epoch_size or epoch
    a.optim = a.optim or ("plain" if a.model == "mlp" else "torch")
    for name in ("batch", "img_size", "num_classes", "epoch_size", "folder_images"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if a.workers < 0 or a.duration < 0 or a.warmup < 0 or a.log_interval <= 0:
        p.error("--workers, --duration and --warmup must not be negative, --log-interval must be positive")
    return a


def process_age():
    """Seconds since this process started (/proc/self/stat), or None where unknown."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        started = int(stat[stat.rindex(")") + 2 :].split()[19]) / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class PlainSGD:
    """torch.optim.SGD's update (momentum, weight decay; no dampening, no Nesterov) without
    torch.optim: Optimizer's constructor imports torch._dynamo, seconds of start-up."""

    def __init__(self, params, lr, momentum, weight_decay):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.bufs = None

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self):
        import torch

        with torch.no_grad():
            params = [p for p in self.params if p.grad is not None]
            grads = [p.grad for p in params]
            if self.weight_decay:
                grads = torch._foreach_add(grads, params, alpha=self.weight_decay)
            if self.bufs is None:
                self.bufs = [g.clone() for g in grads]
            else:
                torch._foreach_mul_(self.bufs, self.momentum)
                torch._foreach_add_(self.bufs, grads)
            torch._foreach_add_(params, self.bufs, alpha=-self.lr)


class StartupTrace:
    """Phases of the start-up, as seconds since the process started (--startup-trace)."""

    def __init__(self, on):
        self.on = on
        age = process_age() if on else None
        # The process's start on the monotonic clock (else the script's first line).
        self.origin = time.monotonic() - age if age is not None else _T_SCRIPT
        self.marks = [("script", _T_SCRIPT)] if on else []

    def mark(self, name, sync=None):
        if self.on:
            if sync:
                sync()
            self.marks.append((name, time.monotonic()))

    def print(self):
        if self.on:
            phases = " ".join(f"{k}={t - self.origin:.3f}" for k, t in self.marks)
            print(f"train.py: startup-trace pid={os.getpid()} {phases}", file=sys.stderr, flush=True)
            self.on = False


def make_folder(root, n_images, size, n_classes, seed):
    """Generate an ImageFolder tree of random PNG images under root/data, once: copies
    running at the same time build in private temp dirs and the first rename wins."""
    import numpy as np
    from PIL import Image

    final = os.path.join(root, "data")
    if os.path.isdir(final):
        return final
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".gen-", dir=root)
    rng = np.random.default_rng(seed)
    classes = min(n_classes, 100)  # ImageFolder labels; the model still has n_classes outputs
    for c in range(classes):
        os.makedirs(os.path.join(tmp, f"c{c:03d}"))
    for i in range(n_images):
        c = i % classes
        px = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
        Image.fromarray(px).save(os.path.join(tmp, f"c{c:03d}", f"{i:06d}.png"), compress_level=1)
    try:
        os.rename(tmp, final)
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)  # another copy finished first
    return final


def main(argv=None):
    a = parse_args(argv)
    trace = StartupTrace(a.startup_trace)
    stop = {"sig": None}

    def on_signal(sig, _frame):
        stop["sig"] = sig

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    trace.mark("import_torch")
    torch.manual_seed(a.seed)
    if a.device == "auto":
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        dev = torch.device(a.device)
    if dev.type == "cuda":
        # The MLP uses no cuDNN; for it, no autotuning either (7 start-ups at once on one
        # GPU make it cost seconds).
        torch.backends.cudnn.benchmark = a.model != "mlp"
        if trace.on:
            torch.empty(1, device=dev)  # the CUDA context now, to time it apart
    trace.mark("cuda", sync=lambda: dev.type == "cuda" and torch.cuda.synchronize(dev))
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format

    timm = None
    if a.model == "mlp":
        width = 1024
        model = nn.Sequential(
            nn.Flatten(),
            nn.Linear(3 * a.img_size * a.img_size, width), nn.ReLU(inplace=True),
            nn.Linear(width, width), nn.ReLU(inplace=True),
            nn.Linear(width, a.num_classes),
        )
    elif a.model == "plain":
        def block(i, o):
            return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]

        model = nn.Sequential(
            *block(3, 64), *block(64, 128), nn.MaxPool2d(2),
            *block(128, 256), nn.MaxPool2d(2), *block(256, 256),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, a.num_classes),
        )
    else:
        import timm

        model = timm.create_model(a.model, pretrained=False, num_classes=a.num_classes)
    model = model.to(dev, memory_format=fmt).train()
    trace.mark("model")
    if a.optim == "plain":
        opt = PlainSGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-5)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-5)
    amp = a.amp == "bf16"
    trace.mark("optim")

    if a.data == "synthetic":
        x = torch.randn(a.batch, 3, a.img_size, a.img_size, device=dev).contiguous(memory_format=fmt)
        y = torch.randint(0, a.num_classes, (a.batch,), device=dev)

        def batches():
            while True:
                yield x, y

    else:
        import torchvision.datasets as datasets
        import torchvision.transforms as T

        root = a.data_dir or os.path.join(tempfile.gettempdir(), f"colloc-train-{a.img_size}px")
        folder = make_folder(root, a.folder_images, a.img_size, a.num_classes, a.seed)
        ds = datasets.ImageFolder(
            folder,
            T.Compose([T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize((0.5,) * 3, (0.25,) * 3)]),
        )
        loader = torch.utils.data.DataLoader(
            ds,
            batch_size=a.batch,
            shuffle=True,
            drop_last=len(ds) >= a.batch,
            num_workers=a.workers,
            pin_memory=dev.type == "cuda",
            persistent_workers=a.workers > 0,
        )

        def batches():
            while True:
                for xb, yb in loader:
                    yield (
                        xb.to(dev, non_blocking=True).contiguous(memory_format=fmt),
                        yb.to(dev, non_blocking=True),
                    )

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    trace.mark("data")
    print(
        f"train.py: model={a.model} img={a.img_size} classes={a.num_classes} batch={a.batch} "
        f"data={a.data} amp={a.amp} device={dev} torch={torch.__version__} timm={timm.__version__ if timm else '-'}",
        flush=True,
    )
    it = batches()
    start = time.monotonic()
    last_t, last_step = start, 0
    epoch, epoch_start, epoch_images = 0, start, 0
    step = 0
    while stop["sig"] is None:
        xb, yb = next(it)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step == 1:
            trace.mark("first_step", sync=sync)
        epoch_images += a.batch
        now = time.monotonic()
        done = (a.duration and now - start >= a.duration) or (a.steps and step >= a.steps)
        if now - last_t >= a.log_interval or done:
            sync()
            now = time.monotonic()
            rate = (step - last_step) * a.batch / (now - last_t)
            if now - start >= a.warmup:
                fracs = [min((now - start) / a.duration, 1.0)] if a.duration else []
                fracs += [min(step / a.steps, 1.0)] if a.steps else []
                progress = f" progress={max(fracs):.4f}" if fracs else ""
                print(f"t={now:.3f} step={step} img/s={rate:.2f} loss={loss.item():.3f}{progress}", flush=True)
                trace.mark("first_line")
                trace.print()
            last_t, last_step = now, step
        if epoch_images >= a.epoch_size:
            sync()
            now = time.monotonic()
            epoch += 1
            print(
                f"epoch={epoch} epoch_time={now - epoch_start:.2f} epoch_img_per_s={epoch_images / (now - epoch_start):.2f}",
                flush=True,
            )
            epoch_start, epoch_images = now, 0
        if done:
            break
    sync()
    elapsed = time.monotonic() - start
    print(f"train.py: done steps={step} seconds={elapsed:.1f} mean img/s={step * a.batch / max(elapsed, 1e-9):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
