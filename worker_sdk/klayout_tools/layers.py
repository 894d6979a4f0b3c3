"""Layer lookup and the LayerRef form, sorted by layer then datatype."""
from __future__ import annotations

from typing import Any, Iterable

import klayout.db as kdb

from .errors import InvalidLayer


def layer_ref(layout: kdb.Layout, index: int) -> dict[str, Any]:
    info = layout.get_info(index)
    ref: dict[str, Any] = {"layer": int(info.layer), "datatype": int(info.datatype)}
    if info.name:
        ref["name"] = info.name
    return ref


def sorted_layer_indexes(layout: kdb.Layout) -> list[int]:
    return sorted(layout.layer_indexes(),
                  key=lambda i: (layout.get_info(i).layer, layout.get_info(i).datatype, layout.get_info(i).name))


def resolve_layers(layout: kdb.Layout, requested: Iterable[dict[str, Any]] | None) -> list[int]:
    """Layer indexes for the requested LayerRefs (all layers when None), sorted; INVALID_LAYER if absent."""
    if requested is None:
        return sorted_layer_indexes(layout)
    by_key: dict[tuple[int, int], list[int]] = {}
    for i in layout.layer_indexes():
        info = layout.get_info(i)
        by_key.setdefault((info.layer, info.datatype), []).append(i)
    chosen: set[int] = set()
    for ref in requested:
        hits = by_key.get((ref["layer"], ref["datatype"]))
        if not hits:
            raise InvalidLayer(f"layer {ref['layer']}/{ref['datatype']} is not in the layout",
                               details={"layer": ref["layer"], "datatype": ref["datatype"],
                                        "available": [layer_ref(layout, i) for i in sorted_layer_indexes(layout)]})
        chosen.update(hits)
    order = sorted_layer_indexes(layout)
    return [i for i in order if i in chosen]
