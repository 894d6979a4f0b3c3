"""Drawing the report's litho pictures: colour layers on a white canvas, a scale bar, markers.

Shared by the whole-canvas renderer (`pictures`) and the tile-by-tile one
(`tilepictures`), so both draw the same pictures. Pure but for `save_picture`
and `annotate`, which write a PNG.
"""
from __future__ import annotations

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


def pattern_box(*images: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(np.logical_or.reduce([i.astype(bool) for i in images]))
    if ys.size == 0:
        h, w = images[0].shape
        return 0, 0, h, w
    return square_box(int(ys.min()), int(xs.min()), int(ys.max()), int(xs.max()), images[0].shape)


def square_box(ymin: int, xmin: int, ymax: int, xmax: int, shape: tuple[int, int]) -> tuple[int, int, int, int]:
    """(y0, x0, y1, x1): the pattern's pixels ymin..ymax, xmin..xmax with MARGIN around them, made
    square about their centre and kept inside a canvas of `shape` (pure)."""
    y0, y1 = ymin - MARGIN, ymax + MARGIN
    x0, x1 = xmin - MARGIN, xmax + MARGIN
    side = max(y1 - y0, x1 - x0)
    cy, cx = (y0 + y1) // 2, (x0 + x1) // 2
    h, w = shape
    y0 = min(max(0, cy - side // 2), max(0, h - side))
    x0 = min(max(0, cx - side // 2), max(0, w - side))
    return y0, x0, min(h, y0 + side), min(w, x0 + side)


def rgb(layers: list[tuple[np.ndarray, np.ndarray, float]], shape: tuple[int, int]) -> np.ndarray:
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


def save_picture(img: np.ndarray, box: tuple[int, int, int, int], path: Path,
          markers: list[tuple[float, float]] = (), *, size: int = SIZE,
          marker_colour: tuple[int, int, int] = RED) -> None:
    y0, x0, y1, x1 = box
    # the canvas is stored with row 0 at the top of the layout (y up): flip for viewing
    crop = img[y0:y1, x0:x1][::-1]
    resample = Image.Resampling.NEAREST if size >= (x1 - x0) else Image.Resampling.BILINEAR
    pic = Image.fromarray(np.clip(crop, 0, 255).astype(np.uint8)).resize((size, size), resample)
    annotate(pic, box, path, markers, size=size, marker_colour=marker_colour)


def annotate(pic: Image.Image, box: tuple[int, int, int, int], path: Path,
             markers: list[tuple[float, float]] = (), *, size: int = SIZE,
             marker_colour: tuple[int, int, int] = RED) -> None:
    """Mark the points (canvas px) on a picture of canvas `box` (y0, x0, y1, x1), flipped to layout
    y up and `size` px square, add the scale bar and write it as PNG."""
    y0, x0, y1, x1 = box
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
