"""The finish stage's and the export's CPU per task, beside the generic code paths.

    python benchmarks/export_finish.py [--n 200] [--repeat 3] [--json]

Runs the scale curve's run (N one-file tasks on a 200-file repository, SQLite,
no sandbox) in this process and reports the run loop thread's CPU per task in
the finish stage (stacking, validation, gate, promotion, export) and in the
export alone. Then, on that run's ledger and in the same process, each piece
this stage makes cheaper is timed both ways (best of --repeat, CPU ms per task):

- export: `write_run_files` into a fresh folder as it is, and with the generic
  renderers swapped in (every event file's record encoded again by json.dumps,
  indented task files by the stdlib's pure-Python encoder, records parsed after
  a search for long digit runs); the files written are compared byte for byte;
- event files alone: `render` (payload copied from the record bytes) against
  `render_generic`;
- signature checks of the gate: `verify_artifact` over the run's integration
  records, answered from the signatures this process made, against verifying
  every one on the curve (as `dome verify` in another process does);
- the gateway's diff check: parse once, digest the canonical form, against
  canonicalize then describe (two parses, two serializations, fingerprints);
- protected paths: one compiled match per path against one fnmatch per glob;
- the integration stage's records (the run's per-proposal verdicts, checkpoints and
  apply results, emitted again into a fresh ledger): each artifact encoded once for
  its signature and its record, the held records written as one batch, against
  encoding the signed body, the artifact (size check) and the record's payload
  separately and appending the held records one by one.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # before benchmarks/, whose registry.py would shadow the package


def _thread_cpu() -> float:
    return time.thread_time()


def run_once(n: int, root: Path) -> tuple[dict, object, str, object]:
    """The scale curve's run; returns (figures, ledger, run id, graph)."""
    from benchmarks.scale_curve import make_repo, write_queue

    from coordinator.keys import load_keyring, load_or_create_signing_key
    from coordinator.runloop import loop as L
    from coordinator.runloop.finish import integration_finish
    from ledger import Ledger

    repo = make_repo(root)
    queue = write_queue(root, repo, n, 4)
    ops = root / "ops"
    ops.mkdir()
    ledger = Ledger.open(None, ops)
    ctx = L.RunContext(ledger=ledger, ops_root=ops, signer=load_or_create_signing_key(ops),
                       keyring=load_keyring(ops), sandbox="none", finish=integration_finish)
    spent = {"finish": 0.0, "export": 0.0}

    def timed(name: str, fn):
        def wrapper(self, *a, **k):
            if threading.current_thread() is not threading.main_thread():
                return fn(self, *a, **k)
            c0 = _thread_cpu()
            try:
                return fn(self, *a, **k)
            finally:
                spent[name] += _thread_cpu() - c0
        return wrapper

    finish, export = L.RunLoop._finish, L.RunLoop._export
    L.RunLoop._finish, L.RunLoop._export = timed("finish", finish), timed("export", export)
    try:
        loop = L.RunLoop.start(queue, ctx)
        out = loop.run()
    finally:
        L.RunLoop._finish, L.RunLoop._export = finish, export
    figures = {"status": out.status, "finish_cpu_ms_per_task": round(1000 * spent["finish"] / n, 3),
               "export_cpu_ms_per_task": round(1000 * spent["export"] / n, 3)}
    return figures, ledger, out.run_id, loop.graph


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        c0 = time.process_time()
        fn()
        times.append(time.process_time() - c0)
    return min(times)


def _old_loads(data):
    """The record parser before: a search for 16-digit runs picks the decoder."""
    from ledger.record import _BIG_INT_DECODER
    text = data if type(data) is str else data.decode("utf-8")
    if re.search(r"[0-9]{16}", text) is None:
        return json.loads(text)
    return _BIG_INT_DECODER.decode(text)


