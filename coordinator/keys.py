"""The coordinator's signing key and the keyring of known public keys.

Layout under OPS_ROOT/keys/ (directory mode 0700):

    coordinator.ed25519   the 32-byte Ed25519 seed, hex, mode 0600
    coordinator.pub       its public key: one line "<kid> <base64 raw key>"
    <anything>.pub        further trusted public keys (rotated-out coordinator
                          keys, a second coordinator), same one-line format

The private key is created on first use and never leaves this directory; it
must never be bound into a worker sandbox. Loading refuses a key file that
is readable by group or others (someone widened it: treat it as leaked).
"""
from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

from registry.errors import DomeError
from registry.signing import Keyring, PublicKey, SigningKey

KEY_DIR = "keys"
KEY_FILE = "coordinator.ed25519"
PUB_FILE = "coordinator.pub"


class KeyError_(DomeError):
    code = "KEY_ERROR"


class KeyPermissionsTooOpen(KeyError_):
    code = "KEY_PERMISSIONS_TOO_OPEN"


class KeyFileInvalid(KeyError_):
    code = "KEY_FILE_INVALID"


def key_dir(ops_root: Path | str) -> Path:
    return Path(ops_root) / KEY_DIR


def _public_line(key: PublicKey) -> str:
    return f"{key.kid} {base64.b64encode(key.raw).decode('ascii')}\n"


def parse_public_line(text: str, *, source: str = "<text>") -> PublicKey:
    """Parse "<kid> <base64 raw key>"; the kid must match the key."""
    parts = text.split()
    if len(parts) != 2:
        raise KeyFileInvalid(f"{source}: expected '<kid> <base64 key>'", details={"path": source})
    kid, b64 = parts
    try:
        raw = base64.b64decode(b64, validate=True)
    except ValueError as exc:
        raise KeyFileInvalid(f"{source}: public key is not base64", details={"path": source}) from exc
    if len(raw) != 32:
        raise KeyFileInvalid(f"{source}: an Ed25519 public key is 32 bytes", details={"path": source})
    key = PublicKey.from_raw(raw)
    if key.kid != kid:
        raise KeyFileInvalid(f"{source}: kid {kid!r} does not match the key ({key.kid})",
                             details={"path": source, "kid": kid, "computed": key.kid})
    return key


def _check_private_mode(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyPermissionsTooOpen(
            f"{path} has mode {mode:04o}; a signing key must be 0600",
            details={"path": str(path), "mode": f"{mode:04o}"},
            hints=[f"chmod 600 {path} (and rotate the key if others could read it)"])


def load_or_create_signing_key(ops_root: Path | str) -> SigningKey:
    """The coordinator's Ed25519 key, created (0600, dir 0700) on first use."""
    d = key_dir(ops_root)
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(d, 0o700)
    path = d / KEY_FILE
    if not path.exists():
        key = SigningKey.generate()
        tmp = d / f".{KEY_FILE}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, key.seed.hex().encode("ascii") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic, and never overwrites a key another process made
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    _check_private_mode(path)
    try:
        seed = bytes.fromhex(path.read_text().strip())
        key = SigningKey(seed)
    except ValueError as exc:
        raise KeyFileInvalid(f"{path}: not a hex Ed25519 seed", details={"path": str(path)}) from exc
    pub = d / PUB_FILE
    line = _public_line(key.public)
    if not pub.exists() or pub.read_text() != line:
        tmp = d / f".{PUB_FILE}.{os.getpid()}.tmp"
        tmp.write_text(line)
        os.chmod(tmp, 0o644)
        os.replace(tmp, pub)
    return key


def load_keyring(ops_root: Path | str) -> Keyring:
    """Every public key in OPS_ROOT/keys/*.pub (an empty keyring if none)."""
    ring = Keyring()
    d = key_dir(ops_root)
    if not d.is_dir():
        return ring
    for path in sorted(d.glob("*.pub")):
        ring.add(parse_public_line(path.read_text(), source=str(path)))
    return ring
