"""Where the ICCAD 2013 mask-optimization data is: one answer for the litho engine,
the run report, the example repository and the tests.

In order: a folder the caller names, `$DOME_ICCAD13_DATA`, `$DOME_LITHO_KERNELS`
(the engine's older name for the same setting), then the copy a source checkout
ships in examples/iccad13/data. Nothing outside the installation is searched:
a folder that happens to sit next to the checkout is never picked up silently.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV = "DOME_ICCAD13_DATA"
LEGACY_ENV = "DOME_LITHO_KERNELS"
SHIPPED = Path(__file__).resolve().parents[1] / "examples" / "iccad13" / "data"


def iccad13_data(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The ICCAD 2013 data folder, or None when nothing is named and no copy is shipped.

    A folder that is named (argument or environment) is returned as given even
    when it does not exist, so the caller's error names what the user asked for."""
    for named in (explicit, os.environ.get(ENV), os.environ.get(LEGACY_ENV)):
        if named:
            return Path(named)
    return SHIPPED if SHIPPED.is_dir() else None
