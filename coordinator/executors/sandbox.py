"""The worker sandbox: bubblewrap argv (pure), a probe, rlimits and a pids cgroup.

Inside the sandbox a worker sees:

- a read-only system: /usr, /bin, /lib*, /sbin, a few files of /etc, the
  Python installation and dome's own `registry` and `worker_sdk` packages
  (read-only, at their host paths);
- /dome/scratch (read-write; its private checkout goes in /dome/scratch/repo),
  /dome/base.git (read-only objects of the base commit), /dome/spawn.json,
  /dome/coordinator.pub, /dome/gateway.sock (the only way out; for a run
  with an egress configuration also /dome/egress.sock, the coordinator's
  egress gate to allowed model hosts) and, for a
  sender-constrained grant, /dome/worker.key (read-only; this attempt's
  private key, copied into this attempt's sandbox only, after which the
  local executor deletes the host file);
- a private /tmp, /proc of its own PID namespace, a minimal /dev;
- /dome/cgroup/<controller> (read-only): the attempt's own cgroups, so the
  runtime can tell that the action hit a limit before it reports a result.

Nothing else of the host: not the real repository or its .git, not
OPS_ROOT (keys, ledger, blobs), not /root or /home. Namespaces: network
(no interfaces but loopback), PID, IPC, UTS, cgroup; a new session;
`--die-with-parent`; all capabilities dropped. Resource limits: rlimits set before exec (CPU seconds, open files, file
size, core dumps; address space and processes only where no cgroup does the
job); per attempt, where the host lets dome create them, a pids cgroup (a
fork bomb stops at the limit, even for root) and a memory cgroup (every
page the attempt touches, its tmpfs pages included); and /tmp and
/dome/scratch are tmpfs mounts capped at `tmp_mb` and `disk_mb`, so what an
attempt writes is bounded whatever the host's disks. The worker adds
Landlock before running its action.
"""
from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Mapping

from .base import AttemptFiles, Limits, SandboxUnavailable

IN_SCRATCH = "/dome/scratch"
IN_BASE = "/dome/base.git"
IN_SPAWN = "/dome/spawn.json"
IN_PUB = "/dome/coordinator.pub"
IN_SOCKET = "/dome/gateway.sock"
IN_TASK = "/dome/task.json"
IN_WORKER_KEY = "/dome/worker.key"
IN_EGRESS = "/dome/egress.sock"
IN_CGROUP = "/dome/cgroup"
MIB = 1024 * 1024
# What a process in a sandbox reads of /etc at run time: user and group names (git, getpwuid), the
# hosts file for localhost, the loader's cache, the time zone, the alternatives links that /usr/bin
# programs resolve through (awk), the TLS trust store, git's system configuration. Not bound, since
# nothing reads them at run time there: ld.so.conf(.d) (read by ldconfig only; the loader reads the
# cache), ca-certificates (update-ca-certificates' configuration; the store is in ssl), resolv.conf
# (the network namespace has no way to any name server). Each bind is a mount and a read-only remount.
ETC_FILES = ("passwd", "group", "hosts", "nsswitch.conf", "ld.so.cache", "localtime", "alternatives",
             "ssl", "gitconfig")
ETC_NOT_BOUND = ("ld.so.conf", "ld.so.conf.d", "ca-certificates", "resolv.conf")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
CGROUP_FS = Path("/sys/fs/cgroup")
CGROUP_PIDS_ROOTS = (CGROUP_FS / "pids", CGROUP_FS / "unified", CGROUP_FS)


def dome_source_roots() -> list[Path]:
    """The package directories a worker imports (bound read-only). worker_sdk is
    located, never imported: the coordinator reaches it only across a process boundary."""
    return list(_dome_source_roots())


