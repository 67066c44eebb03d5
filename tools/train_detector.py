"""Train the SSD-lite shapes detector (build-time tool; torch 2.11+, numpy, onnx, onnxruntime).

    python3 tools/train_detector.py --device cuda --images 40000 --steps 30000 --batch 128 --time-budget 420
    python tools/train_detector.py --steps 30 --batch 8 --images 64 --eval-images 16   # CPU smoke run

Measured on one H100 (16 cores, torch 2.11): 30000 images render in 45 s, a step of 128 takes ~24 ms;
with --time-budget 235 (7549 steps) the held-out mAP@0.5 is 0.946 (regular NMS, score threshold 0.3).

The network is mlts/models/ssdlite.py's description, built here in torch; its MobileNet v2 backbone
starts from the trained classifier (mlts/models/weights/mobilenet_v2_<alpha>_<res>.npz, batch norm
folded into conv weight + bias, so every layer here is a biased convolution). Training images are
rendered on all cores into a cache ($MLTS_CACHE or ~/.cache/mlts/train-data), moved to the device
once, and augmented there per batch: the eight rotations/flips with their boxes, colour-channel
permutation and inversion (labels ignore orientation and colour). Loss: SSD matching (anchors at
IoU >= 0.5 with a true box, plus each box's best anchor; below 0.4 background; between: ignored),
sigmoid focal loss on the class logits (the graph's scores are their sigmoid) and Huber loss on the
positive anchors' encodings (ssdlite.BOX_SCALES). AdamW, linear warm-up then cosine decay, the
pretrained backbone at a quarter of the new layers' rate (after 200 CPU steps: mAP 0.40 against 0.18
at the full rate, which disturbs the BN-free folded features); the
schedule follows whichever of --steps and --time-budget runs out first, so a run cut by the budget
still ends annealed; the weights are written (float16 .npz, atomically) at the end or on Ctrl-C.
Finally the shipped weights are built into the ONNX graph (postprocess=False), run by onnxruntime
on the held-out split, decoded and suppressed in numpy with ssdlite.POSTPROCESS, and scored by
mAP@0.5. Seeds are fixed.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlts.benchmark.detection_metrics import Detections, box_iou, mean_average_precision  # noqa: E402
from mlts.datasets.shapes_detection import MAX_OBJECTS, ShapesDetectionDataset  # noqa: E402
from mlts.fileio import atomic_write  # noqa: E402
from mlts.models import ssdlite  # noqa: E402
from mlts.models.mobilenet import model_name  # noqa: E402

WEIGHTS_DIR = ROOT / "mlts" / "models" / "weights"
CACHE = Path(os.environ.get("MLTS_CACHE", Path.home() / ".cache" / "mlts")) / "train-data"
# Rendered images depend on the generators' code: a changed generator never reuses stale cached pixels.
DATASET_VERSION = hashlib.sha256(b"".join((ROOT / "mlts" / "datasets" / f).read_bytes()
                                          for f in ("shapes.py", "shapes_detection.py"))).hexdigest()[:10]
POSITIVE_IOU, NEGATIVE_IOU = 0.5, 0.4
FOCAL_ALPHA, FOCAL_GAMMA, PRIOR = 0.25, 2.0, 0.01


# -- data ----------------------------------------------------------------------------------------------
def _render_range(args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    split, size, start, stop = args
    ds = ShapesDetectionDataset(split, size)
    images = np.empty((stop - start, size, size, 3), np.uint8)
    boxes = np.zeros((stop - start, MAX_OBJECTS, 4), np.float32)
    classes = np.full((stop - start, MAX_OBJECTS), -1, np.int64)
    for k, i in enumerate(range(start, stop)):
        images[k], b, c = ds[i]
        boxes[k, :len(b)], classes[k, :len(c)] = b, c
    return images, boxes, classes


def rendered(split: str, count: int, workers: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(images [N, R, R, 3] uint8, boxes [N, MAX_OBJECTS, 4], classes [N, MAX_OBJECTS] with -1 padding),
    rendered on `workers` processes and cached on disk."""
    size = ssdlite.RESOLUTION
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"detection-{split}-{size}-{offset}-{count}-{DATASET_VERSION}.npz"
    if path.exists():
        data = np.load(path)
        return data["images"], data["boxes"], data["classes"]
    chunk = max(1, min(250, count // max(1, workers)))
    chunks = [(split, size, a, min(a + chunk, offset + count)) for a in range(offset, offset + count, chunk)]
    t0 = time.time()
    if workers > 1:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            parts = pool.map(_render_range, chunks)
    else:
        parts = [_render_range(c) for c in chunks]
    images, boxes, classes = (np.concatenate([p[i] for p in parts]) for i in range(3))
    buffer = io.BytesIO()
    np.savez(buffer, images=images, boxes=boxes, classes=classes)
    atomic_write(path, buffer.getbuffer(), fsync=False)
    print(f"rendered {count} {split} images in {time.time() - t0:.0f}s -> {path}", flush=True)
    return images, boxes, classes


# -- model ---------------------------------------------------------------------------------------------
def build_torch():
    """The torch network of ssdlite.network(): forward(x NCHW in [-1, 1]) -> (encodings [B, A, 4],
    class logits [B, A, 1 + classes]), anchors in ssdlite.anchors()'s order."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ops = ssdlite.network()
            self.convs = nn.ModuleDict()
            for op in self.ops:
                layer = op.layer
                if layer.kind == "conv":
                    self.convs[layer.name] = nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel,
                                                       layer.stride, layer.kernel // 2, groups=layer.groups)

        def forward(self, x):
            tensors = {"image": x}
            for op in self.ops:
                if op.layer.kind == "add":
                    tensors[op.output] = tensors[op.inputs[0]] + tensors[op.inputs[1]]
                    continue
                y = self.convs[op.layer.name](tensors[op.inputs[0]])
                tensors[op.output] = torch.clamp(y, 0.0, 6.0) if op.layer.relu6 else y
            batch = x.shape[0]
            outputs = []
            for kind, per_anchor in (("box", 4), ("class", ssdlite.NUM_CLASSES + 1)):
                parts = [tensors[f"{kind}{k}_pw"].permute(0, 2, 3, 1).reshape(batch, -1, per_anchor)
                         for k in range(len(ssdlite.FEATURE_MAPS))]
                outputs.append(torch.cat(parts, dim=1))
            return outputs[0], outputs[1]

    return Net()


def initialize(net, backbone_weights: Path | None) -> list[str]:
    """Backbone from the classifier's folded weights (names shared with mobilenet.py); heads' class biases
    at the focal-loss prior (background column: the opposite), so the first steps are not swamped by
    easy negatives. Returns the names of the layers loaded."""
    import torch

    loaded = []
    with torch.no_grad():
        if backbone_weights is not None:
            data = np.load(backbone_weights)
            for name, conv in net.convs.items():
                if f"{name}.weight" in data.files and tuple(data[f"{name}.weight"].shape) == tuple(conv.weight.shape):
                    conv.weight.copy_(torch.from_numpy(data[f"{name}.weight"].astype(np.float32)))
                    conv.bias.copy_(torch.from_numpy(data[f"{name}.bias"].astype(np.float32)))
                    loaded.append(name)
        prior = math.log((1 - PRIOR) / PRIOR)
        for k, fm in enumerate(ssdlite.FEATURE_MAPS):
            bias = net.convs[f"class{k}_pw"].bias.view(fm.anchors_per_cell, ssdlite.NUM_CLASSES + 1)
            bias[:, 0], bias[:, 1:] = prior, -prior
            torch.nn.init.normal_(net.convs[f"class{k}_pw"].weight, std=0.01)
            torch.nn.init.normal_(net.convs[f"box{k}_pw"].weight, std=0.01)
            net.convs[f"box{k}_pw"].bias.zero_()
    return loaded


def weights_of(net) -> dict[str, np.ndarray]:
    """ONNX-layout weights (OIHW, [O]) of every convolution, named as ssdlite.weight_shapes()."""
    out = {}
    for name, conv in net.convs.items():
        out[f"{name}.weight"] = conv.weight.detach().cpu().double().numpy()
        out[f"{name}.bias"] = conv.bias.detach().cpu().double().numpy()
    return out


def save_weights(net, path: Path) -> dict[str, np.ndarray]:
    """float16 .npz, written atomically; returns what was stored (as float32) for evaluation."""
    stored = {k: v.astype(np.float16) for k, v in weights_of(net).items()}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **stored)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, buffer.getbuffer())
    print(f"weights -> {path} ({path.stat().st_size / 1e6:.2f} MB)", flush=True)
    return {k: v.astype(np.float32) for k, v in stored.items()}


# -- augmentation, matching, loss (torch, on the training device) -------------------------------------------
def augment(images, boxes, gen):
    """Per image: optional transpose, horizontal and vertical flips (together: the 8 rotations/flips), with
    the boxes moved alike; a colour-channel permutation and, half the time, inversion."""
    import torch

    batch, device = images.shape[0], images.device

    def coin():
        return (torch.rand(batch, generator=gen) < 0.5).to(device)

    transpose, flip_h, flip_v, invert = coin(), coin(), coin(), coin()
    perm = torch.argsort(torch.rand(batch, 3, generator=gen), dim=1).to(device)
    pixel = (batch, 1, 1, 1)
    x = torch.where(transpose.view(pixel), images.transpose(1, 2), images)
    x = torch.where(flip_h.view(pixel), x.flip(2), x)
    x = torch.where(flip_v.view(pixel), x.flip(1), x)
    x = torch.gather(x, 3, perm[:, None, None, :].expand(-1, x.shape[1], x.shape[2], 3))
    x = torch.where(invert.view(pixel), 255 - x, x)
    b = torch.where(transpose.view(batch, 1, 1), boxes[..., [1, 0, 3, 2]], boxes)
    b = torch.where(flip_h.view(batch, 1, 1), torch.stack([b[..., 0], 1 - b[..., 3], b[..., 2], 1 - b[..., 1]], -1), b)
    b = torch.where(flip_v.view(batch, 1, 1), torch.stack([1 - b[..., 2], b[..., 1], 1 - b[..., 0], b[..., 3]], -1), b)
    return x, b


def to_input(images):
    """NHWC uint8 -> NCHW float in [-1, 1] (preprocess.to_float_input's arithmetic)."""
    import torch

    x = images.permute(0, 3, 1, 2).float() / 127.5 - 1.0
    return x.contiguous(memory_format=torch.channels_last)


def corners(center_size):
    """(yc, xc, h, w) -> (ymin, xmin, ymax, xmax)."""
    import torch

    yc, xc, h, w = center_size.unbind(-1)
    return torch.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], -1)


def pairwise_iou(a, b):
    """a [A, 4], b [B, G, 4] (ymin, xmin, ymax, xmax) -> [B, A, G]."""
    import torch

    a, b = a[None, :, None, :], b[:, None, :, :]
    h = (torch.minimum(a[..., 2], b[..., 2]) - torch.maximum(a[..., 0], b[..., 0])).clamp(min=0)
    w = (torch.minimum(a[..., 3], b[..., 3]) - torch.maximum(a[..., 1], b[..., 1])).clamp(min=0)
    inter = h * w
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    return inter / (area_a + area_b - inter).clamp(min=1e-12)


def targets(anchors_cs, boxes, classes):
    """SSD matching -> (class targets [B, A] with 0 = background and -1 = ignored, box encodings [B, A, 4],
    positive mask [B, A])."""
    import torch

    valid = classes >= 0
    iou = pairwise_iou(corners(anchors_cs), boxes).masked_fill(~valid[:, None, :], -1.0)
    best_iou, best_gt = iou.max(dim=2)
    best_anchor = iou.argmax(dim=1)  # [B, G]: every true box keeps its best anchor
    b_idx, g_idx = valid.nonzero(as_tuple=True)
    a_idx = best_anchor[b_idx, g_idx]
    best_iou[b_idx, a_idx] = 2.0
    best_gt[b_idx, a_idx] = g_idx
    positive = best_iou >= POSITIVE_IOU
    labels = torch.where(positive, classes.gather(1, best_gt) + 1, torch.zeros_like(best_gt))
    labels = torch.where(~positive & (best_iou >= NEGATIVE_IOU), torch.full_like(labels, -1), labels)
    matched = boxes.gather(1, best_gt[..., None].expand(-1, -1, 4))
    h = (matched[..., 2] - matched[..., 0]).clamp(min=1e-6)
    w = (matched[..., 3] - matched[..., 1]).clamp(min=1e-6)
    cy, cx = matched[..., 0] + h / 2, matched[..., 1] + w / 2
    ay, ax, ah, aw = anchors_cs.unbind(-1)
    sy, sx, sh, sw = ssdlite.BOX_SCALES
    encoded = torch.stack([(cy - ay) / ah * sy, (cx - ax) / aw * sx, torch.log(h / ah) * sh,
                           torch.log(w / aw) * sw], -1)
    return labels, encoded, positive


def detection_loss(encodings, logits, labels, encoded, positive):
    """(focal class loss, Huber box loss), each summed and divided by the number of positive anchors."""
    import torch
    import torch.nn.functional as F

    count = positive.sum().clamp(min=1).float()
    used = labels >= 0
    target = F.one_hot(labels.clamp(min=0), ssdlite.NUM_CLASSES + 1).float()
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    p = torch.sigmoid(logits)
    p_t = p * target + (1 - p) * (1 - target)
    weight = FOCAL_ALPHA * target + (1 - FOCAL_ALPHA) * (1 - target)
    focal = (ce * (1 - p_t) ** FOCAL_GAMMA * weight).sum(-1)
    class_loss = (focal * used).sum() / count
    box_loss = F.huber_loss(encodings[positive], encoded[positive], delta=1.0, reduction="sum") / count
    return class_loss, box_loss


# -- post-processing and scoring (numpy, ssdlite.POSTPROCESS) ------------------------------------------------
def decode(encodings: np.ndarray, anchors_cs: np.ndarray, params: dict) -> np.ndarray:
    """[A, 4] encodings -> [A, 4] (ymin, xmin, ymax, xmax), as DETECTION_POSTPROCESSING decodes them."""
    yc = anchors_cs[:, 0] + anchors_cs[:, 2] * encodings[:, 0] / params["scale_y"]
    xc = anchors_cs[:, 1] + anchors_cs[:, 3] * encodings[:, 1] / params["scale_x"]
    h = anchors_cs[:, 2] * np.exp(encodings[:, 2] / params["scale_h"])
    w = anchors_cs[:, 3] * np.exp(encodings[:, 3] / params["scale_w"])
    return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], -1)


