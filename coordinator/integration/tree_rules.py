"""Rules judged on the tree a proposal leaves behind, not on its diff (pure).

A diff read alone can hide what it does: a mode-only section turns a file
whose text an earlier layer wrote into a symlink, a later layer rewrites the
target of a link that was harmless, an `index` line carries a mode the
section never states as a change. So after every apply the canvas asks these
functions about the resulting tree:

- `entry_rejections`: the mode an entry ends with, compared with the one it
  had on the head before this apply (a gitlink never; a new exec bit or a new
  symlink only when the policy allows it);
- `symlink_escape`: where a symlink resolves when every link on the way is
  followed through the resulting tree. A link resolving above the repository
  root or into `.git`, an absolute or malformed target, or a loop is refused,
  whoever wrote the target.

Lookups are callables so the same rules run on the canvas's in-memory tree,
on a commit read from git, or on a dict in a test.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, Mapping, Optional

from .policy import IntegrationPolicy
from .proposals import ALLOWED_MODES, GITLINK_MODE, POLICY, Rejection, is_git_dir_name

SYMLINK_MODE = "120000"
EXEC_MODE = "100755"
MAX_LINK_HOPS = 40  # what Linux allows before ELOOP

Entry = tuple[str, str]  # (mode, object id)
Lookup = Callable[[str], Optional[Entry]]
ReadBlob = Callable[[str], bytes]


def entry_rejections(path: str, before: Entry | None, after: Entry | None,
                     policy: IntegrationPolicy) -> list[Rejection]:
    """Mode rules for one entry of the resulting tree (`after`), given what
    the head held at that path before the apply (`before`)."""
    if after is None:
        return []
    mode = after[0]
    prev = before[0] if before is not None else None
    d = {"path": path, "mode": mode, "previous_mode": prev}
    if mode == GITLINK_MODE:
        return [Rejection("POLICY_GITLINK", "submodule (gitlink) entry in the resulting tree", POLICY, d)]
    if mode not in ALLOWED_MODES:
        return [Rejection("POLICY_MODE_INVALID", f"file mode {mode} is not allowed", POLICY, d)]
    if mode == EXEC_MODE and prev != EXEC_MODE and not policy.allow_exec_bit:
        return [Rejection("POLICY_MODE_EXEC", "the resulting tree gains an executable bit", POLICY, d)]
    if mode == SYMLINK_MODE and prev != SYMLINK_MODE and not policy.allow_symlinks:
        return [Rejection("POLICY_SYMLINK_FORBIDDEN", "symlinks are not allowed", POLICY, d)]
    return []


_DRIVE = re.compile(r"^[A-Za-z]:")


def _target_problem(target: bytes) -> str | None:
    if not target or b"\x00" in target or b"\\" in target or b"\n" in target:
        return "symlink target is empty or malformed"
    if target.startswith(b"/") or _DRIVE.match(target.decode("latin-1")):
        return "symlink target is absolute"
    return None


def symlink_escape(path: str, lookup: Lookup, read: ReadBlob) -> str | None:
    """Why the symlink at `path` does not stay inside the repository, or None.

    Resolution is physical, like the kernel's: `..` after a followed link
    climbs from where that link points, not from where its name sits, so a
    chain of individually harmless links cannot add up to an escape."""
    entry = lookup(path)
    if entry is None or entry[0] != SYMLINK_MODE:
        return None
    first = read(entry[1])
    problem = _target_problem(first)
    if problem:
        return problem
    where = path.split("/")[:-1]
    pending = list(reversed(first.split(b"/")))
    hops = 0
    while pending:
        part = pending.pop()
        if part in (b"", b"."):
            continue
        if part == b"..":
            if not where:
                return "symlink resolves outside the repository"
            where.pop()
            continue
        name = part.decode("utf-8", "surrogateescape")
        if is_git_dir_name(name):
            return "symlink resolves into .git"
        here = "/".join([*where, name])
        e = lookup(here)
        if e is not None and e[0] == SYMLINK_MODE:
            hops += 1
            if hops > MAX_LINK_HOPS:
                return "symlink loop"
            target = read(e[1])
            problem = _target_problem(target)
            if problem:
                return f"{problem} (via {here})"
            pending.extend(reversed(target.split(b"/")))
            continue  # a relative target resolves from the link's own directory
        where.append(name)
    return None


def tree_rejections(changes: Mapping[str, Entry | None], *, before: Lookup, after: Lookup,
                    links: Iterable[str], read: ReadBlob,
                    policy: IntegrationPolicy) -> list[Rejection]:
    """Every rule the resulting tree breaks: mode rules on the changed
    entries, escape rules on every symlink of the resulting tree. A link that
    already escaped on the head before this apply (say, one the repository
    had at its base) is not charged to this proposal; any link that escapes
    because of it is, whoever wrote that link's target."""
    out: list[Rejection] = []
    for path in sorted(changes):
        out.extend(entry_rejections(path, before(path), changes[path], policy))
    for link in sorted(set(links)):
        why = symlink_escape(link, after, read)
        if why is not None and symlink_escape(link, before, read) is None:
            e = after(link)
            target = read(e[1]).decode("utf-8", "replace") if e else ""
            out.append(Rejection("POLICY_SYMLINK_ESCAPE", why, POLICY, {"path": link, "target": target[:300]}))
    return out