@functools.lru_cache(maxsize=1)
def _dome_source_roots() -> tuple[Path, ...]:  # located once per process, not once per attempt
    import importlib.util

    import registry

    spec = importlib.util.find_spec("worker_sdk")
    if spec is None or spec.origin is None:  # pragma: no cover - broken install
        raise RuntimeError("worker_sdk is not installed beside the coordinator")
    return (Path(registry.__file__).resolve().parent, Path(spec.origin).resolve().parent)


def python_roots() -> list[Path]:
    return list(_python_roots(sys.base_prefix, sys.prefix, sys.executable))


@functools.lru_cache(maxsize=4)  # resolved once per installation, not once per attempt (80 us)
def _python_roots(base_prefix: str, prefix: str, executable: str) -> tuple[Path, ...]:
    roots = {Path(base_prefix).resolve(), Path(prefix).resolve()}
    exe = Path(executable).resolve()
    roots.add(exe.parent.parent)
    return tuple(sorted(r for r in roots if not any(str(r).startswith(s + "/") or str(r) == s for s in SYSTEM_DIRS)))


SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def sandbox_path() -> str:
    """PATH inside a sandbox (worker or validation suite): the `bin` directory of
    the Python installation dome runs on first, then the system directories.

    That installation is bound read-only into every sandbox anyway; putting its
    `bin` first makes `python3` in a command or a suite (`python3 -m pytest`)
    the interpreter with the project's packages (a virtualenv's, pyenv's), not
    a bare system Python that happens to be first on the system PATH."""
    return _sandbox_path(sys.prefix)


@functools.lru_cache(maxsize=4)  # once per installation, not once per attempt
def _sandbox_path(prefix: str) -> str:
    bindir = Path(prefix).resolve() / "bin"
    if not (bindir / "python3").exists() and not (bindir / "python").exists():
        return SYSTEM_PATH
    if str(bindir) in SYSTEM_PATH.split(":"):
        return SYSTEM_PATH
    return f"{bindir}:{SYSTEM_PATH}"


# Namespaces and privileges every dome sandbox gets (workers and validation suites).
CONFINEMENT: tuple[str, ...] = (
    "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
    "--die-with-parent", "--new-session", "--cap-drop", "ALL")


@functools.lru_cache(maxsize=1)  # the host's layout, read once per process
def system_dirs_view() -> tuple[str, ...]:
    """bwrap options for SYSTEM_DIRS as the host has them. Where one is a symbolic link into
    another that is bound (merged /usr: /bin -> usr/bin), the sandbox gets the same link rather
    than a second bind mount of the same files: the same view, and one mount fewer each (a bind
    and its read-only remount, about 0.1 ms of bubblewrap's CPU per attempt each)."""
    links = {d: _link_of(d) for d in SYSTEM_DIRS}
    real = [os.path.realpath(d) for d, t in links.items() if t is None]
    # a link whose full resolution leaves those directories (through a further link) stays a bind
    return tuple(system_dirs_options({d: t if t is None or any(os.path.realpath(d).startswith(r + "/") for r in real)
                                      else None for d, t in links.items()}))


