"""torchvision's model families re-written compactly in plain torch (torchvision cannot be installed beside
the CPU torch), so that torch.onnx.export writes the operator patterns torchvision's models write: the same
layer types and order, activations, SE blocks, stems, pooling (ceil_mode included), classifiers and
channel counts. `width` scales every channel count (1.0 = torchvision's model) to keep tests fast."""
from __future__ import annotations

import io
import math
import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


def _div(v: float, d: int = 8) -> int:
    """Round a channel count to a multiple of `d`, never more than 10% down (torchvision's rule)."""
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def _w(c: int, width: float) -> int:
    return max(1, int(round(c * width)))


class ConvBN(nn.Sequential):
    """Conv2d (no bias) + BatchNorm2d + optional activation, 'same' padding unless given."""

    def __init__(self, i, o, k=3, s=1, g=1, act=nn.ReLU, p=None, d=1, eps=1e-5):
        p = (k - 1) // 2 * d if p is None else p
        layers = [nn.Conv2d(i, o, k, s, p, dilation=d, groups=g, bias=False), nn.BatchNorm2d(o, eps=eps)]
        super().__init__(*layers, *([act()] if act else []))


class SE(nn.Module):
    """Squeeze-and-excitation: global average pool, 1x1 conv, activation, 1x1 conv, gate, scale."""

    def __init__(self, c, sq, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.fc1, self.act, self.fc2, self.gate = nn.Conv2d(c, sq, 1), act(), nn.Conv2d(sq, c, 1), gate()

    def forward(self, x):
        s = self.gate(self.fc2(self.act(self.fc1(F.adaptive_avg_pool2d(x, 1)))))
        return s * x


class Residual(nn.Module):
    """body(x) (+ x when shapes allow): the inverted-residual blocks of the MobileNet family."""

    def __init__(self, body, res: bool):
        super().__init__()
        self.block, self.res = body, res

    def forward(self, x):
        return self.block(x) + x if self.res else self.block(x)


class Cat(nn.ModuleList):
    """Branches on one input, concatenated along channels (Inception modules, Fire's expand)."""

    def forward(self, x):
        return torch.cat([branch(x) for branch in self], 1)


# -- MobileNetV3 and LR-ASPP ----------------------------------------------------------------------------
# (in, kernel, expanded, out, SE, hardswish, stride); the last three blocks are the dilatable C4 stage.
_V3 = {
    "small": ([(16, 3, 16, 16, 1, 0, 2), (16, 3, 72, 24, 0, 0, 2), (24, 3, 88, 24, 0, 0, 1),
               (24, 5, 96, 40, 1, 1, 2), (40, 5, 240, 40, 1, 1, 1), (40, 5, 240, 40, 1, 1, 1),
               (40, 5, 120, 48, 1, 1, 1), (48, 5, 144, 48, 1, 1, 1), (48, 5, 288, 96, 1, 1, 2),
               (96, 5, 576, 96, 1, 1, 1), (96, 5, 576, 96, 1, 1, 1)], 1024),
    "large": ([(16, 3, 16, 16, 0, 0, 1), (16, 3, 64, 24, 0, 0, 2), (24, 3, 72, 24, 0, 0, 1),
               (24, 5, 72, 40, 1, 0, 2), (40, 5, 120, 40, 1, 0, 1), (40, 5, 120, 40, 1, 0, 1),
               (40, 3, 240, 80, 0, 1, 2), (80, 3, 200, 80, 0, 1, 1), (80, 3, 184, 80, 0, 1, 1),
               (80, 3, 184, 80, 0, 1, 1), (80, 3, 480, 112, 1, 1, 1), (112, 3, 672, 112, 1, 1, 1),
               (112, 5, 672, 160, 1, 1, 2), (160, 5, 960, 160, 1, 1, 1), (160, 5, 960, 160, 1, 1, 1)], 1280),
}


def _v3_features(arch: str, width: float, dilated: bool) -> tuple[nn.Sequential, list[int], list[int]]:
    """The feature stack, each layer's output channels, and the indices of the stride-2 blocks."""
    cfg, _ = _V3[arch]
    feats, chans, strided = [ConvBN(3, _div(16 * width), 3, 2, act=nn.Hardswish, eps=1e-3)], [_div(16 * width)], []
    for n, (i, k, e, o, se, hs, s) in enumerate(cfg):
        i, e, o = _div(i * width), _div(e * width), _div(o * width)
        d = 2 if dilated and n >= len(cfg) - 3 else 1
        act = nn.Hardswish if hs else nn.ReLU
        body = [] if e == i else [ConvBN(i, e, 1, act=act, eps=1e-3)]
        body.append(ConvBN(e, e, k, 1 if d > 1 else s, g=e, act=act, d=d, eps=1e-3))
        if se:
            body.append(SE(e, _div(e // 4), gate=nn.Hardsigmoid))
        body.append(ConvBN(e, o, 1, act=None, eps=1e-3))
        feats.append(Residual(nn.Sequential(*body), s == 1 and i == o))
        chans.append(o)
        if s > 1:
            strided.append(len(feats) - 1)
    feats.append(ConvBN(chans[-1], 6 * chans[-1], 1, act=nn.Hardswish, eps=1e-3))
    chans.append(6 * chans[-1])
    return nn.Sequential(*feats), chans, strided


class MobileNetV3(nn.Module):
    def __init__(self, arch: str, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        self.features, chans, _ = _v3_features(arch, width, False)
        last = _div(_V3[arch][1] * width)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(chans[-1], last), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class LRASPP(nn.Module):
    """lraspp_mobilenet_v3_large: dilated backbone, 'low' at the 4th-last stage boundary (stride 8), a
    sigmoid-gated 1x1 head on the 'high' features, bilinear upsampling (align_corners=False) twice."""

    def __init__(self, width: float = 1.0, num_classes: int = 21, inter: int = 128):
        super().__init__()
        self.backbone, chans, strided = _v3_features("large", width, True)
        stages = [0] + strided + [len(self.backbone) - 1]
        self.low_pos = stages[-4]
        low, high, inter = chans[self.low_pos], chans[-1], _w(inter, width)
        self.cbr = nn.Sequential(nn.Conv2d(high, inter, 1, bias=False), nn.BatchNorm2d(inter), nn.ReLU())
        self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(high, inter, 1, bias=False), nn.Sigmoid())
        self.low_classifier = nn.Conv2d(low, num_classes, 1)
        self.high_classifier = nn.Conv2d(inter, num_classes, 1)

    def forward(self, x):
        low = high = x
        for n, layer in enumerate(self.backbone):
            high = layer(high)
            if n == self.low_pos:
                low = high
        y = self.cbr(high) * self.scale(high)
        y = F.interpolate(y, size=low.shape[-2:], mode="bilinear", align_corners=False)
        y = self.low_classifier(low) + self.high_classifier(y)
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


# -- EfficientNet-B0, MNASNet 1.0 ------------------------------------------------------------------------
class EfficientNetB0(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        c = _div(32 * width)
        feats = [ConvBN(3, c, 3, 2, act=nn.SiLU)]
        for t, k, s, o, n in [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]:
            o = _div(o * width)
            for j in range(n):
                stride, e = (s if j == 0 else 1), _div(c * t)
                body = [] if e == c else [ConvBN(c, e, 1, act=nn.SiLU)]
                body += [ConvBN(e, e, k, stride, g=e, act=nn.SiLU), SE(e, max(1, c // 4), act=nn.SiLU),
                         ConvBN(e, o, 1, act=None)]
                feats.append(Residual(nn.Sequential(*body), stride == 1 and c == o))  # stochastic depth: eval = id
                c = o
        feats.append(ConvBN(c, 4 * c, 1, act=nn.SiLU))
        self.features = nn.Sequential(*feats)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(4 * c, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class MNASNet(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        d = [_div(c * width) for c in (32, 16, 24, 40, 80, 96, 192, 320)]
        layers = [ConvBN(3, d[0], 3, 2), ConvBN(d[0], d[0], 3, 1, g=d[0]), ConvBN(d[0], d[1], 1, act=None)]
        for (k, s, t, n), i, o in zip([(3, 2, 3, 3), (5, 2, 3, 3), (5, 2, 6, 3), (3, 1, 6, 2), (5, 2, 6, 4),
                                       (3, 1, 6, 1)], d[1:], d[2:]):
            for j in range(n):
                c, stride = (i if j == 0 else o), (s if j == 0 else 1)
                body = nn.Sequential(ConvBN(c, c * t, 1), ConvBN(c * t, c * t, k, stride, g=c * t),
                                     ConvBN(c * t, o, 1, act=None))
                layers.append(Residual(body, c == o and stride == 1))
        layers.append(ConvBN(d[-1], 1280, 1))
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(self.layers(x).mean([2, 3]))


# -- ShuffleNetV2 x1.0 ---------------------------------------------------------------------------------------
def channel_shuffle(x, groups: int):
    b, c, h, w = x.size()
    x = torch.transpose(x.view(b, groups, c // groups, h, w), 1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, i, o, stride):
        super().__init__()
        self.stride, bf = stride, o // 2
        if stride > 1:
            self.branch1 = nn.Sequential(nn.Conv2d(i, i, 3, stride, 1, groups=i, bias=False), nn.BatchNorm2d(i),
                                         ConvBN(i, bf, 1))
        self.branch2 = nn.Sequential(ConvBN(i if stride > 1 else bf, bf, 1),
                                     nn.Conv2d(bf, bf, 3, stride, 1, groups=bf, bias=False), nn.BatchNorm2d(bf),
                                     ConvBN(bf, bf, 1))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        chans = [24] + [2 * _w(c // 2, width) for c in (116, 232, 464)] + [_w(1024, width)]
        self.conv1, self.maxpool = ConvBN(3, chans[0], 3, 2), nn.MaxPool2d(3, 2, 1)
        stages, c = [], chans[0]
        for n, o in zip((4, 8, 4), chans[1:4]):
            stages.append(nn.Sequential(ShuffleUnit(c, o, 2), *[ShuffleUnit(o, o, 1) for _ in range(n - 1)]))
            c = o
        self.stages = nn.Sequential(*stages)
        self.conv5, self.fc = ConvBN(c, chans[4], 1), nn.Linear(chans[4], num_classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


# -- ResNet-18, RegNetY-400MF ------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, i, o, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(i, o, 3, stride, 1, bias=False), nn.BatchNorm2d(o)
        self.conv2, self.bn2 = nn.Conv2d(o, o, 3, 1, 1, bias=False), nn.BatchNorm2d(o)
        self.relu = nn.ReLU()
        self.downsample = ConvBN(i, o, 1, stride, act=None, p=0) if stride != 1 or i != o else None

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        c = _w(64, width)
        self.stem = nn.Sequential(ConvBN(3, c, 7, 2, p=3), nn.MaxPool2d(3, 2, 1))
        layers = []
        for n, o in enumerate([_w(64 * 2 ** k, width) for k in range(4)]):
            layers += [BasicBlock(c, o, 1 if n == 0 else 2), BasicBlock(o, o, 1)]
            c = o
        self.layers, self.avgpool = nn.Sequential(*layers), nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(self.layers(self.stem(x))), 1))


def regnet_widths(depth=16, w0=48, wa=27.89, wm=2.09, group=8) -> tuple[list[int], list[int], list[int]]:
    """RegNet's quantized linear width rule: per-stage widths, depths and group widths."""
    ws = [int(round(w0 * wm ** round(math.log((w0 + wa * i) / w0, wm)) / 8) * 8) for i in range(depth)]
    widths = sorted(set(ws))
    groups = [min(group, w) for w in widths]
    return [_div(w, g) for w, g in zip(widths, groups)], [ws.count(w) for w in sorted(set(ws))], groups


class RegNetBlock(nn.Module):
    def __init__(self, i, o, stride, group, se_ratio=0.25):
        super().__init__()
        self.proj = ConvBN(i, o, 1, stride, act=None) if i != o or stride != 1 else None
        self.f = nn.Sequential(ConvBN(i, o, 1), ConvBN(o, o, 3, stride, g=o // group),
                               SE(o, int(round(se_ratio * i))), ConvBN(o, o, 1, act=None))
        self.activation = nn.ReLU()

    def forward(self, x):
        return self.activation((self.proj(x) if self.proj is not None else x) + self.f(x))


class RegNetY400MF(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        widths, depths, groups = regnet_widths()
        widths = [max(g, int(round(w * width / g)) * g) for w, g in zip(widths, groups)]
        blocks, c = [ConvBN(3, 32, 3, 2)], 32
        for w, n, g in zip(widths, depths, groups):
            for j in range(n):
                blocks.append(RegNetBlock(c, w, 2 if j == 0 else 1, g))
                c = w
        self.trunk, self.avgpool = nn.Sequential(*blocks), nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(self.avgpool(self.trunk(x)).flatten(start_dim=1))


# -- SqueezeNet 1.1, AlexNet ----------------------------------------------------------------------------------
def _fire(i, sq, e1, e3) -> nn.Sequential:
    """Fire: 1x1 squeeze + ReLU, then 1x1 and 3x3 expands (each + ReLU) concatenated."""
    expand = Cat([nn.Sequential(nn.Conv2d(sq, e1, 1), nn.ReLU()),
                  nn.Sequential(nn.Conv2d(sq, e3, 3, padding=1), nn.ReLU())])
    return nn.Sequential(nn.Conv2d(i, sq, 1), nn.ReLU(), expand)


class SqueezeNet11(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        c, fires = _w(64, width), []
        for s, e in [(16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256), (64, 256)]:
            fires.append(_fire(c, _w(s, width), _w(e, width), _w(e, width)))
            c = 2 * _w(e, width)
        pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
        self.features = nn.Sequential(nn.Conv2d(3, _w(64, width), 3, 2), nn.ReLU(), pool(), *fires[:2], pool(),
                                      *fires[2:4], pool(), *fires[4:])
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(c, num_classes, 1), nn.ReLU(),
                                        nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class AlexNet(nn.Module):
    """The 6x6 adaptive pool exports only when the features are a multiple of 6: resolution 223..250."""

    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        c = [_w(v, width) for v in (64, 192, 384, 256, 256, 4096)]
        self.features = nn.Sequential(
            nn.Conv2d(3, c[0], 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2), nn.Conv2d(c[0], c[1], 5, padding=2), nn.ReLU(),
            nn.MaxPool2d(3, 2), nn.Conv2d(c[1], c[2], 3, padding=1), nn.ReLU(), nn.Conv2d(c[2], c[3], 3, padding=1),
            nn.ReLU(), nn.Conv2d(c[3], c[4], 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Linear(c[4] * 36, c[5]), nn.ReLU(), nn.Dropout(0.5),
                                        nn.Linear(c[5], c[5]), nn.ReLU(), nn.Linear(c[5], num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# -- GoogLeNet, Inception v3 ---------------------------------------------------------------------------------
def _bc(i, o, k, s=1, p=0) -> ConvBN:
    """BasicConv2d: Conv2d (no bias) + BatchNorm2d(eps=1e-3) + ReLU."""
    return ConvBN(i, o, k, s, p=p, eps=1e-3)


def _chain(i, *convs) -> nn.Sequential:
    """BasicConv2ds in a row from `i` channels: each (out, kernel, stride, padding)."""
    layers = []
    for o, k, s, p in convs:
        layers.append(_bc(i, o, k, s, p))
        i = o
    return nn.Sequential(*layers)


class GoogLeNet(nn.Module):
    """aux_logits=False, transform_input=False (torchvision's defaults without weights)."""

    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        c = lambda v: _w(v, width)  # noqa: E731
        pool = lambda k=3, s=2, p=0: nn.MaxPool2d(k, s, p, ceil_mode=True)  # noqa: E731
        layers, i = [_bc(3, c(64), 7, 2, 3), pool(), _bc(c(64), c(64), 1), _bc(c(64), c(192), 3, p=1), pool()], c(192)
        for cfg in [(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), 3, (192, 96, 208, 16, 48, 64),
                    (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
                    (256, 160, 320, 32, 128, 128), 2, (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]:
            if isinstance(cfg, int):
                layers.append(pool(cfg))
                continue
            c1, c3r, c3, c5r, c5, pp = map(c, cfg)  # torchvision's "5x5" branch has a 3x3 kernel
            layers.append(Cat([_bc(i, c1, 1), _chain(i, (c3r, 1, 1, 0), (c3, 3, 1, 1)),
                               _chain(i, (c5r, 1, 1, 0), (c5, 3, 1, 1)), nn.Sequential(pool(3, 1, 1), _bc(i, pp, 1))]))
            i = c1 + c3 + c5 + pp
        self.features, self.avgpool = nn.Sequential(*layers), nn.AdaptiveAvgPool2d((1, 1))
        self.dropout, self.fc = nn.Dropout(0.2), nn.Linear(i, num_classes)

    def forward(self, x):
        return self.fc(self.dropout(torch.flatten(self.avgpool(self.features(x)), 1)))


def _inception_v3_blocks(i: int, c: Callable[[int], int]) -> tuple[list[nn.Module], int]:
    """Mixed_5b .. Mixed_7c (InceptionA x3, B, C x4, D, E x2) and their output channels."""
    avg = lambda o: nn.Sequential(nn.AvgPool2d(3, 1, 1), _bc(i, o, 1))  # noqa: E731
    s17, s71 = (1, 7), (7, 1)
    blocks = []
    for pf in (32, 64, 64):  # A
        blocks.append(Cat([_bc(i, c(64), 1), _chain(i, (c(48), 1, 1, 0), (c(64), 5, 1, 2)),
                           _chain(i, (c(64), 1, 1, 0), (c(96), 3, 1, 1), (c(96), 3, 1, 1)), avg(c(pf))]))
        i = 2 * c(64) + c(96) + c(pf)
    blocks.append(Cat([_bc(i, c(384), 3, 2), _chain(i, (c(64), 1, 1, 0), (c(96), 3, 1, 1), (c(96), 3, 2, 0)),
                       nn.MaxPool2d(3, 2)]))  # B
    i += c(384) + c(96)
    for c7 in (c(128), c(160), c(160), c(192)):  # C
        blocks.append(Cat([_bc(i, c(192), 1), _chain(i, (c7, 1, 1, 0), (c7, s17, 1, (0, 3)), (c(192), s71, 1, (3, 0))),
                           _chain(i, (c7, 1, 1, 0), (c7, s71, 1, (3, 0)), (c7, s17, 1, (0, 3)), (c7, s71, 1, (3, 0)),
                                  (c(192), s17, 1, (0, 3))), avg(c(192))]))
        i = 4 * c(192)
    blocks.append(Cat([_chain(i, (c(192), 1, 1, 0), (c(320), 3, 2, 0)),
                       _chain(i, (c(192), 1, 1, 0), (c(192), s17, 1, (0, 3)), (c(192), s71, 1, (3, 0)),
                              (c(192), 3, 2, 0)), nn.MaxPool2d(3, 2)]))  # D
    i += c(320) + c(192)
    split = lambda: Cat([_bc(c(384), c(384), (1, 3), p=(0, 1)), _bc(c(384), c(384), (3, 1), p=(1, 0))])  # noqa: E731
    for _ in range(2):  # E: its 3x3 branches end in a (1, 3) and a (3, 1) half, concatenated
        blocks.append(Cat([_bc(i, c(320), 1), nn.Sequential(_bc(i, c(384), 1), split()),
                           nn.Sequential(_chain(i, (c(448), 1, 1, 0), (c(384), 3, 1, 1)), split()), avg(c(192))]))
        i = c(320) + 4 * c(384) + c(192)
    return blocks, i


class InceptionV3(nn.Module):
    """aux_logits=False, transform_input=True (ImageNet normalization re-done per channel)."""

    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        c = lambda v: _w(v, width)  # noqa: E731
        blocks, ch = _inception_v3_blocks(c(192), c)
        self.features = nn.Sequential(_chain(3, (c(32), 3, 2, 0), (c(32), 3, 1, 0), (c(64), 3, 1, 1)),
                                      nn.MaxPool2d(3, 2), _chain(c(64), (c(80), 1, 1, 0), (c(192), 3, 1, 0)),
                                      nn.MaxPool2d(3, 2), *blocks)
        self.avgpool, self.dropout, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Dropout(0.5), nn.Linear(ch, num_classes)

    def forward(self, x):
        x = torch.cat([torch.unsqueeze(x[:, k], 1) * (s / 0.5) + (m - 0.5) / 0.5
                       for k, (m, s) in enumerate([(0.485, 0.229), (0.456, 0.224), (0.406, 0.225)])], 1)
        return self.fc(torch.flatten(self.dropout(self.avgpool(self.features(x))), 1))


# -- DenseNet-121 ------------------------------------------------------------------------------------------
class DenseLayer(nn.Module):
    def __init__(self, i, growth, bn_size=4):
        super().__init__()
        self.norm1, self.relu1 = nn.BatchNorm2d(i), nn.ReLU()
        self.conv1 = nn.Conv2d(i, bn_size * growth, 1, bias=False)
        self.norm2, self.relu2 = nn.BatchNorm2d(bn_size * growth), nn.ReLU()
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False)

    def forward(self, features: list):
        x = self.conv1(self.relu1(self.norm1(torch.cat(features, 1))))
        return self.conv2(self.relu2(self.norm2(x)))


class DenseBlock(nn.ModuleList):
    def forward(self, x):
        features = [x]
        for layer in self:
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet121(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        growth, c = _w(32, width), _w(64, width)
        layers = [ConvBN(3, c, 7, 2, p=3), nn.MaxPool2d(3, 2, 1)]
        for n, depth in enumerate((6, 12, 24, 16)):
            layers.append(DenseBlock([DenseLayer(c + k * growth, growth) for k in range(depth)]))
            c += depth * growth
            if n < 3:
                layers.append(nn.Sequential(nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False),
                                            nn.AvgPool2d(2, 2)))
                c //= 2
        self.features, self.classifier = nn.Sequential(*layers, nn.BatchNorm2d(c)), nn.Linear(c, num_classes)

    def forward(self, x):
        out = F.adaptive_avg_pool2d(F.relu(self.features(x)), (1, 1))
        return self.classifier(torch.flatten(out, 1))


# -- ConvNeXt-Tiny ----------------------------------------------------------------------------------------
class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over channels of an NCHW tensor, done in NHWC."""

    def forward(self, x):
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim, 7, padding=3, groups=dim), Permute([0, 2, 3, 1]),
                                   nn.LayerNorm(dim, eps=1e-6), nn.Linear(dim, 4 * dim), nn.GELU(),
                                   nn.Linear(4 * dim, dim), Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 1e-6))

    def forward(self, x):
        return self.layer_scale * self.block(x) + x  # stochastic depth: identity in eval


class ConvNeXtTiny(nn.Module):
    def __init__(self, width: float = 1.0, num_classes: int = 1000):
        super().__init__()
        dims = [_w(d, width) for d in (96, 192, 384, 768)]
        layers = [nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))]
        for n, (d, depth) in enumerate(zip(dims, (3, 3, 9, 3))):
            layers.append(nn.Sequential(*[CNBlock(d) for _ in range(depth)]))
            if n < 3:
                layers.append(nn.Sequential(LayerNorm2d(d, eps=1e-6), nn.Conv2d(d, dims[n + 1], 2, 2)))
        self.features, self.avgpool = nn.Sequential(*layers), nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(LayerNorm2d(dims[-1], eps=1e-6), nn.Flatten(1),
                                        nn.Linear(dims[-1], num_classes))

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


# -- registry, seeded weights, export --------------------------------------------------------------------------
ARCHITECTURES: dict[str, Callable[..., nn.Module]] = {
    "mobilenet_v3_small": lambda **kw: MobileNetV3("small", **kw),
    "mobilenet_v3_large": lambda **kw: MobileNetV3("large", **kw),
    "efficientnet_b0": EfficientNetB0, "shufflenet_v2_x1_0": ShuffleNetV2, "resnet18": ResNet18,
    "squeezenet1_1": SqueezeNet11, "googlenet": GoogLeNet, "densenet121": DenseNet121,
    "regnet_y_400mf": RegNetY400MF, "convnext_tiny": ConvNeXtTiny, "mnasnet1_0": MNASNet, "alexnet": AlexNet,
    "inception_v3": InceptionV3, "lraspp_mobilenet_v3_large": LRASPP,
}
#: the smallest resolution each exports and runs at (AlexNet's 6x6 pool needs features of 6 or 12)
MIN_RESOLUTION = {"alexnet": 223, "inception_v3": 75}
SEGMENTATION = {"lraspp_mobilenet_v3_large"}


def _init_weights(model: nn.Module, gen: torch.Generator) -> None:
    """He-normal convolutions and linears, norms with gamma near 1, ConvNeXt layer scale in [0.2, 0.5]."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            fan_in = m.weight[0].numel()
            m.weight.normal_(0.0, math.sqrt(2.0 / fan_in), generator=gen)
            if m.bias is not None:
                m.bias.uniform_(-0.1, 0.1, generator=gen)
        elif isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
            m.weight.uniform_(0.8, 1.2, generator=gen)
            m.bias.uniform_(-0.1, 0.1, generator=gen)
        elif isinstance(m, CNBlock):
            m.layer_scale.uniform_(0.2, 0.5, generator=gen)


def _calibrate(model: nn.Module, resolution: int, gen: torch.Generator) -> None:
    """BatchNorm running statistics from a random batch (so activations stay O(1) at any depth), then
    perturbed so that no BatchNorm is an exact normalization."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: exactly this batch's statistics
    model.train()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.eval()
    x = torch.rand((8, 3, resolution, resolution), generator=gen) * 2 - 1
    with torch.no_grad():
        model(x)
        for m in bns:
            var = m.running_var.clamp_(min=1e-2 * float(m.running_var.mean()) + 1e-6)
            m.running_mean.add_(0.1 * var.sqrt() * torch.randn(var.shape, generator=gen))
            var.mul_(torch.empty_like(var).uniform_(0.8, 1.25, generator=gen))
            m.momentum = 0.1
    model.eval()


def build(name: str, seed: int = 0, *, width: float = 1.0, resolution: int | None = None) -> nn.Module:
    """The eval-mode model `name` with seeded random weights of sensible scale (BN calibrated at `resolution`)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model = ARCHITECTURES[name](width=width)
        _init_weights(model, gen)
    _calibrate(model, resolution or max(64, MIN_RESOLUTION.get(name, 0)), gen)
    return model


def export(name: str, resolution: int, opset: int = 17, seed: int = 0, *, width: float = 1.0) -> bytes:
    """ONNX bytes of `build(name, seed)` by the TorchScript exporter on a 1x3xRxR input named 'input'."""
    model = build(name, seed, width=width, resolution=resolution)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 3, resolution, resolution),), buf, opset_version=opset,
                          dynamo=False, input_names=["input"], output_names=["output"])
    return buf.getvalue()
