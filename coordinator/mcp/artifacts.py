"""Artifacts as MCP resources, and images as MCP image content.

Every file a tool writes under the host's artifact folders (KLayout renders,
crops, DRC reports, oversized results) is a resource `dome://artifacts/<path
relative to the ops root>`: listed by resources/list, served by
resources/read, and linked from the tool result that produced it, so a
client on another machine can fetch what a server-side path names. PNG
renders and crops up to MAX_IMAGE_BYTES also come back inline as image
content; a larger one is only linked (the link says how to get it).

Pure functions over paths; the host does the I/O at the edges.
"""
from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

SCHEME = "dome://artifacts/"
MAX_IMAGE_BYTES = 1024 * 1024  # inline image content bound per image
MAX_INLINE_IMAGES = 4  # per result; the rest are links
MAX_LINKS = 64  # resource links per result
MAX_READ_BYTES = 32 * 1024 * 1024
PAGE = 200  # resources/list page size
ARTIFACT_DIRS = ("mcp/klayout", "mcp/artifacts")  # relative to the ops root
MAX_URI_BYTES = 1024  # longer is no artifact of ours (a name part is at most 255 bytes)
SHOWN_CHARS = 120  # how much of a refused URI an error repeats


class ArtifactError(ValueError):
    """A URI that names no artifact this host serves."""


def roots(ops_root: Path) -> list[Path]:
    return [ops_root / d for d in ARTIFACT_DIRS]


def uri_for(ops_root: Path, path: Path) -> str | None:
    """The resource URI of a file under an artifact folder, or None for any other path."""
    try:
        real = path.resolve()
        base = ops_root.resolve()
    except OSError:
        return None
    if not any(real.is_relative_to(r.resolve()) for r in roots(ops_root)):
        return None
    return SCHEME + real.relative_to(base).as_posix()


def shown(uri: str) -> str:
    """A client's URI as an error may repeat it: bounded, control characters escaped."""
    text = uri if len(uri) <= SHOWN_CHARS else uri[:SHOWN_CHARS] + "..."
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


def path_for(ops_root: Path, uri: str) -> Path:
    """The file a URI names; refuses anything outside the artifact folders (after resolving links).

    Every refusal is an ArtifactError naming the URI only (never a host path): a NUL byte, an
    over-long URI or name part, and an OS error while resolving are refused like a missing file."""
    if not uri.startswith(SCHEME):
        raise ArtifactError(f"not a dome artifact URI: {shown(uri)}")
    rel = uri[len(SCHEME):]
    parts = rel.split("/")
    if not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel or len(uri.encode()) > MAX_URI_BYTES \
            or any(p in ("", ".", "..") or len(p.encode()) > 255 for p in parts):
        raise ArtifactError(f"malformed artifact URI: {shown(uri)}")
    try:
        path = (ops_root / rel).resolve()
        ok = any(path.is_relative_to(r.resolve()) for r in roots(ops_root)) and path.is_file()
    except (OSError, ValueError):
        ok = False
    if not ok:
        raise ArtifactError(f"no artifact {shown(uri)}")
    return path


def media_type(path: Path) -> str:
    if path.suffix == ".lyrdb":
        return "application/xml"
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def refs(result: Any) -> Iterator[Mapping[str, Any]]:
    """Artifact references in a result: objects with a `path` and a `media_type` (depth-first, in order)."""
    stack = [result]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is str or t is int or t is float or t is bool or node is None:
            continue  # the common leaves, without an ABC check each
        if t is dict or isinstance(node, Mapping):
            if isinstance(node.get("path"), str) and isinstance(node.get("media_type"), str):
                yield node
            stack.extend(reversed(list(node.values())))
        elif t is list or isinstance(node, list):
            stack.extend(reversed(node))


def content_for(ops_root: Path, result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Extra content items for a result: inline images (bounded), then resource links."""
    images: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    seen: set[str] = set()
    for ref in refs(result):
        path = Path(ref["path"])
        uri = uri_for(ops_root, path)
        if uri is None or uri in seen or not path.is_file():
            continue
        seen.add(uri)
        size = path.stat().st_size
        mt = ref["media_type"]
        if mt.startswith("image/") and size <= MAX_IMAGE_BYTES and len(images) < MAX_INLINE_IMAGES:
            images.append({"type": "image", "data": base64.b64encode(path.read_bytes()).decode(), "mimeType": mt})
        if len(links) < MAX_LINKS:
            links.append({"type": "resource_link", "uri": uri, "name": path.name, "mimeType": mt, "size": size,
                          "description": f"{ref.get('kind', 'artifact')}: read it with resources/read"})
    return images + links


def listing(ops_root: Path, cursor: str | None,
            visible: Callable[[str], bool] = lambda uri: True) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the artifacts `visible` lets the caller see, in path order; cursor = offset."""
    found = sorted((p for r in roots(ops_root) if r.is_dir() for p in r.rglob("*") if p.is_file()),
                   key=lambda p: p.as_posix())
    files = [(p, u) for p in found for u in (uri_for(ops_root, p),) if u is not None and visible(u)]
    start = int(cursor) if cursor and cursor.isdigit() else 0
    page = files[start:start + PAGE]
    out = []
    for p, uri in page:
        out.append({"uri": uri, "name": p.name, "mimeType": media_type(p), "size": p.stat().st_size})
    nxt = str(start + PAGE) if start + PAGE < len(files) else None
    return out, nxt


def read(ops_root: Path, uri: str) -> dict[str, Any]:
    """{uri, mimeType, text | blob} for resources/read."""
    path = path_for(ops_root, uri)
    if path.stat().st_size > MAX_READ_BYTES:
        raise ArtifactError(f"{uri} is larger than {MAX_READ_BYTES} bytes")
    mt = media_type(path)
    data = path.read_bytes()
    if mt.startswith("text/") or mt in ("application/json", "application/xml"):
        try:
            return {"uri": uri, "mimeType": mt, "text": data.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {"uri": uri, "mimeType": mt, "blob": base64.b64encode(data).decode()}
