"""Size limits of what a worker can hand the coordinator: one set of numbers.

A proposal's diff travels as an artifact (put_artifact, base64 inside one
JSON-RPC request), so the numbers depend on each other and live together:

- a binary file in a diff: at most MAX_BINARY_BYTES once inflated;
- a whole diff (added text + binary sizes, or its canonical bytes): at most
  MAX_DIFF_BYTES;
- one artifact: at most MAX_ARTIFACT_BYTES (a diff is an artifact, so this is
  never below MAX_DIFF_BYTES);
- one HTTP request to the gateway: the base64 form of the largest artifact
  plus REQUEST_ENVELOPE_BYTES for the JSON-RPC envelope around it. A larger
  body is answered 413 before it is parsed.
"""
from __future__ import annotations

MIB = 1024 * 1024
MAX_BINARY_BYTES = 8 * MIB
MAX_DIFF_BYTES = 32 * MIB
MAX_ARTIFACT_BYTES = 32 * MIB
REQUEST_ENVELOPE_BYTES = 64 * 1024


def base64_size(n: int) -> int:
    """Length of the padded base64 encoding of n bytes."""
    return 4 * ((n + 2) // 3)


MAX_REQUEST_BYTES = base64_size(MAX_ARTIFACT_BYTES) + REQUEST_ENVELOPE_BYTES

assert MAX_BINARY_BYTES <= MAX_DIFF_BYTES <= MAX_ARTIFACT_BYTES
