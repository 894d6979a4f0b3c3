"""Pictures of one clip or a tiled mask for a human report: target, mask, prints, violations.

    python -m worker_sdk.litho.pictures --layout L --mask M --out DIR [--kernels K] [--fill F]
                                        [--crops CROPS.json] [--tiles TILES.json] [--tile-dir D]

Writes DIR/{target,mask,print_nominal,print_max,print_min,violations}.png,
cropped to the pattern and scaled to a fixed size, each with a scale bar.
With --crops (a JSON list of {"x_nm", "y_nm"} in the mask layout's own
coordinates, e.g. DRC markers), also DIR/crop_NN.png: a close-up
(CROP_NM wide) around each point showing target, mask and nominal print,
with the point marked. With --tiles (a JSON list of {"tile_id", "core_nm":
[x0, y0, x1, y1]} in the same coordinates, optionally the tile's "l2_nm2" and
"pvb_nm2"), also DIR/tile_<tile_id>.png: each tile's core showing target, mask
and nominal print (the report's tile map links to them).

Two ways, one set of pictures. A single clip, or a tiled canvas under
`streaming.STREAM_AUTO_PX` with no tile folder, is simulated whole
(`render_whole`). A mask with a tile folder (--tile-dir, its evaluation
records) or a larger canvas is drawn tile by tile (`tilepictures`), memory flat
in the tile count. Runs in its own process: the coordinator's report asks for
pictures without importing torch.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from .drawing import (  # noqa: F401 - CROP_NM, NICE_NM, scale_bar_nm: the pictures' public numbers
    BLACK, BLUE_PRINT, CROP_NM, CROP_SIZE, GRAY_TARGET, MAX_CROPS, NICE_NM, ORANGE, SIZE, crop_box, pattern_box, rgb,
    save_picture, scale_bar_nm, tile_name)


def render(layout_path: Path, mask_path: Path, out: Path, *, kernels: str | None = None,
           fill: str = "lithobench", crops: list[dict[str, float]] = (),
           tiles: list[dict] = (), tile_dir: Path | None = None) -> list[Path]:
    from .inputs import load_model
    from .layout import load_layout

    request = {"kernels": kernels} if kernels else {}
    layout = load_layout(layout_path)
    mask_layout = load_layout(mask_path) if mask_path.suffix.lower() != ".png" else None
    if mask_layout is not None and tiled_pictures(layout, fill, tile_dir):
        from .tilepictures import render_tiled

        # float64: the precision the tile folder's evaluation records were made in (and the evaluation task's)
        res = render_tiled(load_model(request, "float64"), layout, mask_layout, out, tile_dir=tile_dir, fill=fill,
                           crops=crops, tiles=tiles)
        print(f"tiles drawn: {len(res.from_records)} from evaluation records, {len(res.simulated)} simulated",
              file=sys.stderr)
        return res.written
    mask = None
    if mask_layout is None:
        from .layout import load_mask_png
        mask = load_mask_png(mask_path)
    return render_whole(load_model(request, "float32"), layout, out, mask=mask, mask_layout=mask_layout, fill=fill,
                        crops=crops, tiles=tiles)


def tiled_pictures(layout, fill: str, tile_dir: Path | None) -> bool:
    """Whether a layout's pictures are drawn tile by tile: it has a tile folder, or its canvas is
    one the evaluation would stream (above `streaming.STREAM_AUTO_PX` pixels)."""
    from .engine import DEFAULT_HALO, needs_tiling
    from .layout import CANVAS
    from .streaming import wants_streaming

    if not needs_tiling(layout, CANVAS):
        return False
    return tile_dir is not None or wants_streaming(None, layout, CANVAS, DEFAULT_HALO, fill)


def render_whole(model, layout, out: Path, *, mask=None, mask_layout=None, fill: str = "lithobench",
                 crops: list[dict[str, float]] = (), tiles: list[dict] = ()) -> list[Path]:
    """The pictures from one simulation of the whole canvas (about 18.5 bytes a canvas pixel)."""
    from .engine import evaluate

    ev = evaluate(model, layout, mask=mask, mask_layout=mask_layout, fill=fill)
    target = ev.target.astype(bool)
    box = pattern_box(target, ev.mask)
    shape = target.shape
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(name: str, img: np.ndarray, markers=()) -> None:
        p = out / f"{name}.png"
        save_picture(img, box, p, list(markers))
        written.append(p)

    save("target", rgb([(target, BLACK, 1.0)], shape))
    save("mask", rgb([(ev.mask, BLACK, 1.0)], shape))
    for corner in ("nominal", "max", "min"):
        printed = ev.printed[corner].astype(bool)
        save(f"print_{corner}", rgb([(target, GRAY_TARGET, 1.0), (printed, BLUE_PRINT, 0.6)], shape))
    marks = [(float(r["x"]), float(r["y"])) for r in ev.epe_records]
    save("violations", rgb([(target, GRAY_TARGET, 1.0), (ev.printed["nominal"], BLUE_PRINT, 0.35)], shape), marks)
    if crops:
        both = rgb([(target, GRAY_TARGET, 1.0), (ev.mask, BLACK, 0.55), (ev.printed["nominal"], BLUE_PRINT, 0.35)],
                    shape)
        dx, dy = ev.shift  # canvas px = layout nm + shift
        for i, point in enumerate(list(crops)[:MAX_CROPS]):
            cx, cy = int(round(float(point["x_nm"]))) + dx, int(round(float(point["y_nm"]))) + dy
            p = out / f"crop_{i:02d}.png"
            save_picture(both, crop_box(cx, cy, shape), p, [(cx, cy)], size=CROP_SIZE, marker_colour=ORANGE)
            written.append(p)
    if tiles:
        both = rgb([(target, GRAY_TARGET, 1.0), (ev.mask, BLACK, 0.55), (ev.printed["nominal"], BLUE_PRINT, 0.35)],
                    shape)
        dx, dy = ev.shift
        h, w = shape
        for tile in tiles:
            x0, y0, x1, y1 = (int(v) for v in tile["core_nm"])
            box = (max(0, y0 + dy), max(0, x0 + dx), min(h, y1 + dy), min(w, x1 + dx))
            if box[2] <= box[0] or box[3] <= box[1]:
                continue
            p = out / f"{tile_name(tile['tile_id'])}.png"
            save_picture(both, box, p, size=CROP_SIZE)
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
    ap.add_argument("--tile-dir", type=Path, default=None,
                    help="the mask's tile folder: its evaluation records give the prints where they fit the mask")
    args = ap.parse_args(argv)
    crops = json.loads(args.crops.read_text()) if args.crops else []
    tiles = json.loads(args.tiles.read_text()) if args.tiles else []
    for p in render(args.layout, args.mask, args.out, kernels=args.kernels, fill=args.fill, crops=crops,
                    tiles=tiles, tile_dir=args.tile_dir):
        print(p, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
