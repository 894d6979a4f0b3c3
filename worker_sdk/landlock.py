"""Landlock (Linux >= 5.13) as the second sandbox layer, by raw syscalls.

`restrict(writable=[...])` binds the calling thread and everything it starts
from then on (the command intent calls it on a short-lived thread that then
starts the worker's action): they may read and execute anywhere the outer
sandbox shows them, write only beneath `writable`, and (Landlock ABI >= 4)
neither bind nor connect TCP sockets. Landlock cannot be lifted by the process itself.

Where the kernel has no Landlock, `available()` is 0 and `restrict` is a
no-op returning 0; the bubblewrap layer still holds.
"""
from __future__ import annotations

import ctypes
import os
import struct
from typing import Iterable

_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # same numbers on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 16, 32, 64, 128
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 256, 512, 1024, 2048, 4096
REFER, TRUNCATE, IOCTL_DEV = 8192, 16384, 32768
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class LandlockError(OSError):
    pass


def available() -> int:
    """The kernel's Landlock ABI version, 0 when unsupported."""
    abi = _libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(abi), 0)


def _fs_mask(abi: int) -> int:
    mask = (EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR
            | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM)
    if abi >= 2:
        mask |= REFER
    if abi >= 3:
        mask |= TRUNCATE
    if abi >= 5:
        mask |= IOCTL_DEV
    return mask


def restrict(writable: Iterable[str], readable: Iterable[str] = ("/",), connect_ports: Iterable[int] = ()) -> int:
    """Apply the ruleset to the calling process; returns the ABI used (0: none).
    `connect_ports`: TCP ports the process may still connect to (ABI 4+; in a
    sandbox whose network namespace has only loopback, that is a local listener)."""
    abi = available()
    if abi <= 0:
        return 0
    handled_fs = _fs_mask(abi)
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    attr = struct.pack("=QQ", handled_fs, handled_net) if abi >= 4 else struct.pack("=Q", handled_fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(_SYS_CREATE, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        raise LandlockError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        read_access = EXECUTE | READ_FILE | READ_DIR
        write_access = handled_fs
        for path, access in [*((p, read_access) for p in readable), *((p, write_access) for p in writable)]:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                if not os.path.isdir(path):
                    access &= EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
                rule = struct.pack("=Qi", access & handled_fs, pfd)
                rbuf = ctypes.create_string_buffer(rule, len(rule))
                if _libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH),
                                 rbuf, ctypes.c_uint32(0)) < 0:
                    raise LandlockError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(pfd)
        for port in connect_ports if handled_net else ():
            rule = struct.pack("=QQ", NET_CONNECT_TCP, int(port))
            rbuf = ctypes.create_string_buffer(rule, len(rule))
            if _libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_NET_PORT), rbuf, ctypes.c_uint32(0)) < 0:
                raise LandlockError(ctypes.get_errno(), f"landlock_add_rule failed for port {port}")
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LandlockError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS) failed")
        if _libc.syscall(_SYS_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) < 0:
            raise LandlockError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(fd)
    return abi
