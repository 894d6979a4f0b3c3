"""The standard provenance keys of a litho result, beside the engine's own.

The engine's own block (model, kernels, layout and mask digests, process
window) stays; `registry.provenance.complete` adds seed, engine_versions,
inputs_hash, outputs_hash and revision_id to it. This runs where the engine
builds each result, so the CLI, an in-process call and the MCP worker give
the same bytes. The inputs hash covers the request with the engine's
defaults filled in (fill, report level), so a request that spells a default
and one that leaves it out hash alike.
"""
from __future__ import annotations

import sys
from functools import lru_cache
from typing import Any, Mapping

from registry.provenance import complete

from .inputs import ENGINE, ENGINE_VERSION


@lru_cache(maxsize=1)
def engine_versions() -> dict[str, str]:
    import numpy
    import torch  # the forward model's engine: every litho result was computed with it

    return {ENGINE: ENGINE_VERSION, "numpy": numpy.__version__, "python": ".".join(map(str, sys.version_info[:3])),
            "torch": str(torch.__version__)}


def stamp_result(resp: dict[str, Any], request: Mapping[str, Any], *, tool: str, fill: str,
                 seed: Any = None, **defaults: Any) -> dict[str, Any]:
    """`resp` with the standard keys merged into its provenance; the last step of building it."""
    effective = {**request, "fill": fill, **{k: v for k, v in defaults.items() if k not in request}}
    return complete(resp, effective, tool=tool, engine_versions=engine_versions(), seed=seed)
