"""Pictures of one clip for a human report: target, mask, prints, violations.

    python -m worker_sdk.litho.pictures --layout L --mask M --out DIR [--kernels K] [--fill F]
                                        [--crops CROPS.json] [--tiles TILES.json]

Writes DIR/{target,mask,print_nominal,print_max,print_min,violations}.png,
cropped to the pattern and scaled to a fixed size, each with a scale bar.
With --crops (a JSON list of {"x_nm", "y_nm"} in the mask layout's own
coordinates, e.g. DRC markers), also DIR/crop_NN.png: a close-up
(CROP_NM wide) around each point showing target, mask and nominal print,
with the point marked. With --tiles (a JSON list of {"tile_id", "core_nm":
[x0, y0, x1, y1]} in the same coordinates), also DIR/tile_<tile_id>.png:
each tile's core showing target, mask and nominal print, from the same
simulation (the report's tile map links to them). Runs in its own process: the coordinator's report
asks for pictures without importing torch.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SIZE = 480  # px of each picture
MARGIN = 64  # nm around the pattern
CROP_NM = 240  # nm across a close-up around a point
CROP_SIZE = 240  # px of a close-up
MAX_CROPS = 12
NICE_NM = (10, 20, 50, 100, 200, 500, 1000, 2000)
RED = (220, 30, 30)
ORANGE = (255, 140, 0)

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


def scale_bar_nm(width_nm: float) -> int:
    """The longest round length (nm) at most a fifth of the picture's width (pure)."""
    fit = [n for n in NICE_NM if n <= width_nm / 5]
    return fit[-1] if fit else NICE_NM[0]


def _scale_bar(draw: ImageDraw.ImageDraw, size: int, nm_per_px: float) -> None:
    """A black bar with its length in nm, bottom left, on a white plate so it reads on any pattern."""
    length = scale_bar_nm(size * nm_per_px)
    px = max(1, round(length / nm_per_px))
    x0, y1 = 8, size - 8
    label = f"{length} nm"
    draw.rectangle([x0 - 4, y1 - 22, x0 + max(px, 6 * len(label)) + 4, y1 + 4], fill=(255, 255, 255))
    draw.rectangle([x0, y1 - 4, x0 + px, y1], fill=(0, 0, 0))
    draw.text((x0, y1 - 20), label, fill=(0, 0, 0))


def _save(img: np.ndarray, box: tuple[int, int, int, int], path: Path,
          markers: list[tuple[float, float]] = (), *, size: int = SIZE,
          marker_colour: tuple[int, int, int] = RED) -> None:
    y0, x0, y1, x1 = box
    # the canvas is stored with row 0 at the top of the layout (y up): flip for viewing
    crop = img[y0:y1, x0:x1][::-1]
    resample = Image.Resampling.NEAREST if size >= (x1 - x0) else Image.Resampling.BILINEAR
    pic = Image.fromarray(np.clip(crop, 0, 255).astype(np.uint8)).resize((size, size), resample)
    draw = ImageDraw.Draw(pic)
    sx, sy = size / (x1 - x0), size / (y1 - y0)
    r = max(6, size // 60)
    for x, y in markers:
        px, py = (x - x0) * sx, size - (y - y0) * sy
        draw.ellipse([px - r, py - r, px + r, py + r], outline=marker_colour, width=3)
    _scale_bar(draw, size, (x1 - x0) / size)
    pic.save(path, format="PNG", optimize=False)


def crop_box(cx: int, cy: int, shape: tuple[int, int], side: int = CROP_NM) -> tuple[int, int, int, int]:
    """A side x side window (y0, x0, y1, x1) centred on canvas pixel (cx, cy), kept inside the canvas (pure)."""
    h, w = shape
    side = min(side, h, w)
    y0 = min(max(0, cy - side // 2), h - side)
    x0 = min(max(0, cx - side // 2), w - side)
    return y0, x0, y0 + side, x0 + side


def tile_name(tile_id: str) -> str:
    """The picture's file stem for a tile id; anything but letters, digits, _ and - is dropped (pure)."""
    return "tile_" + "".join(ch for ch in str(tile_id) if ch.isalnum() or ch in "_-")[:64]


def render(layout_path: Path, mask_path: Path, out: Path, *, kernels: str | None = None,
           fill: str = "lithobench", crops: list[dict[str, float]] = (),
           tiles: list[dict] = ()) -> list[Path]:
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
    if crops:
        both = _rgb([(target, GRAY_TARGET, 1.0), (ev.mask, BLACK, 0.55), (ev.printed["nominal"], BLUE_PRINT, 0.35)],
                    shape)
        dx, dy = ev.shift  # canvas px = layout nm + shift
        for i, point in enumerate(list(crops)[:MAX_CROPS]):
            cx, cy = int(round(float(point["x_nm"]))) + dx, int(round(float(point["y_nm"]))) + dy
            p = out / f"crop_{i:02d}.png"
            _save(both, crop_box(cx, cy, shape), p, [(cx, cy)], size=CROP_SIZE, marker_colour=ORANGE)
            written.append(p)
    if tiles:
        both = _rgb([(target, GRAY_TARGET, 1.0), (ev.mask, BLACK, 0.55), (ev.printed["nominal"], BLUE_PRINT, 0.35)],
                    shape)
        dx, dy = ev.shift
        h, w = shape
        for tile in tiles:
            x0, y0, x1, y1 = (int(v) for v in tile["core_nm"])
            box = (max(0, y0 + dy), max(0, x0 + dx), min(h, y1 + dy), min(w, x1 + dx))
            if box[2] <= box[0] or box[3] <= box[1]:
                continue
            p = out / f"{tile_name(tile['tile_id'])}.png"
            _save(both, box, p, size=CROP_SIZE)
            written.append(p)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m worker_sdk.litho.pictures", description=__doc__.splitlines()[0])
    ap.add_argument("--layout", type=Path, required=True)
    ap.add_argument("--mask", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--kernels", default=None)
    ap.add_argument("--fill", default="lithobench", choices=("lithobench", "exact"))
    ap.add_argument("--crops", type=Path, default=None,
                    help='JSON list of {"x_nm", "y_nm"} (mask layout coordinates) to show close up')
    ap.add_argument("--tiles", type=Path, default=None,
                    help='JSON list of {"tile_id", "core_nm": [x0, y0, x1, y1]} to picture tile by tile')
    args = ap.parse_args(argv)
    crops = json.loads(args.crops.read_text()) if args.crops else []
    tiles = json.loads(args.tiles.read_text()) if args.tiles else []
    for p in render(args.layout, args.mask, args.out, kernels=args.kernels, fill=args.fill, crops=crops,
                    tiles=tiles):
        print(p, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