def _nms(boxes: np.ndarray, scores: np.ndarray, threshold: float, iou: float, limit: int) -> list[int]:
    order = [int(i) for i in np.flatnonzero(scores > threshold)]
    order.sort(key=lambda i: -scores[i])
    kept: list[int] = []
    for i in order:
        if len(kept) == limit:
            break
        if not kept or box_iou(boxes[i], boxes[kept]).max() < iou:
            kept.append(i)
    return kept


def postprocess(encodings: np.ndarray, scores: np.ndarray, anchors_cs: np.ndarray, params: dict
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's (boxes, classes 0..9, scores) after NMS, regular (per class) or fast (class-agnostic)."""
    boxes = decode(encodings, anchors_cs, params)
    found = []
    if params["use_regular_nms"]:
        for c in range(1, scores.shape[1]):
            found += [(scores[a, c], a, c) for a in _nms(boxes, scores[:, c], params["score_threshold"],
                                                           params["iou_threshold"], params["detections_per_class"])]
        found = sorted(found, key=lambda f: -f[0])[:params["max_num_detections"]]
    else:
        best = scores[:, 1:].max(1)
        for a in _nms(boxes, best, params["score_threshold"], params["iou_threshold"], params["max_num_detections"]):
            for c in np.argsort(-scores[a, 1:], kind="stable")[:params["max_classes_per_detection"]]:
                found.append((scores[a, c + 1], a, c + 1))
    return (np.array([boxes[a] for _, a, _ in found]).reshape(-1, 4), np.array([c - 1 for _, _, c in found]),
            np.array([s for s, _, _ in found]))


def score(outputs: list[tuple[np.ndarray, np.ndarray]], truths, params: dict) -> float:
    """mAP@0.5 of the network outputs (encodings, scores) of each image, post-processed with `params`."""
    anchors_cs = ssdlite.anchors()
    detections = []
    for encodings, scores in outputs:
        boxes, classes, found = postprocess(encodings, scores, anchors_cs, params)
        detections.append(Detections(found.astype(np.float64), boxes.astype(np.float64), classes.astype(np.int64)))
    return mean_average_precision(detections, truths)[0] or 0.0


def torch_outputs(net, images: np.ndarray, device, batch: int = 100) -> list[tuple[np.ndarray, np.ndarray]]:
    import torch

    net.eval()
    out = []
    with torch.no_grad():
        for a in range(0, len(images), batch):
            enc, logits = net(to_input(torch.from_numpy(images[a:a + batch]).to(device)))
            out += list(zip(enc.float().cpu().numpy(), torch.sigmoid(logits).float().cpu().numpy()))
    net.train()
    return out


def onnxruntime_outputs(weights: dict, images: np.ndarray, threads: int) -> list[tuple[np.ndarray, np.ndarray]]:
    import onnxruntime as ort

    from mlts.datasets.preprocess import to_float_input

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(ssdlite.build_onnx(weights, postprocess=False).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    out = []
    for image in images:
        enc, scores = session.run(["box_encodings", "class_scores"], {"image": to_float_input(image)})
        out.append((enc[0], scores[0]))
    return out


def truths_of(boxes: np.ndarray, classes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(b[c >= 0].astype(np.float64), c[c >= 0]) for b, c in zip(boxes, classes)]


# -- training --------------------------------------------------------------------------------------------
def learning_rate(base: float, progress: float, warmup: float) -> float:
    if progress < warmup:
        return base * progress / warmup
    return base * 0.5 * (1 + math.cos(math.pi * min(1.0, (progress - warmup) / (1 - warmup))))


def train(net, data, args, device, held, deadline: float) -> None:
    import torch

    images, boxes, classes = (torch.from_numpy(a).to(device) for a in data)
    anchors_cs = torch.from_numpy(ssdlite.anchors()).to(device)
    backbone = {f"convs.{layer.name}." for layer in ssdlite.backbone_layers() if layer.kind == "conv"}
    groups = {}
    for name, p in net.named_parameters():
        pretrained = name[:name.rindex(".") + 1] in backbone
        key = (pretrained, name.endswith("weight"))
        groups.setdefault(key, []).append(p)
    opt = torch.optim.AdamW([{"params": params, "weight_decay": args.weight_decay if is_weight else 0.0,
                              "lr_scale": args.backbone_lr_scale if pretrained else 1.0}
                             for (pretrained, is_weight), params in groups.items()], lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed)
    n = images.shape[0]
    order = torch.cat([torch.randperm(n, generator=gen) for _ in range(args.steps * args.batch // n + 1)])
    start, running, counted = time.time(), torch.zeros(2, device=device), 0
    net.train()
    step = 0
    while step < args.steps:
        progress = max(step / args.steps, (time.time() - start) / max(1e-9, deadline - start))
        if progress >= 1:
            print(f"time budget reached after {step} steps", flush=True)
            break
        lr = learning_rate(args.lr, progress, args.warmup)
        for group in opt.param_groups:
            group["lr"] = lr * group["lr_scale"]
        idx = order[step * args.batch:(step + 1) * args.batch].to(device)
        x, b = augment(images[idx], boxes[idx], gen)
        labels, encoded, positive = targets(anchors_cs, b, classes[idx])
        encodings, logits = net(to_input(x))
        class_loss, box_loss = detection_loss(encodings, logits, labels, encoded, positive)
        loss = class_loss + box_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        running += torch.stack([class_loss.detach(), box_loss.detach()])  # no host sync until the log line
        counted += 1
        if step % args.log_every == 0 or step == args.steps:
            done = (running / counted).tolist()
            extra = ""
            if args.eval_every and step % args.eval_every == 0 and held is not None:
                extra = f" held-out mAP@0.5 {score(torch_outputs(net, held[0], device), held[1], ssdlite.POSTPROCESS):.3f}"
            print(f"step {step}/{args.steps} lr {lr:.2e} class {done[0]:.3f} box {done[1]:.3f}{extra} "
                  f"({time.time() - start:.0f}s, {(time.time() - start) / step * 1000:.0f} ms/step)", flush=True)
            running, counted = torch.zeros(2, device=device), 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, ...")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--backbone-lr-scale", type=float, default=0.25,
                        help="the pretrained backbone's learning rate, relative to the new layers'")
    parser.add_argument("--warmup", type=float, default=0.03, help="fraction of the run spent warming up")
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--images", type=int, default=30000, help="training images rendered (cached)")
    parser.add_argument("--eval-images", type=int, default=ShapesDetectionDataset("heldout").count)
    parser.add_argument("--monitor-images", type=int, default=200, help="held-out images scored during training")
    parser.add_argument("--eval-every", type=int, default=1000, help="steps between held-out mAP checks (0: none)")
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds from start to the end of training (rendering included); the schedule anneals "
                             "within it")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="rendering processes")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch and onnxruntime CPU threads")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", type=Path, default=WEIGHTS_DIR / f"{ssdlite.MODEL_NAME}.npz")
    parser.add_argument("--backbone", type=Path,
                        default=WEIGHTS_DIR / f"{model_name('v2', ssdlite.ALPHA, ssdlite.RESOLUTION)}.npz")
    args = parser.parse_args()
    args.log_every = max(1, min(args.log_every, args.steps))

    import torch

    began = time.time()
    deadline = began + args.time_budget if args.time_budget else float("inf")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    print(f"{ssdlite.MODEL_NAME}: {ssdlite.num_anchors()} anchors, {ssdlite.parameters() / 1e6:.2f} M parameters, "
          f"{ssdlite.macs() / 1e6:.0f} M MACs; torch {torch.__version__} on {device}", flush=True)
    data = rendered("train", args.images, args.workers)
    held_images, held_boxes, held_classes = rendered("heldout", args.eval_images, args.workers)
    truths = truths_of(held_boxes, held_classes)
    monitor = (held_images[:args.monitor_images], truths[:args.monitor_images])
    net = build_torch()
    loaded = initialize(net, args.backbone if args.backbone.exists() else None)
    print(f"backbone: {len(loaded)} layers from {args.backbone.name if loaded else 'nowhere (random)'}", flush=True)
    net.to(device).to(memory_format=torch.channels_last)
    try:
        train(net, data, args, device, monitor, deadline)
    except KeyboardInterrupt:
        print("interrupted: saving the weights as they are", flush=True)
    print(f"training done at {time.time() - began:.0f}s", flush=True)
    weights = save_weights(net, args.out)
    outputs = onnxruntime_outputs(weights, held_images, args.threads)
    results = {}
    for regular in (1, 0):
        for threshold in (ssdlite.POSTPROCESS["score_threshold"], 0.05):
            params = dict(ssdlite.POSTPROCESS, use_regular_nms=regular, score_threshold=threshold)
            results[(regular, threshold)] = score(outputs, truths, params)
            print(f"  {'regular' if regular else 'fast'} NMS, score threshold {threshold:g}: "
                  f"mAP@0.5 {results[(regular, threshold)]:.4f}", flush=True)
    shipped = results[(ssdlite.POSTPROCESS["use_regular_nms"], ssdlite.POSTPROCESS["score_threshold"])]
    print(f"held-out mAP@0.5 (ONNX via onnxruntime, {len(held_images)} images, ssdlite.POSTPROCESS): {shipped:.4f}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
