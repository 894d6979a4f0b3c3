"""dome's contracts layer: schemas, canonical JSON, digests and signatures.

Pure data and pure functions; imports nothing else of dome.
"""
from .canonical import CANONICALIZATION, canonical_json, digest_bytes, digest_json
from .errors import DomeError, ErrorObject, SchemaValidationError, SignatureError
from .sealing import check_seal, seal
from .signing import Keyring, PublicKey, SigningKey, dsse_sign, dsse_sign_json, dsse_verify, pae

__all__ = [
    "CANONICALIZATION", "canonical_json", "digest_bytes", "digest_json",
    "DomeError", "ErrorObject", "SchemaValidationError", "SignatureError",
    "Keyring", "PublicKey", "SigningKey", "dsse_sign", "dsse_sign_json", "dsse_verify", "pae",
    "check_seal", "seal",
]
