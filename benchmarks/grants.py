"""Grant issuance and verification throughput beside raw PyNaCl Ed25519.

    python benchmarks/grants.py [--n 2000] [--json]

Rows (all in one process, same payload sizes):
  raw sign / raw verify     nacl sign / verify of the PAE of a real ToolProfile payload
  issue                     issue_profile: scope derivation + payload + schema check + sign (no ledger)
  sigcheck cold             the cold signature check alone: token decode + Ed25519 over the PAE
  verify cold               first verification of a token: decode, signature, parse, every check
  verify warm               the same token again: cached signature result, every state check
  authorize (ledger)        the full gateway path: verify + revocation re-check + charge event
                            in a real ledger transaction (SQLite when ledger/ has landed)
  proof make                the signed per-call proof (args digest + Ed25519 sign + encode)
  verify warm cnf           verify warm of a sender-constrained (cnf) grant with the signed proof
  mac make                  the keyed-MAC per-call proof the worker client sends (args digest + HMAC)
  verify warm mac           verify warm of a sender-constrained grant with the MAC proof: the kind
                            of grant and proof every run issues and uses
  authorize cnf (ledger)    authorize with a fresh signed proof per call
  authorize mac (ledger)    authorize with a fresh MAC proof per call (what every run-loop call pays)
Targets: warm sender-bound (MAC) <= 20 us, judged on the median of paired runs
(each MAC verification timed next to an unbound one); cold <= 2x raw verify. The unbound
warm row is printed beside it, but runs never issue unbound grants. The cold/raw ratio is also
measured paired (each cold verification timed next to a raw verify, medians),
which is what the target is judged on: on a shared, loaded machine the
best-of-rounds rows drift independently.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nacl.signing  # noqa: E402

from coordinator.grants import GrantVerifier, issue_profile  # noqa: E402
from registry import toolprofile as tp  # noqa: E402
from registry.canonical import canonical_json  # noqa: E402
from registry.contracts import default_registry  # noqa: E402
from registry.signing import Keyring, SigningKey, pae  # noqa: E402

RUN, WAVE, AUD = "run-bench", "wave-1", "dome-gateway"


def _per_op(fn, n: int, repeats: int = 5) -> float:
    """Best-of-`repeats` mean seconds per call over n calls, with the cyclic GC
    paused as timeit does (every row alike)."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            fn(n)
            best = min(best, (time.perf_counter() - t0) / n)
        finally:
            gc.enable()
    return best


