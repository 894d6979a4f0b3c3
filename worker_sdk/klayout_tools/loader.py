"""Open a GDS or OASIS file: validate the path, check the format, read it."""
from __future__ import annotations

import hashlib
from pathlib import Path

import klayout.db as kdb

from .config import Config
from .errors import FileNotFound, InvalidTarget, ToolLimitExceeded, TopCellNotFound, UnsupportedFormat
from .paths import resolve_allowed

FORMAT_ALIASES = {"gds": "gds", "gdsii": "gds", "gds2": "gds", "oas": "oas", "oasis": "oas"}
EXTENSIONS = {".gds": "gds", ".gdsii": "gds", ".gds2": "gds", ".oas": "oas", ".oasis": "oas"}
OASIS_MAGIC = b"%SEMI-OASIS\r\n"
GDS_MAGIC = b"\x00\x06\x00\x02"  # HEADER record: length 6, type 0x00 data type 0x02


def detect_format(path: Path, declared: str | None) -> str:
    if declared is not None:
        fmt = FORMAT_ALIASES.get(declared.lower())
        if fmt is None:
            raise UnsupportedFormat(f"unsupported format {declared!r}",
                                    details={"format": declared, "supported": sorted(FORMAT_ALIASES)})
    else:
        fmt = EXTENSIONS.get(path.suffix.lower())
        if fmt is None:
            raise UnsupportedFormat("cannot infer the format from the extension",
                                    details={"path": str(path), "supported_extensions": sorted(EXTENSIONS)},
                                    hints=["pass format: gds or oas"])
    with path.open("rb") as fh:
        head = fh.read(len(OASIS_MAGIC))
    actual = "oas" if head.startswith(OASIS_MAGIC) else "gds" if head.startswith(GDS_MAGIC) else None
    if actual != fmt:
        raise UnsupportedFormat(f"file content is not {fmt}",
                                details={"path": str(path), "declared": fmt, "detected": actual})
    return fmt


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(raw_path: str, declared_format: str | None, top_cell: str | None, config: Config
         ) -> tuple[dict, kdb.Layout, str, list[str]]:
    path = resolve_allowed(raw_path, config.allowed_roots, field="path")
    size = path.stat().st_size
    if size > config.limits.max_layout_bytes:
        raise ToolLimitExceeded("layout file is larger than the configured limit",
                                details={"limit": "max_layout_bytes", "max": config.limits.max_layout_bytes,
                                         "size": size})
    fmt = detect_format(path, declared_format)
    before = path.stat()
    digest = sha256_file(path)
    layout = kdb.Layout()
    try:
        layout.read(str(path))
    except RuntimeError as exc:
        raise UnsupportedFormat("KLayout could not read the file",
                                details={"path": str(path), "format": fmt, "error": str(exc)}) from exc
    after = path.stat()
    if (after.st_mtime_ns, after.st_size, after.st_ino) != (before.st_mtime_ns, before.st_size, before.st_ino):
        # changed while we read it: refuse rather than describe a mix
        raise FileNotFound("layout file changed while it was read", details={"path": str(path)}, retry="light")
    tops = sorted(c.name for c in layout.top_cells())
    if not tops:
        raise TopCellNotFound("layout has no top cell", details={"path": str(path)})
    if top_cell is None:
        selected = tops[0]
    elif top_cell in tops:
        selected = top_cell
    else:
        raise TopCellNotFound(f"no top cell named {top_cell!r}",
                              details={"top_cell": top_cell, "top_cells": tops,
                                       "is_cell": layout.has_cell(top_cell)})
    source = {"path": str(path), "format": fmt, "sha256": digest}
    return source, layout, selected, tops


def cell_or_error(layout: kdb.Layout, name: str) -> kdb.Cell:
    if not isinstance(name, str) or not layout.has_cell(name):
        raise InvalidTarget(f"no cell named {name!r}", details={"cell": name})
    return layout.cell(name)
