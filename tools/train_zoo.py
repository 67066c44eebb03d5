"""Train the MobileNet zoo on the bundled shapes data set (build-time tool; needs torch==2.13.0).

    python tools/train_zoo.py --models mobilenet_v1_0.25_128 [--train-images N] [--epochs E]

Each model trains at its own resolution (optionally first at a lower one, then fine-tuned),
with a curriculum (easiest images first) that shortens the initial loss plateau; batch norm is
folded into the convolutions and the weights are written, as float16, to
mlts/models/weights/<name>.npz. Seeds are fixed, so a rerun on the same machine reproduces the
weights. The held-out top-1 (torch, at the model's own resolution) is printed at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlts.datasets.shapes import ShapesDataset  # noqa: E402
from mlts.models.mobilenet import ZOO_CONFIGS, layers, model_name  # noqa: E402

WEIGHTS_DIR = ROOT / "mlts" / "models" / "weights"
CACHE = Path(os.environ.get("MLTS_CACHE", Path.home() / ".cache" / "mlts")) / "train-data"


def _render_range(args):
    split, size, start, stop = args
    ds = ShapesDataset(split, size)
    images = np.empty((stop - start, size, size, 3), np.uint8)
    labels = np.empty(stop - start, np.int64)
    for k, i in enumerate(range(start, stop)):
        images[k], labels[k] = ds[i]
    return images, labels


def rendered(split: str, size: int, count: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(N, H, W, 3) uint8 images and labels, rendered on all cores and cached on disk."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{split}-{size}-{offset}-{count}.npz"
    if path.exists():
        data = np.load(path)
        return data["images"], data["labels"]
    chunks = [(split, size, a, min(a + 500, offset + count)) for a in range(offset, offset + count, 500)]
    with multiprocessing.Pool(os.cpu_count()) as pool:
        parts = pool.map(_render_range, chunks)
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    np.savez(path, images=images, labels=labels)
    return images, labels


def to_input(images: np.ndarray):
    import torch

    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)


def build_torch(family: str, alpha: float):
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.spec = layers(family, alpha)
            self.mods = nn.ModuleDict()
            for layer in self.spec:
                if layer.kind == "conv":
                    self.mods[layer.name] = nn.Sequential(
                        nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel, layer.stride,
                                  layer.kernel // 2, groups=layer.groups, bias=False),
                        nn.BatchNorm2d(layer.out_channels))
                elif layer.kind == "fc":
                    self.mods[layer.name] = nn.Linear(layer.in_channels, layer.out_channels)

        def forward(self, x):
            saved = {}
            for layer in self.spec:
                if layer.kind == "conv":
                    x = self.mods[layer.name](x)
                    if layer.relu6:
                        x = torch.clamp(x, 0.0, 6.0)
                elif layer.kind == "save":
                    saved[layer.name] = x
                elif layer.kind == "add":
                    x = x + saved[layer.name]
                elif layer.kind == "pool":
                    x = x.mean(dim=(2, 3))
                elif layer.kind == "fc":
                    x = self.mods[layer.name](x)
            return x

    return Net()


def fold_weights(net) -> dict[str, np.ndarray]:
    """Conv+BN -> conv with bias (ONNX OIHW layout); FC as [out, in]."""
    out = {}
    for layer in net.spec:
        if layer.kind == "conv":
            conv, bn = net.mods[layer.name][0], net.mods[layer.name][1]
            std = (bn.running_var + bn.eps).sqrt()
            scale = (bn.weight / std).detach().double()
            w = conv.weight.detach().double() * scale[:, None, None, None]
            b = bn.bias.detach().double() - bn.running_mean.detach().double() * scale
            out[f"{layer.name}.weight"], out[f"{layer.name}.bias"] = w.numpy(), b.numpy()
        elif layer.kind == "fc":
            fc = net.mods[layer.name]
            out[f"{layer.name}.weight"] = fc.weight.detach().double().numpy()
            out[f"{layer.name}.bias"] = fc.bias.detach().double().numpy()
    return out


def difficulty(split: str, count: int, offset: int = 0) -> np.ndarray:
    """A per-image difficulty score from the scene description (small, noisy, low-contrast, occluded = hard)."""
    from mlts.datasets.shapes import make_scene

    scores = np.empty(count)
    for k in range(count):
        sc = make_scene(split, offset + k)
        contrast = np.abs(np.asarray(sc.fg) - (np.asarray(sc.bg[0]) + np.asarray(sc.bg[1])) / 2).sum()
        scores[k] = (-3.0 * sc.radius + 4.0 * sc.noise_sigma - 0.3 * contrast + 0.3 * (sc.occluder is not None)
                     + 0.05 * len(sc.distractors))
    return scores


def train_phase(net, images, labels, *, size_note: str, epochs: float, lr: float, batch: int, seed: int,
                weight_decay: float = 4e-5, easy_first: np.ndarray | None = None, optimizer: str = "sgd") -> None:
    """SGD with a one-cycle schedule; with `easy_first` (difficulty scores), the first quarter of the
    steps draws only from the easiest 40% of the images (a curriculum: shape classes with random
    colours sit on a long loss plateau otherwise)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    g = np.random.default_rng(seed)
    n = len(images)
    steps = max(1, int(math.ceil(epochs * n / batch)))
    decay, no_decay = [], []
    for name, p in net.named_parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0}]
    if optimizer == "adam":
        opt = torch.optim.AdamW(groups, lr=lr)
    else:
        opt = torch.optim.SGD(groups, lr=lr, momentum=0.9, nesterov=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.15)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    net.train()
    order = np.concatenate([g.permutation(n) for _ in range(int(math.ceil(epochs)) + 1)])
    if easy_first is not None:
        easy = np.argsort(easy_first)[: int(0.4 * n)]
        warm = steps // 4
        order[: warm * batch] = g.choice(easy, warm * batch)
    t0 = time.time()
    for step in range(steps):
        idx = order[step * batch:(step + 1) * batch]
        x, y = to_input(images[idx]), torch.from_numpy(labels[idx])
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  [{size_note}] step {step + 1}/{steps} loss {loss.item():.3f} ({time.time() - t0:.0f}s)", flush=True)


