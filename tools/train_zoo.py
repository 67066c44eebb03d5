"""Train the MobileNet zoo on the bundled shapes data set (build-time tool; needs torch==2.13.0).

    python tools/train_zoo.py [--families v1 v2] [--resume]

Training all eight models from scratch at 224 px is out of reach on a two-core CPU (MobileNet v1
1.0_224 trains at ~12 images/s), so each family is trained as a chain: the narrowest model is
trained from scratch at its own resolution (a curriculum, easiest images first, shortens the
initial loss plateau that shape classes with random colours sit on), then each wider model starts
from the previous one widened function-preservingly (Net2WiderNet: channels replicated, outgoing
weights divided by the replica count, a little noise to break the symmetry) and is fine-tuned at
its own resolution. Label-preserving augmentation (the eight rotations/flips, colour-channel
permutation, inversion) stretches the rendered images. Batch norm is folded into the
convolutions and the weights are written, as float16, to mlts/models/weights/<name>.npz; torch
checkpoints go to the cache so that an interrupted chain resumes (--resume). Seeds are fixed.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlts.datasets.shapes import ShapesDataset  # noqa: E402
from mlts.models.mobilenet import layers, model_name  # noqa: E402

WEIGHTS_DIR = ROOT / "mlts" / "models" / "weights"
CACHE = Path(os.environ.get("MLTS_CACHE", Path.home() / ".cache" / "mlts")) / "train-data"
CHECKPOINTS = CACHE.parent / "train-checkpoints"
# Rendered images depend on the generator's code: a changed generator never reuses stale cached pixels.
DATASET_VERSION = hashlib.sha256((ROOT / "mlts" / "datasets" / "shapes.py").read_bytes()).hexdigest()[:10]
# v2 (residual) leaves the initial plateau sooner than v1 and needs fewer steps from scratch.
BASE_STEPS = {"v1": 4000, "v2": 3000}
CHAINS = {"v1": ((0.25, 128), (0.5, 160), (0.75, 192), (1.0, 224)),
          "v2": ((0.35, 128), (0.5, 160), (0.75, 192), (1.0, 224))}


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
    path = CACHE / f"{split}-{size}-{offset}-{count}-{DATASET_VERSION}.npz"
    if path.exists():
        data = np.load(path)
        return data["images"], data["labels"]
    chunks = [(split, size, a, min(a + 500, offset + count)) for a in range(offset, offset + count, 500)]
    with multiprocessing.Pool(os.cpu_count()) as pool:
        parts = pool.map(_render_range, chunks)
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    tmp = path.with_name(path.stem + ".partial.npz")
    np.savez(tmp, images=images, labels=labels)
    os.replace(tmp, path)  # an interrupted run never leaves a truncated cache file under the final name
    return images, labels


def to_input(images: np.ndarray):
    import torch

    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
    return x.contiguous(memory_format=torch.channels_last)  # ~25% faster depthwise convs on CPU


def augment(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Label-preserving variants: every class is symmetric under the dihedral group up to rotation,
    and labels ignore colour, so rotate/flip, permute the colour channels and sometimes invert."""
    out = np.empty_like(images)
    for k, img in enumerate(images):
        img = np.rot90(img, int(rng.integers(4)))
        if rng.integers(2):
            img = img[:, ::-1]
        img = img[..., rng.permutation(3)]
        out[k] = 255 - img if rng.integers(2) else img
    return out


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


def widen(small, family: str, alpha: float, seed: int, noise: float = 0.01):
    """A wider net computing the same function as `small` (Net2WiderNet): new channel j copies old
    channel j mod old_count, and consumers divide the copied input weights by the replica count.
    The mapping depends only on the channel counts, so tensors joined by a residual add agree."""
    import torch

    big = build_torch(family, alpha)
    gen = torch.Generator().manual_seed(seed)

    def mapping(old: int, new: int) -> tuple[torch.Tensor, torch.Tensor]:
        if new < old:
            raise ValueError(f"cannot widen {old} channels to {new}")
        index = torch.arange(new) % old
        return index, torch.bincount(index, minlength=old).double()[index]

    def jitter(w: torch.Tensor) -> torch.Tensor:
        return w + noise * w.std() * torch.randn(w.shape, generator=gen, dtype=w.dtype)

    current = torch.arange(3), torch.ones(3, dtype=torch.float64)
    saved = {}
    with torch.no_grad():
        for s, b in zip(small.spec, big.spec):
            if s.kind == "save":
                saved[s.name] = current
            elif s.kind == "add":
                assert torch.equal(saved[s.name][0], current[0]), s.name
            elif s.kind == "conv":
                (sc, sbn), (bc, bbn) = small.mods[s.name], big.mods[b.name]
                out_index, _ = mapping(s.out_channels, b.out_channels)
                w = sc.weight.double()[out_index]
                if s.groups == 1:
                    in_index, in_count = current
                    w = w[:, in_index] / in_count[None, :, None, None]
                bc.weight.copy_(jitter(w).float())
                for name in ("weight", "bias", "running_mean", "running_var"):
                    getattr(bbn, name).copy_(getattr(sbn, name)[out_index])
                current = mapping(s.out_channels, b.out_channels)
            elif s.kind == "fc":
                in_index, in_count = current
                sf, bf = small.mods[s.name], big.mods[b.name]
                bf.weight.copy_(jitter(sf.weight.double()[:, in_index] / in_count[None, :]).float())
                bf.bias.copy_(sf.bias)
    return big


