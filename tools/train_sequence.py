"""Train the sequence workload's LSTM on the spoken-command set (build-time tool; needs torch==2.13.0).

    python tools/train_sequence.py [--device cpu|cuda] [--epochs N] [--no-save]

The architecture comes from mlts/models/speech_lstm.py (torch.nn.LSTM, batch first, + Linear on the
last hidden state). Training samples are rendered once on all cores and cached on disk (keyed by the
data set generator's source hash, so a changed generator never reuses stale features). Adam with a
one-cycle schedule, fixed seeds. The weights are converted to ONNX's layout and gate order (torch's
i, f, g, o -> ONNX's i, o, f, c; the two biases kept apart as ONNX's [Wb, Rb]), rounded to float16 and
written atomically to mlts/models/weights/lstm_commands.npz; the held-out accuracy printed last is that
of the ONNX model rebuilt from the saved float16 weights, run by onnxruntime.
"""
from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlts.datasets.commands import FRAMES, MEL_BINS, SPLITS, CommandsDataset  # noqa: E402
from mlts.models import speech_lstm  # noqa: E402

CACHE = Path(os.environ.get("MLTS_CACHE", Path.home() / ".cache" / "mlts")) / "train-data"
DATASET_VERSION = hashlib.sha256((ROOT / "mlts" / "datasets" / "commands.py").read_bytes()).hexdigest()[:10]
SEED = 20260518


def _render_range(args: tuple[str, int, int]) -> tuple[np.ndarray, np.ndarray]:
    split, start, stop = args
    ds = CommandsDataset(split)
    features = np.empty((stop - start, FRAMES, MEL_BINS), np.float32)
    labels = np.empty(stop - start, np.int64)
    for k, i in enumerate(range(start, stop)):
        features[k], labels[k] = ds[i]
    return features, labels


