"""Pictures of one clip for a human report: target, mask, prints, violations.

    python -m worker_sdk.litho.pictures --layout L --mask M --out DIR [--kernels K] [--fill F]

Writes DIR/{target,mask,print_nominal,print_max,print_min,violations}.png,
cropped to the pattern and scaled to a fixed size. Runs in its own process:
the coordinator's report asks for pictures without importing torch.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SIZE = 360  # px of each picture
MARGIN = 64  # nm around the pattern

GRAY_TARGET = np.array([205, 205, 205], dtype=np.float32)
BLUE_PRINT = np.array([30, 90, 200], dtype=np.float32)
BLACK = np.array([20, 20, 20], dtype=np.float32)


def _crop_box(*images: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(np.logical_or.reduce([i.astype(bool) for i in images]))
    if ys.size == 0:
        h, w = images[0].shape
        return 0, 0, h, w
    y0, y1 = int(ys.min()) - MARGIN, int(ys.max()) + MARGIN
    x0, x1 = int(xs.min()) - MARGIN, int(xs.max()) + MARGIN
    side = max(y1 - y0, x1 - x0)
    cy, cx = (y0 + y1) // 2, (x0 + x1) // 2
    h, w = images[0].shape
    y0 = min(max(0, cy - side // 2), max(0, h - side))
    x0 = min(max(0, cx - side // 2), max(0, w - side))
    return y0, x0, min(h, y0 + side), min(w, x0 + side)


def _rgb(layers: list[tuple[np.ndarray, np.ndarray, float]], shape: tuple[int, int]) -> np.ndarray:
    """White canvas with colour layers (mask, colour, opacity) blended in order."""
    img = np.full((*shape, 3), 255.0, dtype=np.float32)
    for mask, colour, alpha in layers:
        m = mask.astype(bool)
        img[m] = img[m] * (1 - alpha) + colour * alpha
    return img


def _save(img: np.ndarray, box: tuple[int, int, int, int], path: Path,
          markers: list[tuple[float, float]] = ()) -> None:
    y0, x0, y1, x1 = box
    # the canvas is stored with row 0 at the top of the layout (y up): flip for viewing
    crop = img[y0:y1, x0:x1][::-1]
    pic = Image.fromarray(np.clip(crop, 0, 255).astype(np.uint8)).resize((SIZE, SIZE), Image.Resampling.BILINEAR)
    if markers:
        draw = ImageDraw.Draw(pic)
        sx, sy = SIZE / (x1 - x0), SIZE / (y1 - y0)
        for x, y in markers:
            px, py = (x - x0) * sx, SIZE - (y - y0) * sy
            draw.ellipse([px - 4, py - 4, px + 4, py + 4], outline=(220, 30, 30), width=2)
    pic.save(path, format="PNG", optimize=False)


def render(layout_path: Path, mask_path: Path, out: Path, *, kernels: str | None = None,
           fill: str = "lithobench") -> list[Path]:
    from . import api
    from .engine import evaluate
    from .layout import load_layout

    request = {"kernels": kernels} if kernels else {}
    model = api.load_model(request, "float32")
    layout = load_layout(layout_path)
    mask_layout = load_layout(mask_path) if mask_path.suffix.lower() != ".png" else None
    mask = None
    if mask_layout is None:
        from .layout import load_mask_png
        mask = load_mask_png(mask_path)
    ev = evaluate(model, layout, mask=mask, mask_layout=mask_layout, fill=fill)
    target = ev.target.astype(bool)
    box = _crop_box(target, ev.mask)
    shape = target.shape
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(name: str, img: np.ndarray, markers=()) -> None:
        p = out / f"{name}.png"
        _save(img, box, p, list(markers))
        written.append(p)

    save("target", _rgb([(target, BLACK, 1.0)], shape))
    save("mask", _rgb([(ev.mask, BLACK, 1.0)], shape))
    for corner in ("nominal", "max", "min"):
        printed = ev.printed[corner].astype(bool)
        save(f"print_{corner}", _rgb([(target, GRAY_TARGET, 1.0), (printed, BLUE_PRINT, 0.6)], shape))
    marks = [(float(r["x"]), float(r["y"])) for r in ev.epe_records]
    save("violations", _rgb([(target, GRAY_TARGET, 1.0), (ev.printed["nominal"], BLUE_PRINT, 0.35)], shape), marks)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m worker_sdk.litho.pictures", description=__doc__.splitlines()[0])
    ap.add_argument("--layout", type=Path, required=True)
    ap.add_argument("--mask", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--kernels", default=None)
    ap.add_argument("--fill", default="lithobench", choices=("lithobench", "exact"))
    args = ap.parse_args(argv)
    for p in render(args.layout, args.mask, args.out, kernels=args.kernels, fill=args.fill):
        print(p, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