def evaluate_torch(net, images, labels, batch: int = 100) -> float:
    import torch

    net.eval()
    correct = 0
    with torch.no_grad():
        for a in range(0, len(images), batch):
            correct += int((net(to_input(images[a:a + batch])).argmax(1).numpy() == labels[a:a + batch]).sum())
    return correct / len(images)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", help="zoo names (default: all)")
    parser.add_argument("--train-images", type=int, default=24000)
    parser.add_argument("--low-res", type=int, default=0,
                        help="train at this resolution first, then fine-tune at the model's own (0: own only; "
                             "64 px then 63 fine-tune steps at 128 px reached only 52%%)")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--finetune-images", type=int, default=4000)
    parser.add_argument("--finetune-epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="adam",
                        help="AdamW 3e-3 leaves the initial loss plateau sooner than SGD 0.08 on this data")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--eval-images", type=int, default=1500)
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    wanted = set(args.models or [model_name(*c) for c in ZOO_CONFIGS])
    WEIGHTS_DIR.mkdir(parents=True, exist_ok=True)
    summary = {}
    for family, alpha, res in ZOO_CONFIGS:
        name = model_name(family, alpha, res)
        if name not in wanted:
            continue
        print(f"== {name}", flush=True)
        seed = sum(map(ord, name))
        torch.manual_seed(seed)
        net = build_torch(family, alpha)
        low = min(args.low_res, res) if args.low_res else res
        imgs, labels = rendered("train", low, args.train_images)
        train_phase(net, imgs, labels, size_note=f"{low}px", epochs=args.epochs, lr=args.lr, batch=args.batch,
                    seed=seed, easy_first=difficulty("train", args.train_images), optimizer=args.optimizer,
                    weight_decay=4e-5 if args.optimizer == "sgd" else 1e-4)
        if res != low and args.finetune_images:
            imgs, labels = rendered("train", res, args.finetune_images, offset=args.train_images)
            train_phase(net, imgs, labels, size_note=f"{res}px", epochs=args.finetune_epochs, lr=args.lr / 8,
                        batch=args.batch, seed=seed + 1, optimizer=args.optimizer)
        held, held_labels = rendered("heldout", res, args.eval_images)
        acc = evaluate_torch(net, held, held_labels)
        print(f"  torch held-out top-1 at {res}px: {acc:.4f}", flush=True)
        weights = fold_weights(net)
        if not args.no_save:
            np.savez_compressed(WEIGHTS_DIR / f"{name}.npz",
                                **{k: v.astype(np.float16) for k, v in weights.items()})
        summary[name] = acc
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