def rendered(split: str, count: int, workers: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` samples of `split` ([N, FRAMES, MEL_BINS] float32, labels), cached on disk."""
    count = min(count, SPLITS[split])
    path = CACHE / f"commands-{split}-{count}-{DATASET_VERSION}.npz"
    if path.exists():
        with np.load(path) as data:
            return data["features"], data["labels"]
    chunks = [(split, a, min(a + 2000, count)) for a in range(0, count, 2000)]
    if workers > 1:
        with multiprocessing.Pool(workers) as pool:
            parts = pool.map(_render_range, chunks)
    else:
        parts = [_render_range(c) for c in chunks]
    features = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    CACHE.mkdir(parents=True, exist_ok=True)
    _atomic_savez(path, compressed=False, features=features, labels=labels)
    return features, labels


def _atomic_savez(path: Path, *, compressed: bool, **arrays: np.ndarray) -> None:
    """Write next to `path` then rename: an interrupted run never leaves a truncated file under the final name."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem + ".", suffix=".partial.npz")
    try:
        with os.fdopen(fd, "wb") as f:
            (np.savez_compressed if compressed else np.savez)(f, **arrays)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would otherwise stick to the shipped file
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def build_torch():
    import torch
    from torch import nn

    class SpeechLSTM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(speech_lstm.INPUT_SIZE, speech_lstm.HIDDEN, batch_first=True)
            self.classifier = nn.Linear(speech_lstm.HIDDEN, speech_lstm.NUM_CLASSES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            _, (h, _) = self.lstm(x)
            return self.classifier(h[-1])

    return SpeechLSTM()


def onnx_weights(net) -> dict[str, np.ndarray]:
    """The torch module's parameters in ONNX's layouts and gate order (float64, rounded by the caller)."""
    def arr(t):
        return t.detach().cpu().double().numpy()

    lstm = net.lstm
    return {
        "lstm.W": speech_lstm.gates_torch_to_onnx(arr(lstm.weight_ih_l0))[None],
        "lstm.R": speech_lstm.gates_torch_to_onnx(arr(lstm.weight_hh_l0))[None],
        "lstm.B": np.concatenate([speech_lstm.gates_torch_to_onnx(arr(lstm.bias_ih_l0)),
                                  speech_lstm.gates_torch_to_onnx(arr(lstm.bias_hh_l0))])[None],
        "classifier.weight": arr(net.classifier.weight),
        "classifier.bias": arr(net.classifier.bias),
    }


def evaluate_torch(net, features: np.ndarray, labels: np.ndarray, device: str, batch: int = 500) -> float:
    import torch

    net.eval()
    correct = 0
    with torch.no_grad():
        for a in range(0, len(features), batch):
            logits = net(torch.from_numpy(features[a:a + batch]).to(device))
            correct += int((logits.argmax(1).cpu().numpy() == labels[a:a + batch]).sum())
    net.train()
    return correct / len(features)


def evaluate_onnx(weights: dict[str, np.ndarray], features: np.ndarray, labels: np.ndarray) -> float:
    """Accuracy of the ONNX graph built from `weights`, run one sequence at a time by onnxruntime."""
    import onnxruntime as ort

    model = speech_lstm.build_onnx(weights)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    correct = 0
    for x, y in zip(features, labels):
        correct += int(session.run(["logits"], {"features": x[None]})[0].argmax() == y)
    return correct / len(features)


def train(net, features: np.ndarray, labels: np.ndarray, held: tuple[np.ndarray, np.ndarray], args) -> None:
    """Adam, one-cycle learning rate, gradient-norm clipping (recurrent nets), shuffled epochs."""
    import torch
    from torch import nn

    order_rng = np.random.default_rng(SEED)
    steps_per_epoch = len(features) // args.batch
    total = steps_per_epoch * args.epochs
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=total, pct_start=0.15)
    loss_fn = nn.CrossEntropyLoss()
    x_all = torch.from_numpy(features)
    y_all = torch.from_numpy(labels)
    t0 = time.time()
    net.train()
    for epoch in range(args.epochs):
        order = torch.from_numpy(order_rng.permutation(len(features)))
        running = []
        for step in range(steps_per_epoch):
            idx = order[step * args.batch:(step + 1) * args.batch]
            x, y = x_all[idx].to(args.device), y_all[idx].to(args.device)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(net(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            sched.step()
            running.append(loss.item())
        acc = evaluate_torch(net, held[0], held[1], args.device)
        print(f"  epoch {epoch + 1}/{args.epochs} loss {np.mean(running):.4f} held-out {acc:.4f} "
              f"({time.time() - t0:.0f}s)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="torch device: cpu or cuda (same seeds)")
    parser.add_argument("--train-samples", type=int, default=SPLITS["train"])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.006)
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads (1 avoids OpenMP stalls when other jobs share the cores)")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="processes rendering samples")
    parser.add_argument("--no-save", action="store_true", help="train and evaluate, leave the weights file alone")
    parser.add_argument("--output", type=Path, default=speech_lstm.WEIGHTS_PATH)
    args = parser.parse_args()

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, read at CUDA start
    import torch

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(SEED)
    t0 = time.time()
    features, labels = rendered("train", args.train_samples, args.workers)
    held = rendered("heldout", SPLITS["heldout"], args.workers)
    print(f"rendered {len(features)} training and {len(held[0])} held-out samples ({time.time() - t0:.0f}s)",
          flush=True)
    net = build_torch().to(args.device)
    t1 = time.time()
    train(net, features, labels, held, args)
    train_seconds = time.time() - t1
    weights16 = {k: v.astype(np.float16) for k, v in onnx_weights(net).items()}
    if not args.no_save:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        _atomic_savez(args.output, compressed=True, **weights16)
        print(f"wrote {args.output} ({args.output.stat().st_size} bytes)")
        weights = speech_lstm.load_weights(args.output)
    else:
        weights = {k: v.astype(np.float32) for k, v in weights16.items()}
    acc = evaluate_onnx(weights, *held)
    print(f"training {train_seconds:.0f}s; torch held-out {evaluate_torch(net, *held, args.device):.4f}; "
          f"ONNX (float16 weights, onnxruntime) held-out {acc:.4f} on {len(held[0])} samples", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