def export_both_ways(ledger, run_id: str, graph, n: int, repeat: int, scratch: Path) -> dict:
    import coordinator.runloop.export as rexp
    import ledger.export as lexp
    import ledger.store as store

    def write(dest: Path) -> None:
        shutil.rmtree(dest, ignore_errors=True)
        rexp.write_run_files(ledger, run_id, dest, graph)

    new_s = best(lambda: write(scratch / "new"), repeat)
    saved = (lexp.render, rexp.render_json, store.loads_record)
    lexp.render = lexp.render_generic
    rexp.render_json = lambda obj: (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")
    store.loads_record = _old_loads
    try:
        old_s = best(lambda: write(scratch / "old"), repeat)
    finally:
        lexp.render, rexp.render_json, store.loads_record = saved
    same = _same_tree(scratch / "new", scratch / "old")
    return {"export_ms_per_task": round(1000 * new_s / n, 3), "export_generic_ms_per_task": round(1000 * old_s / n, 3),
            "export_files_identical": same}


def _same_tree(a: Path, b: Path) -> bool:
    fa = {p.relative_to(a): p.read_bytes() for p in a.rglob("*") if p.is_file()}
    fb = {p.relative_to(b): p.read_bytes() for p in b.rglob("*") if p.is_file()}
    return bool(fa) and fa == fb


def render_both_ways(ledger, run_id: str, n: int, repeat: int) -> dict:
    from ledger.export import render, render_generic
    recs = ledger.events(run_id)
    assert all(render(r) == render_generic(r) for r in recs)
    return {"event_render_ms_per_task": round(1000 * best(lambda: [render(r) for r in recs], repeat) / n, 3),
            "event_render_generic_ms_per_task": round(
                1000 * best(lambda: [render_generic(r) for r in recs], repeat) / n, 3)}


def signatures_both_ways(ledger, run_id: str, keyring, n: int, repeat: int) -> dict:
    from coordinator.integration import evidence
    from coordinator.integration.recorder import records_of
    arts = [r.artifact for r in records_of(ledger, run_id, prefixes=("integration", "gate", "promotion"))
            if "signature" in r.artifact]
    memo = set(evidence._SIGNED_HERE._made)
    own = best(lambda: [evidence.verify_artifact(a, keyring) for a in arts], repeat)
    evidence._SIGNED_HERE._made.clear()
    try:
        full = best(lambda: [evidence.verify_artifact(a, keyring) for a in arts], repeat)
    finally:
        evidence._SIGNED_HERE._made.update(memo)
    return {"signed_artifacts": len(arts), "artifact_verify_ms_per_task": round(1000 * own / n, 3),
            "artifact_verify_full_ms_per_task": round(1000 * full / n, 3)}


def diff_check_both_ways(ledger, run_id: str, n: int, repeat: int) -> dict:
    from registry.diffs import canonicalize_diff, describe_diff, parse_diff, serialize_diff, sha_digest
    subs = [r.payload for r in ledger.events(run_id) if r.topic == "patch.submitted"]
    raws = [(ledger.blobs.get(p["diff_ref"]), p["proposal"]["base_ref"]) for p in subs]

    def new() -> None:
        for raw, _base in raws:
            parsed = parse_diff(raw)
            sha_digest(serialize_diff(parsed)), parsed.touched_files()

    def old() -> None:
        for raw, base in raws:
            describe_diff(canonicalize_diff(raw), base)

    return {"gateway_diff_check_ms_per_task": round(1000 * best(new, repeat) / n, 3),
            "gateway_diff_check_before_ms_per_task": round(1000 * best(old, repeat) / n, 3)}


def globs_both_ways(ledger, run_id: str, n: int, repeat: int) -> dict:
    from coordinator.integration.policy import IntegrationPolicy, globs_matcher, path_matches
    pol = IntegrationPolicy.load()
    paths = [f for r in ledger.events(run_id) if r.topic == "patch.submitted" for f in r.payload["touched_files"]]
    globs = tuple(pol.protected_paths)
    hit = globs_matcher(globs)
    assert [p for p in paths if hit(p)] == [p for p in paths if any(path_matches(p, g) for g in globs)]
    return {"protected_globs": len(globs),
            "protected_match_ms_per_task": round(1000 * best(lambda: [hit(p) for p in paths], repeat) / n, 4),
            "protected_match_per_glob_ms_per_task": round(
                1000 * best(lambda: [any(path_matches(p, g) for g in globs) for p in paths], repeat) / n, 4)}


def _old_emitter(base: type) -> type:
    """The Emitter's steps as they were: sign (one encoding), encode the artifact again
    for the size check, and let the ledger encode it a third time, record by record."""
    from coordinator.integration import recorder as R
    from coordinator.integration.evidence import PAYLOAD_TYPE, body_of
    from registry.canonical import CANONICALIZATION, canonical_json, digest_bytes
    from registry.signing import b64e

    def sign_artifact(artifact, key):
        body = body_of(artifact)
        raw = canonical_json(body)
        return {**body, "payload_digest": digest_bytes(raw), "canonicalization": CANONICALIZATION,
                "kid": key.kid, "signature": b64e(key.sign_pae(PAYLOAD_TYPE, raw))}

    class OldEmitter(base):
        def __call__(self, topic, artifact):
            self.count += 1
            a = dict(artifact)
            signed = sign_artifact(a, self.key)
            payload = signed
            blobs = R.blobs_of(self.ledger)
            if blobs is not None:
                payload = R.store_lists(signed, blobs.put) if topic in R.CHAINED_TOPICS else signed
                canonical_json(payload)
            self._held.append((topic, payload, None))
            return signed

        def flush(self):
            held, self._held = self._held, []
            with self.ledger.transaction() as tx:
                for topic, payload, _ in held:
                    tx.append(self.run_id, topic, payload, wave_id=self.wave_id, signer=self.key)
    return OldEmitter


def emitter_both_ways(ledger, run_id: str, key, n: int, repeat: int, scratch: Path) -> dict:
    from coordinator.integration.evidence import body_of
    from coordinator.integration.recorder import BUFFERED, Emitter, records_of
    from ledger import Ledger

    arts = [(r.topic, body_of(r.artifact)) for r in records_of(ledger, run_id, prefixes=("integration",))
            if r.topic in BUFFERED]
    contenders = {"now": Emitter, "before": _old_emitter(Emitter)}
    out: dict[str, float] = {}
    for name, cls in contenders.items():
        def go(cls=cls, name=name) -> None:
            dest = scratch / f"emit-{name}"
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            led = Ledger.open(None, dest)
            try:
                emit = cls(led, run_id, key, lambda: "2026-11-26T09:00:00Z")
                for k in range(0, len(arts), 256):
                    for topic, art in arts[k:k + 256]:
                        emit(topic, art)
                    emit.flush()
            finally:
                led.close()
        out[name] = best(go, repeat)
    return {"integration_records": len(arts),
            "emit_cpu_ms_per_task": round(1000 * out["now"] / n, 3),
            "emit_cpu_ms_per_task_before": round(1000 * out["before"] / n, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from coordinator.keys import load_keyring
    root = Path(tempfile.mkdtemp(prefix="dome-exportfinish-"))
    try:
        figures, ledger, run_id, graph = run_once(args.n, root)
        figures["n"] = args.n
        figures.update(export_both_ways(ledger, run_id, graph, args.n, args.repeat, root / "scratch"))
        figures.update(render_both_ways(ledger, run_id, args.n, args.repeat))
        figures.update(signatures_both_ways(ledger, run_id, load_keyring(root / "ops"), args.n, args.repeat))
        figures.update(diff_check_both_ways(ledger, run_id, args.n, args.repeat))
        figures.update(globs_both_ways(ledger, run_id, args.n, args.repeat))
        from coordinator.keys import load_or_create_signing_key
        figures.update(emitter_both_ways(ledger, run_id, load_or_create_signing_key(root / "ops"), args.n,
                                         args.repeat, root / "scratch"))
        ledger.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k:42s} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
