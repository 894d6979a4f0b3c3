"""Process windows: which corners are simulated, which form the PV band, and the optional focus x dose grid.

- `iccad13` (the default): nominal (focus, dose 1.00), max (focus, 1.02),
  min (defocus, 0.98); PVB = max xor min. This is the ICCAD 2013 / LithoBench
  convention every published number uses.
- a custom list of corners `{name, kernels, dose}`: one must be `nominal` (it
  gives L2 and EPE); PVB is over all the others (pixels printed at some of
  them but not at all).
- the grid option adds every kernel set (focus condition) at every dose of
  the grid and reports its band as `pvb_grid_nm2`, under its own name: it is
  a wider window than the ICCAD pair, not the published PVB.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .errors import BadRequest
from .forward import CORNERS, Corner

ICCAD13 = "iccad13"
GRID_DOSES: tuple[float, ...] = (0.98, 1.00, 1.02)
GRID_PREFIX = "grid:"


@dataclass(frozen=True)
class ProcessWindow:
    name: str
    corners: tuple[Corner, ...]
    grid: tuple[Corner, ...] = ()

    @property
    def pvb_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.corners if c.name != "nominal")

    @property
    def grid_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.grid)

    @property
    def simulated(self) -> tuple[Corner, ...]:
        return self.corners + self.grid

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name,
                               "corners": [{"name": c.name, "kernels": c.kernel, "dose": c.dose} for c in self.corners],
                               "pvb_corners": list(self.pvb_names)}
        if self.grid:
            out["grid"] = [{"name": c.name, "kernels": c.kernel, "dose": c.dose} for c in self.grid]
        return out


DEFAULT = ProcessWindow(ICCAD13, CORNERS)


def process_window(corners: str | Sequence[dict[str, Any]] | None, grid: bool | dict[str, Any] | None,
                   kernel_names: Sequence[str]) -> ProcessWindow:
    """The window a request asks for (BadRequest on an unusable one)."""
    if corners in (None, ICCAD13):
        name, cs = ICCAD13, CORNERS
    elif isinstance(corners, str):
        raise BadRequest(f"unknown corner set {corners!r}", code="LITHO_BAD_CORNERS", hints=[f"{ICCAD13} or a list of corners"])
    else:
        name = "custom"
        cs = tuple(Corner(str(c["name"]), str(c["kernels"]), float(c["dose"])) for c in corners)
        names = [c.name for c in cs]
        if len(set(names)) != len(names) or any(n.startswith(GRID_PREFIX) for n in names):
            raise BadRequest("corner names must be unique and must not start with 'grid:'", code="LITHO_BAD_CORNERS",
                             details={"names": names})
        if "nominal" not in names or len(cs) < 3:
            raise BadRequest("a corner set needs a 'nominal' corner and at least two others for the PV band",
                             code="LITHO_BAD_CORNERS", details={"names": names})
    for c in cs:
        if c.kernel not in kernel_names or not c.dose > 0:
            raise BadRequest(f"corner {c.name!r}: kernels must be one of {sorted(kernel_names)} and dose > 0",
                             code="LITHO_BAD_CORNERS", details={"corner": c.name, "kernels": c.kernel, "dose": c.dose})
    g: tuple[Corner, ...] = ()
    if grid:
        doses = tuple(float(d) for d in (grid.get("doses", GRID_DOSES) if isinstance(grid, dict) else GRID_DOSES))
        if len(doses) < 1 or any(not d > 0 for d in doses):
            raise BadRequest("grid doses must be positive", code="LITHO_BAD_CORNERS", details={"doses": list(doses)})
        g = tuple(Corner(f"{GRID_PREFIX}{k}@{d:g}", k, d) for k in sorted(kernel_names) for d in sorted(set(doses)))
    return ProcessWindow(name, tuple(cs), g)
