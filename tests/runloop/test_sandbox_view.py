"""The sandbox's host view of the system directories: on a merged-/usr host /bin, /sbin, /lib and
/lib64 are links into /usr, and the sandbox gets the same links instead of a second read-only bind
of the same files (a bind and a remount each); the view a command sees is the host's."""
from __future__ import annotations

import os
import subprocess

from coordinator.executors.sandbox import CONFINEMENT, SYSTEM_DIRS, host_view, system_dirs_options


def test_a_link_into_a_bound_directory_is_a_link_and_anything_else_a_bind() -> None:
    out = system_dirs_options({"/usr": None, "/bin": "usr/bin", "/lib": "/usr/lib", "/sbin": "../../etc",
                               "/lib64": "opt/lib64", "/lib32": None})
    assert out == ["--ro-bind-try", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "/usr/lib", "/lib",
                   "--ro-bind-try", "/sbin", "/sbin",  # resolves to /etc: outside what is bound, so bound itself
                   "--ro-bind-try", "/lib64", "/lib64", "--ro-bind-try", "/lib32", "/lib32"]


def test_the_sandbox_sees_the_system_directories_as_the_host_has_them() -> None:
    argv, _ = host_view()
    probe = "; ".join(f"if [ -L {d} ]; then echo {d} L $(readlink {d}); elif [ -d {d} ]; then echo {d} D; fi"
                      for d in SYSTEM_DIRS)
    inside = subprocess.run([*argv, *CONFINEMENT, "--", "/bin/sh", "-c", probe + "; touch /bin/x 2>/dev/null || echo ro"],
                            capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    host = [f"{d} L {os.readlink(d)}" if os.path.islink(d) else f"{d} D" for d in SYSTEM_DIRS if os.path.exists(d)]
    assert inside[:-2] == host and inside[-2] == "ro"  # and what they hold is still read-only
    links = [d for d in SYSTEM_DIRS if os.path.islink(d)]
    assert all(argv[argv.index(d) - 2] == "--symlink" for d in links)  # no bind of a merged-/usr link


# What a sandboxed process needs of /etc, checked inside a real sandbox with the trimmed view
_NEEDS = r"""
import os, pwd, grp, socket, ssl, subprocess, time
print("user", pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name)
print("localhost", socket.gethostbyname("localhost"))
print("ca", ssl.create_default_context().cert_store_stats()["x509_ca"] > 0)
print("awk", subprocess.run(["awk", "BEGIN{print 6*7}"], capture_output=True, text=True).stdout.strip())
print("git", subprocess.run(["git", "--version"], capture_output=True, text=True).returncode)
print("tz", time.tzname[0] == time.strftime("%Z"))
print("absent", sorted(n for n in ("ld.so.conf", "ld.so.conf.d", "ca-certificates", "resolv.conf")
                       if os.path.lexists("/etc/" + n)))
"""


def test_the_sandbox_binds_only_the_etc_entries_a_process_reads_at_run_time() -> None:
    argv, _ = host_view()
    etc = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--ro-bind-try" and argv[i + 1].startswith("/etc/")]
    for gone in ("/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ca-certificates", "/etc/resolv.conf"):
        assert gone not in etc  # a mount and a remount each, read by nothing at run time in a sandbox
    assert len(etc) <= 9
    import sys
    out = subprocess.run([*argv, *CONFINEMENT, "--", sys.executable, "-S", "-c", _NEEDS],
                         capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    import pwd
    assert out[0] == f"user {pwd.getpwuid(os.getuid()).pw_name} " + __import__("grp").getgrgid(os.getgid()).gr_name
    assert out[1:] == ["localhost 127.0.0.1", "ca True", "awk 42", "git 0", "tz True", "absent []"]