def _link_of(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:  # not a link, or absent (then --ro-bind-try skips it)
        return None


def system_dirs_options(links: Mapping[str, str | None]) -> list[str]:
    """(pure) `links`: each system directory and what it links to (None: not a link). A link whose
    target lies inside a directory bound for real becomes `--symlink`; any other is bound."""
    real = [d for d, target in links.items() if target is None]
    out: list[str] = []
    for d, target in links.items():
        resolved = None if target is None else os.path.normpath(os.path.join(os.path.dirname(d), target))
        if resolved is not None and any(resolved.startswith(r + "/") for r in real):
            out += ["--symlink", target, d]
        else:
            out += ["--ro-bind-try", d, d]
    return out


def host_view(bwrap: str = "bwrap", *, extra_ro: Iterable[Path] = (),
              with_dome: bool = True, tmp_mb: int | None = None) -> tuple[list[str], list[Path]]:
    """The minimal read-only host every sandbox starts from: a private /tmp,
    system dirs, a few /etc files, the Python installation and (optionally)
    dome's own packages; never OPS_ROOT, keys, the ledger, the real repository
    or home directories. `tmp_mb` caps the private /tmp. Returns (argv so far,
    dome source roots bound)."""
    # /tmp is a fresh tmpfs; it is mounted first so that binds below it (a
    # checkout or virtualenv living under /tmp) stay visible inside.
    a: list[str] = [bwrap, *(["--size", str(int(tmp_mb) * MIB)] if tmp_mb else []), "--tmpfs", "/tmp",
                    *system_dirs_view()]
    for name in ETC_FILES:
        a += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for root in [*python_roots(), *extra_ro]:
        a += ["--ro-bind", str(root), str(root)]
    src = dome_source_roots() if with_dome else []
    for pkg in src:
        a += ["--ro-bind", str(pkg), str(pkg)]
    a += ["--proc", "/proc", "--dev", "/dev", "--dir", "/dome"]
    return a, src


def cpus_per_worker(max_concurrency: int) -> int:
    """The cores one worker is granted when `max_concurrency` run side by side on this
    process's CPUs (at least one); workers size their thread pools from it ($DOME_WORKER_CPUS)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - no affinity API on this platform
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, int(max_concurrency)))


def bwrap_argv(files: AttemptFiles, *, bwrap: str = "bwrap", python: str | None = None,
               extra_ro: Iterable[Path] = (), limits: Limits | None = None,
               cgroups: Mapping[str, Path] | None = None, worker_key_fd: int | None = None,
               cpus: int | None = None, spawn_fd: int | None = None, task_fd: int | None = None,
               counted: Mapping[str, int] | None = None, view: tuple[list[str], list[Path]] | None = None,
               env_path: str | None = None) -> list[str]:
    """The full command line: bwrap options, then `python -m worker_sdk /dome/spawn.json`.

    The scratch is a tmpfs of `disk_mb` (the checkout is private to the attempt and
    leaves only through the gateway), /tmp one of `tmp_mb`; `cgroups` (controller ->
    the attempt's cgroup directory) are bound read-only under /dome/cgroup. With
    `worker_key_fd` (a pipe holding the key) bwrap copies the attempt's key into the
    sandbox, so the host file can go as soon as the sandbox starts. `cpus` is the
    worker's CPU grant ($DOME_WORKER_CPUS), from which it sizes its thread pools. `spawn_fd`
    and `task_fd` (descriptors holding the spawn spec and task facts, read from their start) are
    copied into the sandbox the same way instead of binding the host files. `counted`: the
    cgroups' limit counters before this attempt (`refused_forks`, `oom_kills`), where the groups
    served earlier attempts: the worker reports only what its own action ran into. `view` and `path`:
    the read-only system and the PATH of another root than this host's (a worker image's: the
    container executor's nested mode builds the sandbox inside its run container)."""
    lim = limits or Limits()
    a, src = (list(view[0]), list(view[1])) if view is not None else \
        host_view(bwrap, extra_ro=[*extra_ro, *(Path(d) for d in lim.tool_dirs)], tmp_mb=lim.tmp_mb)
    for controller, path in sorted((cgroups or {}).items()):
        a += ["--ro-bind", str(path), f"{IN_CGROUP}/{controller}"]
    budget = {"tmp_mb": lim.tmp_mb, "disk_mb": lim.disk_mb, "memory_mb": lim.memory_mb,
              "max_processes": lim.max_processes, "cgroups": sorted(cgroups or {}),
              **({"counted": dict(counted)} if counted else {})}
    a += ["--size", str(lim.disk_mb * MIB), "--tmpfs", IN_SCRATCH,
          "--ro-bind", str(files.base_git), IN_BASE,
          *(["--ro-bind-data", str(spawn_fd), IN_SPAWN] if spawn_fd is not None
            else ["--ro-bind", str(files.spawn_json), IN_SPAWN]),
          "--ro-bind", str(files.coordinator_pub), IN_PUB,
          "--bind", str(files.gateway_socket), IN_SOCKET,
          *(["--bind", str(files.egress_socket), IN_EGRESS] if files.egress_socket else []),
          *(["--ro-bind-data", str(task_fd), IN_TASK] if task_fd is not None
            else ["--ro-bind", str(files.task_json), IN_TASK] if files.task_json else []),
          *(["--perms", "0400", "--ro-bind-data", str(worker_key_fd), IN_WORKER_KEY] if worker_key_fd is not None
            else ["--ro-bind", str(files.worker_key), IN_WORKER_KEY] if files.worker_key else []),
          *CONFINEMENT,
          "--chdir", IN_SCRATCH, "--clearenv",
          "--setenv", "PATH", env_path or sandbox_path(),
          "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
          "--setenv", "PYTHONPATH", str(src[0].parent),
          "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
          "--setenv", "DOME_SCRATCH", IN_SCRATCH, "--setenv", "DOME_BASE_GIT", IN_BASE,
          "--setenv", "DOME_COORDINATOR_PUB", IN_PUB, "--setenv", "DOME_LIMITS", json.dumps(budget),
          *(["--setenv", "DOME_TASK_META", IN_TASK] if files.task_json else []),
          *(["--setenv", "DOME_WORKER_KEY", IN_WORKER_KEY] if files.worker_key else []),
          *(["--setenv", "DOME_EGRESS_SOCKET", IN_EGRESS] if files.egress_socket else []),
          *(["--setenv", "DOME_WORKER_CPUS", str(cpus)] if cpus else []),
          *(["--setenv", "DOME_TOOL_DIRS", ":".join(lim.tool_dirs)] if lim.tool_dirs else []),
          "--", python or sys.executable, "-s", "-m", "worker_sdk", IN_SPAWN]
    return a


def direct_argv(files: AttemptFiles, python: str | None = None) -> list[str]:
    """`--sandbox none`: the same worker, unconfined (explicit opt-in only)."""
    return [python or sys.executable, "-m", "worker_sdk", str(files.spawn_json)]


def direct_env(files: AttemptFiles, cpus: int | None = None) -> dict[str, str]:
    src = dome_source_roots()[0].parent
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(files.scratch),
            "PYTHONPATH": str(src), "DOME_SCRATCH": str(files.scratch), "DOME_BASE_GIT": str(files.base_git),
            "DOME_COORDINATOR_PUB": str(files.coordinator_pub), "LANG": "C.UTF-8",
            **({"DOME_TASK_META": str(files.task_json)} if files.task_json else {}),
            **({"DOME_WORKER_KEY": str(files.worker_key)} if files.worker_key else {}),
            **({"DOME_EGRESS_SOCKET": str(files.egress_socket)} if files.egress_socket else {}),
            **({"DOME_WORKER_CPUS": str(cpus)} if cpus else {})}


@functools.lru_cache(maxsize=1)
def probe_bwrap() -> tuple[bool, str]:
    """(usable, reason): can this host build the sandbox (namespaces included)?"""
    exe = shutil.which("bwrap")
    if exe is None:
        return False, "bubblewrap (bwrap) is not installed"
    try:
        r = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--die-with-parent",
                            "--proc", "/proc", "--dev", "/dev", "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap failed to run: {exc}"
    if r.returncode != 0:
        return False, f"bwrap cannot create namespaces here: {r.stderr.strip()[:300]}"
    return True, exe


def require_bwrap() -> str:
    """The bwrap executable, or SandboxUnavailable saying why this host cannot sandbox."""
    ok, info = probe_bwrap()
    if not ok:
        raise SandboxUnavailable(f"no sandbox available: {info}", details={"reason": info},
                                 hints=SandboxUnavailable.hints_default)
    return info


def pids_cgroup_parent() -> Path | None:
    """A writable pids cgroup directory to create per-attempt groups under, or None."""
    for root in CGROUP_PIDS_ROOTS:
        if not (root / "cgroup.procs").exists():
            continue
        if root.name != "pids" and not (root / "cgroup.controllers").exists():
            continue
        if root.name != "pids" and "pids" not in (root / "cgroup.controllers").read_text():
            continue
        parent = root / "dome"
        try:
            parent.mkdir(exist_ok=True)
            if root.name != "pids":
                (root / "cgroup.subtree_control").write_text("+pids")
                (parent / "cgroup.subtree_control").write_text("+pids")
            if _probe(parent, "pids.max"):
                return parent
        except OSError:
            continue
    return None


def _probe(parent: Path, limit_file: str) -> bool:
    probe = parent / f"probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        return (probe / limit_file).exists()
    finally:
        probe.rmdir()


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 controller (from /proc/self/cgroup)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctls, path = line.split(":", 2)
            if controller in ctls.split(","):
                return path
    except (OSError, ValueError):
        pass
    return None


def memory_cgroup_parent() -> tuple[Path, str] | None:
    """(directory to create per-attempt memory cgroups under, "v1" or "v2"), or None.

    cgroup v1: nested under this process's own memory cgroup, so the host's
    accounting of dome still holds; v2: a `dome` group at the root, as for pids."""
    v1 = CGROUP_FS / "memory"
    own = _own_cgroup("memory")
    candidates: list[tuple[Path, str, Path | None]] = []
    if (v1 / "cgroup.procs").exists() and own is not None:
        candidates.append((v1 / own.lstrip("/") / "dome", "v1", None))
    if (CGROUP_FS / "cgroup.controllers").exists():
        candidates.append((CGROUP_FS / "dome", "v2", CGROUP_FS))
    for parent, version, root in candidates:
        try:
            if "memory" not in ((root / "cgroup.controllers").read_text() if root else "memory"):
                continue
            parent.mkdir(exist_ok=True)
            if root is not None:
                (root / "cgroup.subtree_control").write_text("+memory")
                (parent / "cgroup.subtree_control").write_text("+memory")
            if _probe(parent, "memory.limit_in_bytes" if version == "v1" else "memory.max"):
                return parent, version
        except OSError:
            continue
    return None


def cpuacct_cgroup_parent() -> Path | None:
    """cgroup v1: a `dome` group to create per-attempt CPU counters in, nested under this
    process's own cpuacct group (so whatever counts the coordinator's tree, a benchmark's group
    or the host's, still counts its workers), or None (cgroup v2 needs none: every group, the
    pids one included, has `cpu.stat`)."""
    root, own = CGROUP_FS / "cpuacct", _own_cgroup("cpuacct")
    if own is None or not (root / "cpuacct.usage").exists():
        return None
    parent = root / own.lstrip("/") / "dome"
    try:
        parent.mkdir(exist_ok=True)
        return parent if _probe(parent, "cpuacct.usage") else None
    except OSError:
        return None


def cgroup_cpu_ns(cgroup: Path) -> int | None:
    """CPU time (ns) every process that ever ran in this group spent there: cpuacct.usage (v1)
    or cpu.stat's usage_usec (v2); None where the group keeps no such counter."""
    try:
        return int(read_cgroup_file(cgroup / "cpuacct.usage").strip())
    except (OSError, ValueError):
        pass
    try:
        for line in read_cgroup_file(cgroup / "cpu.stat").splitlines():
            key, _, val = line.partition(" ")
            if key == "usage_usec":
                return int(val) * 1000
    except (OSError, ValueError):
        pass
    return None


def read_cgroup_file(path: Path | str) -> str:
    """A cgroup file's text, in one open and one read (they are small; this runs per attempt)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 65536).decode("ascii", "replace")
    finally:
        os.close(fd)


def oom_kills(cgroup: Path, version: str | None = None) -> int:
    """How many processes the kernel killed in this memory cgroup for exceeding it
    (`version` "v1" or "v2" names the one file to read; None tries both)."""
    names = {"v1": ("memory.oom_control",), "v2": ("memory.events",)}.get(version or "",
                                                                        ("memory.events", "memory.oom_control"))
    for name in names:
        try:
            for line in read_cgroup_file(cgroup / name).splitlines():
                key, _, val = line.partition(" ")
                if key == "oom_kill":
                    return int(val)
        except (OSError, ValueError):
            continue
    return 0


def refused_forks(cgroup: Path) -> int:
    """How many forks the pids cgroup refused at its limit."""
    try:
        key, _, val = read_cgroup_file(cgroup / "pids.events").strip().partition(" ")
        return int(val) if key == "max" else 0
    except (OSError, ValueError):
        return 0


# The launcher: what the child must do between fork and the sandbox's exec (a
# parent-death signal, rlimits, joining the attempt's cgroups), done by small
# programs the child execs (util-linux's setpriv, then prlimit unless sh is dash,
# whose ulimit sets the rlimits, then sh for the cgroup join), so a worker starts with vfork + exec instead of a full fork of
# the coordinator (CPython only uses vfork when there is no preexec_fn). Where
# setpriv or prlimit is missing, a few lines of Python (`python -S`) do the same.
_JOIN = 'for g; do [ "$g" = -- ] && break; { echo $$ > "$g/cgroup.procs"; } 2>/dev/null || :; shift; done; shift; exec "$@"'


@functools.lru_cache(maxsize=1)
def launcher_tools() -> tuple[str, str, str] | None:
    """(setpriv, prlimit, sh), or None where one of them is missing (then the Python launcher does the job)."""
    tools = tuple(shutil.which(t) for t in ("setpriv", "prlimit", "sh"))
    return tools if all(tools) else None  # type: ignore[return-value]


def _rlimits(limits: Limits, groups: Mapping[str, Path]) -> list[tuple[str, int, int]]:
    """(prlimit option, rlimit, value): the rlimits a worker gets. Address space and process
    count only where no cgroup bounds them: an address-space rlimit would refuse a large
    reservation before the memory cgroup could see (and report) real use."""
    mem = limits.memory_mb * MIB
    return [("cpu", resource.RLIMIT_CPU, limits.cpu_seconds),
            *((("as", resource.RLIMIT_AS, mem),) if "memory" not in groups else ()),
            ("nofile", resource.RLIMIT_NOFILE, limits.max_open_files),
            *((("nproc", resource.RLIMIT_NPROC, limits.max_processes),) if "pids" not in groups else ()),
            ("fsize", resource.RLIMIT_FSIZE, limits.max_file_mb * MIB),
            ("core", resource.RLIMIT_CORE, 0)]


# dash's `ulimit` flag and unit for each rlimit the launcher sets (its -p is RLIMIT_NPROC)
_DASH_ULIMIT = {"cpu": ("-t", 1), "as": ("-v", 1024), "nofile": ("-n", 1), "nproc": ("-p", 1),
                "fsize": ("-f", 512), "core": ("-c", 512)}


def launcher_argv(limits: Limits, cgroups: Mapping[str, Path] | Path | None, argv: list[str],
                  tools: tuple[str, str, str], hard: Mapping[int, int] | None = None,
                  shell_ulimit: bool = False) -> list[str]:
    """argv that, exec'd in a fresh child, sets the parent-death signal, the rlimits and joins
    the attempt's cgroups, then execs `argv` (pure: `hard` gives the current hard limits).
    `shell_ulimit` (the host's sh is dash): the shell sets the rlimits with its `ulimit`
    (soft and hard) instead of prlimit, one exec fewer per worker.

    A limit is never asked above the current hard limit (an unprivileged process may only
    lower it); joining a cgroup that refuses is skipped, the cgroup's absence is then seen
    by the executor's sweep."""
    setpriv, prlimit, sh = tools
    groups: dict[str, Path] = ({"pids": cgroups} if isinstance(cgroups, Path) else dict(cgroups or {}))
    values = []
    for name, res, val in _rlimits(limits, groups):
        cap = (hard or {}).get(res, resource.RLIM_INFINITY)
        values.append((name, val if cap == resource.RLIM_INFINITY else min(val, cap)))
    if shell_ulimit:  # the values are integers made here: nothing of a request reaches the script
        script = " && ".join(f"ulimit {_DASH_ULIMIT[n][0]} {v // _DASH_ULIMIT[n][1]}" for n, v in values)
        return [setpriv, "--pdeathsig", "KILL", "--", sh, "-c", f"{{ {script}; }} || exit 125; {_JOIN}",
                "dome-launch", *(str(g) for g in groups.values()), "--", *argv]
    opts = [f"--{name}={v}:{v}" for name, v in values]
    out = [setpriv, "--pdeathsig", "KILL", "--", prlimit, *opts, "--"]
    if groups:
        out += [sh, "-c", _JOIN, "dome-launch", *(str(g) for g in groups.values()), "--"]
    return [*out, *argv]


def hard_limits(limits: Limits, cgroups: Mapping[str, Path] | Path | None) -> dict[int, int]:
    """This process's hard limits for the rlimits the launcher sets."""
    groups = {"pids": cgroups} if isinstance(cgroups, Path) else dict(cgroups or {})
    return {res: resource.getrlimit(res)[1] for _, res, _ in _rlimits(limits, groups)}


# The same launcher without util-linux: set the parent-death signal, join the cgroups, set the
# rlimits, exec. Its one argument is JSON ({"rlimits": [[resource, value]], "cgroups": [path]}).
_PY_LAUNCH = """import ctypes, json, os, resource, sys
c = json.loads(sys.argv[1])
try:
    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)
except Exception:
    pass
for g in c["cgroups"]:
    try:
        with open(os.path.join(g, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError:
        pass
for r, v in c["rlimits"]:
    try:
        resource.setrlimit(r, (v, v))
    except (ValueError, OSError):
        pass
os.execvp(sys.argv[2], sys.argv[2:])
"""


def python_launcher_argv(limits: Limits, cgroups: Mapping[str, Path] | Path | None, argv: list[str],
                         python: str | None = None) -> list[str]:
    """What launcher_argv does, as `python -S -c` (pure): for hosts without setpriv or prlimit."""
    groups: dict[str, Path] = ({"pids": cgroups} if isinstance(cgroups, Path) else dict(cgroups or {}))
    conf = {"rlimits": [[int(res), int(val)] for _, res, val in _rlimits(limits, groups)],
            "cgroups": [str(g) for g in groups.values()]}
    return [python or sys.executable, "-S", "-c", _PY_LAUNCH, json.dumps(conf), *argv]


def launch_argv(limits: Limits, cgroups: Mapping[str, Path] | Path | None, argv: list[str]) -> list[str]:
    """`argv` behind the launcher (parent-death signal, rlimits, cgroups): what every executor
    starts a sandboxed worker with, so that no preexec_fn is needed and CPython can vfork."""
    tools = launcher_tools()
    if tools is None:
        return python_launcher_argv(limits, cgroups, argv)
    return launcher_argv(limits, cgroups, argv, tools, hard_limits(limits, cgroups), shell_ulimit=sh_is_dash(tools[2]))


@functools.lru_cache(maxsize=4)
def sh_is_dash(sh: str) -> bool:
    """Whether `sh` is dash, whose `ulimit` flags and units the shell launcher is written for."""
    return os.path.basename(os.path.realpath(sh)) == "dash"