def _open_ledger(root: Path):
    from ledger import Ledger
    return Ledger.open(None, root), "sqlite (WAL, one durable transaction per call)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    n = a.n
    reg = default_registry()
    key = SigningKey.generate()
    ring = Keyring()
    ring.add(key.public)
    now = time.time()
    kw = dict(key=key, run_id=RUN, wave_id=WAVE, node_id="n1", required_capabilities=["read", "write"],
              registry=reg, now=now)
    sample = issue_profile(node_execution_id="n1.0", **kw)
    body = canonical_json(sample.payload)
    msg = pae(tp.PAYLOAD_TYPE, body)
    nk = nacl.signing.SigningKey(key.seed)
    vk = nk.verify_key
    sig = nk.sign(msg).signature

    def raw_sign(k: int) -> None:
        for _ in range(k):
            nk.sign(msg)

    def raw_verify(k: int) -> None:
        for _ in range(k):
            vk.verify(msg, sig)

    def issue(k: int) -> None:
        for i in range(k):
            issue_profile(node_execution_id=f"n1.{i}", **kw)

    tokens = [issue_profile(node_execution_id=f"c.{i}", **kw).token for i in range(n)]

    def cold(k: int) -> None:
        v = GrantVerifier(ring, None, registry=reg)
        for t in tokens[:k]:
            v.verify(t, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=now + 1)

    def cold_sig(k: int) -> None:
        for t in tokens[:k]:
            tp.verify_token_signature(t, ring)

    warm_v = GrantVerifier(ring, None, registry=reg)
    warm_v.verify(sample.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=now + 1)

    def warm(k: int) -> None:
        for _ in range(k):
            warm_v.verify(sample.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=now + 1)

    wkey = SigningKey.generate()
    cnf_g = issue_profile(node_execution_id="cnf.1", worker_public_key=wkey.public.raw, **kw)
    pargs = {"idempotency_key": "cnf.1:put_artifact:1", "node_execution_id": "cnf.1", "media_type": "text/plain",
             "content_b64": "aGVsbG8=", "expected_digest": "sha256:" + "0" * 64}

    def mk_proof(i: int = 0, a: dict = pargs, key_: str | None = "cnf.1:put_artifact:1", method: str = "put_artifact",
                 g=cnf_g) -> str:
        return tp.make_call_proof(wkey, jti=g.jti, method=method, args=a, idempotency_key=key_,
                                  ts=int(now + 1), nonce=f"{i:016x}")

    one_proof = mk_proof()
    cnf_v = GrantVerifier(ring, None, registry=reg)

    cnf_v.bind_call_key(cnf_g.jti, wkey)  # as the run loop does at attempt start
    mac_key = tp.call_mac_key(wkey.seed)

    def mk_mac(i: int = 0, a: dict = pargs, key_: str | None = "cnf.1:put_artifact:1", method: str = "put_artifact",
               g=cnf_g) -> str:
        return tp.make_call_mac(mac_key, jti=g.jti, method=method, args=a, idempotency_key=key_, ts=int(now + 1),
                                nonce=f"{i:016x}")

    one_mac = mk_mac()

    def mac_make(k: int) -> None:
        for i in range(k):
            mk_mac(i)

    def warm_mac(k: int) -> None:
        for _ in range(k):
            cnf_v.verify(cnf_g.token, method="put_artifact", run_id=RUN, wave_id=WAVE, audience=AUD, now=now + 1,
                         args=pargs, idempotency_key="cnf.1:put_artifact:1", proof=one_mac)

    def proof_make(k: int) -> None:
        for i in range(k):
            mk_proof(i)

    def warm_cnf(k: int) -> None:
        for _ in range(k):
            cnf_v.verify(cnf_g.token, method="put_artifact", run_id=RUN, wave_id=WAVE, audience=AUD, now=now + 1,
                         args=pargs, idempotency_key="cnf.1:put_artifact:1", proof=one_proof)

    # interleaved rounds: every row sees the same machine load; the best round counts
    fns = {"proof_make_us": (proof_make, n), "verify_warm_cnf_us": (warm_cnf, n),
           "mac_make_us": (mac_make, n * 5), "verify_warm_mac_us": (warm_mac, n * 5),
           "raw_sign_us": (raw_sign, n), "raw_verify_us": (raw_verify, n), "issue_us": (issue, max(n // 10, 20)),
           "sigcheck_cold_us": (cold_sig, n), "verify_cold_us": (cold, n), "verify_warm_us": (warm, n * 5)}
    rows: dict = {k: float("inf") for k in fns}
    for _ in range(a.rounds):
        for k, (fn, count) in fns.items():
            rows[k] = min(rows[k], _per_op(fn, count, repeats=1) * 1e6)
    # paired: each token's cold verification timed right after a raw verify of the same
    # size, so load drift on a shared machine hits both alike; medians of the pairs
    paired_raw, paired_cold = [], []
    pv = GrantVerifier(ring, None, registry=reg)
    pn = time.perf_counter_ns
    gc.disable()
    try:
        for _ in range(3):
            pv = GrantVerifier(ring, None, registry=reg)
            for t in tokens:
                t0 = pn()
                vk.verify(msg, sig)
                t1 = pn()
                pv.verify(t, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=now + 1)
                t2 = pn()
                paired_raw.append(t1 - t0)
                paired_cold.append(t2 - t1)
    finally:
        gc.enable()
    # paired warm: each sender-bound (MAC) verification timed next to an unbound one and a
    # signed-proof one, medians of the pairs (the target is judged on this median)
    pw_unbound, pw_mac, pw_signed = [], [], []
    gc.disable()
    try:
        for _ in range(3 * n):
            t0 = pn()
            warm_v.verify(sample.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD, now=now + 1)
            t1 = pn()
            cnf_v.verify(cnf_g.token, method="put_artifact", run_id=RUN, wave_id=WAVE, audience=AUD, now=now + 1,
                         args=pargs, idempotency_key="cnf.1:put_artifact:1", proof=one_mac)
            t2 = pn()
            pw_unbound.append(t1 - t0)
            pw_mac.append(t2 - t1)
        for _ in range(n // 2):
            t0 = pn()
            cnf_v.verify(cnf_g.token, method="put_artifact", run_id=RUN, wave_id=WAVE, audience=AUD, now=now + 1,
                         args=pargs, idempotency_key="cnf.1:put_artifact:1", proof=one_proof)
            pw_signed.append(pn() - t0)
    finally:
        gc.enable()
    rows["paired_warm_unbound_us"] = statistics.median(pw_unbound) / 1e3
    rows["paired_warm_mac_us"] = statistics.median(pw_mac) / 1e3
    rows["median_warm_signed_us"] = statistics.median(pw_signed) / 1e3
    rows["paired_raw_verify_us"] = statistics.median(paired_raw) / 1e3
    rows["paired_verify_cold_us"] = statistics.median(paired_cold) / 1e3
    with tempfile.TemporaryDirectory() as d:
        ledger, kind = _open_ledger(Path(d))
        big = issue_profile(node_execution_id="auth.1", **{**kw, "required_capabilities": ["read"]})
        gv = GrantVerifier(ring, ledger, registry=reg)
        m = min(n, 500)

        def authorize(k: int) -> None:
            for _ in range(k):
                with gv.authorize(big.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD,
                                  now=now + 1, args={"path": "a"}):
                    pass
        rows["authorize_ledger_us"] = _per_op(authorize, m, repeats=1) * 1e6
        big_cnf = issue_profile(node_execution_id="auth.2", worker_public_key=wkey.public.raw,
                                **{**kw, "required_capabilities": ["read"]})
        proofs = iter([mk_proof(i, {"path": "a"}, None, "read_file", big_cnf) for i in range(2 * m + 10)])

        def authorize_cnf(k: int) -> None:
            for _ in range(k):
                with gv.authorize(big_cnf.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD,
                                  now=now + 1, args={"path": "a"}, proof=next(proofs)):
                    pass
        rows["authorize_cnf_ledger_us"] = _per_op(authorize_cnf, m, repeats=1) * 1e6
        gv.bind_call_key(big_cnf.jti, wkey)
        macs = iter([mk_mac(i, {"path": "a"}, None, "read_file", big_cnf) for i in range(2 * m + 10)])

        def authorize_mac(k: int) -> None:
            for _ in range(k):
                with gv.authorize(big_cnf.token, method="read_file", run_id=RUN, wave_id=WAVE, audience=AUD,
                                  now=now + 1, args={"path": "a"}, proof=next(macs)):
                    pass
        rows["authorize_mac_ledger_us"] = _per_op(authorize_mac, m, repeats=1) * 1e6
    rows["ledger"] = kind
    rows["token_bytes"] = len(sample.token)
    rows["cold_over_raw_verify"] = rows["verify_cold_us"] / rows["raw_verify_us"]
    rows["sigcheck_over_raw_verify"] = rows["sigcheck_cold_us"] / rows["raw_verify_us"]
    rows["paired_cold_over_raw"] = rows["paired_verify_cold_us"] / rows["paired_raw_verify_us"]
    rows["mac_over_signed_warm"] = rows["verify_warm_mac_us"] / rows["verify_warm_cnf_us"]
    rows["targets"] = {"warm_le_20us": rows["paired_warm_mac_us"] <= 20.0,
                       "cold_le_2x_raw": rows["paired_cold_over_raw"] <= 2.0}
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        for k, v in rows.items():
            if k.endswith("_us"):
                print(f"{k[:-3]:>22}: {v:9.1f} us  ({1e6 / v:10.0f} /s)")
        print(f"{'sigcheck / raw verify':>22}: {rows['sigcheck_over_raw_verify']:.2f}x")
        print(f"{'paired cold / raw':>22}: {rows['paired_cold_over_raw']:.2f}x  (median of per-token pairs)")
        print(f"{'cold / raw verify':>22}: {rows['cold_over_raw_verify']:.2f}x   token {rows['token_bytes']} bytes, "
              f"ledger: {kind}")
        print(f"{'warm mac / signed':>22}: {rows['mac_over_signed_warm']:.2f}x  (sender-bound, same grant)")
        print(f"targets: warm sender-bound <= 20 us: {rows['targets']['warm_le_20us']}; cold <= 2x raw: {rows['targets']['cold_le_2x_raw']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
