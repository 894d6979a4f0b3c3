"""Renders are byte-stable for identical input and session state, and react to state."""
from __future__ import annotations

import hashlib
from pathlib import Path

from PIL import Image

BOX = {"left": -5.0, "bottom": -5.0, "right": 60.0, "top": 65.0}


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_render_is_byte_stable(tools, kl_env) -> None:
    req = {"box": BOX, "cell": "TOP", "layers": [{"layer": 1, "datatype": 0}, {"layer": 10, "datatype": 0}],
           "image_size": {"width": 320, "height": 240}, "style": "light"}
    s1 = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    bend = [s for s in tools.query_region({"session_id": s1, "box": BOX})["shapes"]
            if s["kind"] == "path" and s["point_count"] > 2][0]["id"]
    ann = [{"kind": "shape_outline", "target_ids": [bend], "color": "#ff3b30"}]
    first = tools.render_view({"session_id": s1, **req, "annotations": ann})
    d1 = _digest(first["image"]["path"])
    tools.render_view({"session_id": s1, **req, "style": "dark"})  # change the view state in between
    tools.render_view({"session_id": s1, "box": {"left": 400, "bottom": 0, "right": 600, "top": 100}})
    again = tools.render_view({"session_id": s1, **req, "annotations": ann})
    assert again["render_id"] == first["render_id"] and _digest(again["image"]["path"]) == d1
    # a fresh session on the same file gives the same bytes
    s2 = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    tools.query_region({"session_id": s2, "box": BOX})
    other = tools.render_view({"session_id": s2, **req, "annotations": ann})
    assert _digest(other["image"]["path"]) == d1
    plain = tools.render_view({"session_id": s1, **req})
    assert _digest(plain["image"]["path"]) != d1  # the outline is really drawn


def test_styles_and_layers_change_pixels(tools, kl_env) -> None:
    sid = tools.open(kl_env["gds"], top_cell="TOP")["session_id"]
    out = {}
    for style in ("light", "dark", "mask"):
        r = tools.render_view({"session_id": sid, "box": BOX, "style": style,
                               "image_size": {"width": 200, "height": 200}})
        assert r["style"] == style
        with Image.open(r["image"]["path"]) as im:
            out[style] = im.convert("RGB")
    assert out["light"].getpixel((1, 1)) == (255, 255, 255) and out["dark"].getpixel((1, 1)) == (0, 0, 0)
    mask_colours = {c for _, c in out["mask"].getcolors(65536)}
    assert mask_colours <= {(255, 255, 255), (0, 0, 0)} and len(mask_colours) == 2
    empty = tools.render_view({"session_id": sid, "box": BOX, "layers": [{"layer": 2, "datatype": 0}],
                               "image_size": {"width": 200, "height": 200}})
    with Image.open(empty["image"]["path"]) as im:
        assert {c for _, c in im.convert("RGB").getcolors(65536)} == {(255, 255, 255)}  # no metal there


def test_set_view_feeds_render_defaults(tools, kl_env) -> None:
    sid = tools.open(kl_env["oas"], top_cell="TOP")["session_id"]
    tools.set_view({"session_id": sid, "box": BOX, "layers": [{"layer": 1, "datatype": 0}]})
    a = tools.render_view({"session_id": sid, "image_size": {"width": 100, "height": 100}})
    b = tools.render_view({"session_id": sid, "box": BOX, "cell": "TOP", "layers": [{"layer": 1, "datatype": 0}],
                           "image_size": {"width": 100, "height": 100}})
    assert a["box_um"] == BOX and a["render_id"] == b["render_id"]
    assert _digest(a["image"]["path"]) == _digest(b["image"]["path"])