def train_phase(net, images, labels, *, note: str, steps: int, lr: float, batch: int, seed: int,
                weight_decay: float = 1e-4, easy_first: np.ndarray | None = None, warmup: float = 0.15,
                monitor=None, teacher=None, temperature: float = 2.0) -> None:
    """AdamW with a one-cycle schedule on augmented batches; with `easy_first` (difficulty scores),
    the first quarter of the steps draws only from the easiest 40% of the images (a curriculum).
    With `teacher` = (net, the same images rendered at the teacher's resolution), half the loss is
    distillation: small models at low resolution overfit their hard (small-shape) images, and a
    wider, higher-resolution teacher's soft targets generalize better than the labels alone."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    g = np.random.default_rng(seed)
    n = len(images)
    decay, no_decay = [], []
    for _, p in net.named_parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0}], lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=warmup)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    net.to(memory_format=torch.channels_last)
    net.train()
    if teacher is not None:
        teacher[0].to(memory_format=torch.channels_last).eval()
    order = np.concatenate([g.permutation(n) for _ in range(steps * batch // n + 2)])
    if easy_first is not None:
        easy = np.argsort(easy_first)[: int(0.4 * n)]
        warm = steps // 4
        order[: warm * batch] = g.choice(easy, warm * batch)
    t0, running = time.time(), []
    for step in range(steps):
        idx = order[step * batch:(step + 1) * batch]
        same_draws = copy.deepcopy(g)  # the teacher's copy of each image gets the same augmentation
        x, y = to_input(augment(images[idx], g)), torch.from_numpy(labels[idx])
        opt.zero_grad(set_to_none=True)
        logits = net(x)
        loss = loss_fn(logits, y)
        if teacher is not None:
            with torch.no_grad():
                soft = torch.softmax(teacher[0](to_input(augment(teacher[1][idx], same_draws))) / temperature, 1)
            kd = torch.nn.functional.kl_div(torch.log_softmax(logits / temperature, 1), soft, reduction="batchmean")
            loss = 0.5 * loss + 0.5 * temperature ** 2 * kd
        loss.backward()
        opt.step()
        sched.step()
        running.append(loss.item())
        if (step + 1) % 100 == 0 or step == steps - 1:
            extra = f" held-out {monitor():.3f}" if monitor and ((step + 1) % 500 == 0 or step == steps - 1) else ""
            print(f"  [{note}] step {step + 1}/{steps} loss {np.mean(running):.3f}{extra} ({time.time() - t0:.0f}s)",
                  flush=True)
            running = []
            net.train()


def evaluate_torch(net, images, labels, batch: int = 100) -> float:
    import torch

    net.eval()
    correct = 0
    with torch.no_grad():
        for a in range(0, len(images), batch):
            correct += int((net(to_input(images[a:a + batch])).argmax(1).numpy() == labels[a:a + batch]).sum())
    return correct / len(images)


def distill_narrowest(family: str, args) -> dict[str, float]:
    """The narrowest, lowest-resolution model learns again from the labels and from the next model
    of its chain (teacher), on fresh images rendered at both resolutions."""
    import torch

    (alpha, res), (t_alpha, t_res) = CHAINS[family][:2]
    name, teacher_name = model_name(family, alpha, res), model_name(family, t_alpha, t_res)
    checkpoint = CHECKPOINTS / f"{name}.distilled.pt"
    student = build_torch(family, alpha)
    held, held_labels = rendered("heldout", res, args.eval_images)
    print(f"== {name} distilled from {teacher_name}", flush=True)
    if args.resume and checkpoint.exists():
        student.load_state_dict(torch.load(checkpoint))
    else:
        student.load_state_dict(torch.load(CHECKPOINTS / f"{name}.pt"))
        teacher = build_torch(family, t_alpha)
        teacher.load_state_dict(torch.load(CHECKPOINTS / f"{teacher_name}.pt"))
        offset = args.base_images + (len(CHAINS[family]) - 1) * args.finetune_images
        imgs, labels = rendered("train", res, args.distill_images, offset=offset)
        t_imgs, _ = rendered("train", t_res, args.distill_images, offset=offset)
        seed = sum(map(ord, name)) + 7
        train_phase(student, imgs, labels, note=f"{name} distilled", steps=args.distill_steps, lr=args.distill_lr,
                    batch=args.base_batch, seed=seed, warmup=0.1, teacher=(teacher, t_imgs),
                    monitor=lambda: evaluate_torch(student, held[:500], held_labels[:500]))
        torch.save(student.state_dict(), checkpoint)
    acc = evaluate_torch(student, held, held_labels)
    print(f"  torch held-out top-1 at {res}px: {acc:.4f}", flush=True)
    if not args.no_save:
        np.savez_compressed(WEIGHTS_DIR / f"{name}.npz",
                            **{k: v.astype(np.float16) for k, v in fold_weights(student).items()})
    return {name: acc}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="*", default=list(CHAINS), choices=list(CHAINS))
    parser.add_argument("--stop-after", help="zoo name to stop after (the rest of its chain waits for --resume)")
    parser.add_argument("--resume", action="store_true", help="reuse the cached checkpoint of models already trained")
    parser.add_argument("--base-images", type=int, default=40000)
    parser.add_argument("--base-steps", type=int, help=f"default per family: {BASE_STEPS}")
    parser.add_argument("--base-batch", type=int, default=64)
    parser.add_argument("--base-lr", type=float, default=0.003,
                        help="AdamW 3e-3 leaves the initial loss plateau sooner than SGD 0.08 on this data")
    parser.add_argument("--finetune-images", type=int, default=12000)
    parser.add_argument("--finetune-steps", type=int, default=300)
    parser.add_argument("--finetune-batch", type=int, default=32)
    parser.add_argument("--finetune-lr", type=float, default=0.001)
    parser.add_argument("--distill-images", type=int, default=30000)
    parser.add_argument("--distill-steps", type=int, default=2000,
                        help="refine each chain's narrowest model against the next one (0: skip)")
    parser.add_argument("--distill-lr", type=float, default=0.001)
    parser.add_argument("--distill-only", action="store_true",
                        help="only the distillation step (needs the chain's first two checkpoints)")
    parser.add_argument("--eval-images", type=int, default=1500)
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    WEIGHTS_DIR.mkdir(parents=True, exist_ok=True)
    CHECKPOINTS.mkdir(parents=True, exist_ok=True)
    summary = {}
    for family in args.families:
        if args.distill_only:
            summary.update(distill_narrowest(family, args))
            continue
        net = None
        for position, (alpha, res) in enumerate(CHAINS[family]):
            name = model_name(family, alpha, res)
            seed = sum(map(ord, name))
            checkpoint = CHECKPOINTS / f"{name}.pt"
            held, held_labels = rendered("heldout", res, args.eval_images)
            print(f"== {name}", flush=True)
            if args.resume and checkpoint.exists():
                net = build_torch(family, alpha)
                net.load_state_dict(torch.load(checkpoint))
                print("  resumed from", checkpoint, flush=True)
            else:
                def monitor():
                    return evaluate_torch(net, held[:500], held_labels[:500])
                if position == 0:
                    torch.manual_seed(seed)
                    net = build_torch(family, alpha)
                    imgs, labels = rendered("train", res, args.base_images)
                    train_phase(net, imgs, labels, note=f"{name}", steps=args.base_steps or BASE_STEPS[family], lr=args.base_lr,
                                batch=args.base_batch, seed=seed, easy_first=difficulty("train", args.base_images),
                                monitor=monitor)
                else:
                    net = widen(net, family, alpha, seed)
                    print(f"  widened: held-out {monitor():.3f} before fine-tuning", flush=True)
                    # Fine-tuning images come after the base images, so each stage sees new ones.
                    offset = args.base_images + (position - 1) * args.finetune_images
                    imgs, labels = rendered("train", res, args.finetune_images, offset=offset)
                    train_phase(net, imgs, labels, note=f"{name}", steps=args.finetune_steps, lr=args.finetune_lr,
                                batch=args.finetune_batch, seed=seed, warmup=0.1, monitor=monitor)
                torch.save(net.state_dict(), checkpoint)
            acc = evaluate_torch(net, held, held_labels)
            print(f"  torch held-out top-1 at {res}px: {acc:.4f}", flush=True)
            if not args.no_save:
                np.savez_compressed(WEIGHTS_DIR / f"{name}.npz",
                                    **{k: v.astype(np.float16) for k, v in fold_weights(net).items()})
            summary[name] = acc
            if name == args.stop_after:
                break
        else:
            if args.distill_steps:
                summary.update(distill_narrowest(family, args))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
