"""Grant issuance and verification (the I/O shell around registry/grant_scope
and registry/toolprofile).

Issuance: `issue_profile(...)` (coordinator/issuance.py, re-exported here)
derives the scope, binds it to run/wave/node attempt, signs it and records a
`grant.issued` event.

Verification: `GrantVerifier.verify(...)` runs the checks in CHECK_ORDER,
each failure its own GrantError code; it writes nothing. The signature
result is cached per token (the warm path); state checks (jti, revocation,
budget) run on every call.

`GrantVerifier.authorize(...)` is what a gateway uses for every tool call:

    with verifier.authorize(token, method=..., run_id=..., wave_id=..., audience=...,
                            args=args, idempotency_key=key) as call:
        call.tx.append(run_id, "patch.submitted", {...})   # the action, same transaction
        call.result = {...}

It verifies, re-checks revocation against the ledger inside the action's
transaction, spends the jti of a single-use grant on its first write (atomic
with the action: a rolled-back action spends nothing), and charges the call.
A rejected call leaves exactly one `grant.rejected` event and nothing else.

What counts as a call (budgets): every invocation that passes verification
is one call, charged `cost_units` of its method, whatever happens next: a
retry with the same idempotency key, a duplicate answered from the
idempotency cache and a call whose tool fails are all charged (a failed
tool's charge is committed in its own `grant.call` event after the action's
transaction rolls back). With `group_commit`, a read-only call's charge is
committed together with those of concurrent calls (coordinator/group_commit.py);
the call returns only once that commit is durable. A call rejected by any check, including an
exhausted budget, is not charged. Time: `max_wall_seconds` is coordinator
wall-clock (UTC epoch) time since the grant's first charged call.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator, Mapping

from ledger.protocols import GrantLedger
from registry.canonical import canonical_json, digest_bytes, digest_json
from registry.contracts import Method, Registry, UnknownMethod, default_registry
from registry.errors import DomeError
from registry.grant_errors import (
    GrantAdminMethodDenied, GrantBudgetExhausted, GrantError, GrantMalformed, GrantMethodNotGranted,
    GrantPayloadInvalid, GrantProofReplayed, GrantReplayed, GrantRevoked,
)
from registry.signing import Keyring, SigningKey
from registry import toolprofile as tp

from .group_commit import GroupCommitter
from .issuance import ISSUED_TOPIC, SignedGrant, _epoch, issue_profile, issued_payload  # noqa: F401 - re-exported

CALL_TOPIC = "grant.call"
REJECTED_TOPIC = "grant.rejected"
REVOKED_TOPIC = "grant.revoked"
EGRESS_METHOD = "egress"  # what a call proof names for a request through the egress gate
PROOF_SWEEP_AT = 100_000  # remembered call proofs past this many: the expired ones are dropped


_REQUIRED_CLAIMS = frozenset({"jti", "profile_id", "run_id", "wave_id", "audience", "budgets", "single_use"})


class _Verified:
    """What the cold path learns once per token (signature-dependent facts only)."""

    __slots__ = ("payload", "kid", "nbf", "exp", "allowed")

    def __init__(self, payload: Mapping[str, Any], kid: str, nbf: float, exp: float, allowed: frozenset[str]) -> None:
        self.payload, self.kid, self.nbf, self.exp, self.allowed = payload, kid, nbf, exp, allowed


@dataclass(frozen=True)
class VerifiedGrant:
    payload: Mapping[str, Any]
    profile_id: str
    jti: str
    kid: str
    method: Method
    token: str
    warm: bool
    proof_sig: bytes | None = None
    args_canonical: bytes | None = None  # canonical_json(args), when the proof check already made it

    @property
    def token_digest(self) -> str:
        return tp.token_digest(self.token)

    @property
    def single_use(self) -> bool:
        return bool(self.payload.get("single_use"))


@dataclass
class _Usage:
    calls_total: int = 0
    by_family: dict[str, int] = field(default_factory=dict)
    cost_units: int = 0
    first_call_at: float | None = None


@dataclass
class GatewayCall:
    """Handed to the body of `authorize`: the action's transaction and grant."""

    tx: Any
    grant: VerifiedGrant
    result: Any = None


class GrantVerifier:
    """Verifies grants for one coordinator. Thread-safe for authorize()."""

    def __init__(self, keyring: Keyring, ledger: GrantLedger, *, registry: Registry | None = None,
                 leeway_seconds: float = 30.0, cache_size: int = 8192, group_commit: bool = False) -> None:
        self.keyring = keyring
        self.ledger = ledger
        # read-only calls' charges: one transaction for all concurrent calls (coordinator/group_commit.py)
        self.group = GroupCommitter(ledger, name="dome-charges") if group_commit else None
        self.registry = registry or default_registry()
        self.leeway = min(max(float(leeway_seconds), 0.0), float(tp.MAX_LEEWAY_SECONDS))
        self._cache: dict[str, _Verified] = {}
        self._token_of: dict[str, str] = {}  # jti -> its cached token (dropped with the attempt's call key)
        self._cache_size = cache_size
        self._spent: set[str] = set()
        self._revoked_jti: set[str] = set()
        self._revoked_profiles: set[str] = set()
        self._usage: dict[str, _Usage] = {}
        self._proofs: dict[bytes, float] = {}
        self._call_keys: dict[str, bytes] = {}  # jti -> the attempt's call MAC key (tp.call_mac_key)
        self._runs_loaded: set[str] = set()
        self._followed: set[str] = set()  # runs whose every revocation this verifier observes
        self._lock = threading.RLock()
        self.stats = {"cold": 0, "warm": 0}

    # ---- the cold path: signature and payload type, cached per token ------
    def _cold(self, token: str, *, signed_here: bool = False) -> _Verified:
        """Checks 1-2 and the warm path's claims; `signed_here` (a token this process issued): no signature check."""
        ptype, body, kid, _ = tp.parse_token(token) if signed_here else (None, b"", None, b"")
        signed = tp.SignedEnvelope(payload_type=ptype, payload=body, kid=kid) if signed_here and kid in self.keyring \
            else tp.verify_token_signature(token, self.keyring)
        payload = tp.check_payload_type(signed)
        try:
            v = _Verified(payload, signed.kid, tp.epoch(payload["not_before"]), tp.epoch(payload["expires_at"]),
                          frozenset(payload["allowed_methods"]))
            if not _REQUIRED_CLAIMS <= payload.keys():
                raise KeyError(sorted(_REQUIRED_CLAIMS - payload.keys()))
        except (KeyError, TypeError, ValueError) as exc:
            raise GrantPayloadInvalid(f"grant payload lacks or garbles a required field: {exc}") from exc
        if len(self._cache) >= self._cache_size:
            self._token_of.pop(self._cache.pop(next(iter(self._cache))).payload.get("jti"), None)
        self._cache[token] = v
        self._token_of[payload["jti"]] = token
        return v

    def verify(self, token: str, *, method: str, run_id: str, wave_id: str, audience: str,
               now: float | datetime | None = None, worker_id: str | None = None, args: Any = None,
               idempotency_key: str | None = None, proof: str | None = None) -> VerifiedGrant:
        """Every check, in order; raises the first failing check's GrantError. Writes nothing."""
        t = _epoch(now)
        v, warm = self._token(token)
        p = v.payload
        self._check_audience_and_binding(p, audience=audience, run_id=run_id, wave_id=wave_id, worker_id=worker_id)
        proof_sig = args_canon = None
        if "cnf" in p:
            if tp.is_call_mac(proof):  # the warm form: one HMAC under the key registered at attempt start
                args_canon = canonical_json({} if args is None else args)
                proof_sig = tp.check_call_mac(p, proof, self._call_keys.get(p["jti"]), method=method,
                                              args_canonical=args_canon, idempotency_key=idempotency_key, now=t,
                                              leeway=self.leeway)
            else:
                proof_sig = tp.check_call_proof(p, proof, method=method, args={} if args is None else args,
                                                idempotency_key=idempotency_key, now=t, leeway=self.leeway)
            seen = self._proofs.get(proof_sig)
            if seen is not None and seen >= t:  # remembered until the last instant it could be fresh
                raise GrantProofReplayed("this call proof was already used", details={"method": method})
        self._check_time_and_state(v, t, run_id=run_id, ask_ledger=False)
        jti, profile_id = p["jti"], p["profile_id"]
        m = self._method(method)
        if m.is_admin:
            raise GrantAdminMethodDenied(f"{method!r} is an admin method: coordinator-only, never a worker's",
                                         details={"method": method})
        if method not in v.allowed:
            raise GrantMethodNotGranted(f"method {method!r} is not in this grant",
                                        details={"method": method, "allowed": sorted(v.allowed)})
        self._check_budget(p, m, t)
        return VerifiedGrant(payload=p, profile_id=profile_id, jti=jti, kid=v.kid, method=m,
                             token=token, warm=warm, proof_sig=proof_sig, args_canonical=args_canon)

    def bind_call_key(self, jti: str, worker_key: SigningKey, issued: SignedGrant | None = None) -> None:
        """At attempt start: the attempt's worker key (its public half is the grant's cnf)
        keys the grant's MAC call proofs from now on. Signed proofs stay accepted. `issued` (the
        grant this process's issuance returned, never an outside token): that exact token is
        entered verified, so its first call skips only the Ed25519 check (docs/security.md)."""
        with self._lock:
            self._call_keys[jti] = tp.call_mac_key(worker_key.seed)
            if issued is not None and issued.jti == jti and issued.token not in self._cache:
                with suppress(GrantError):  # not entered: its first call is verified cold, refused there
                    self._cold(issued.token, signed_here=True)

    def drop_call_key(self, jti: str) -> None:
        """When the attempt ends: no MAC proof for its grant verifies any more, and its token
        leaves the cache (a late call is verified cold): the cache holds attempts in flight."""
        with self._lock:
            self._call_keys.pop(jti, None)
            self._cache.pop(self._token_of.pop(jti, ""), None)

    def verify_listing(self, token: str, *, run_id: str, audience: str, now: float | datetime | None = None,
                       wave_id: str | None = None, worker_id: str | None = None) -> Mapping[str, Any]:
        """Checks 1-7 for a call that names no method (MCP `tools/list`): signature,
        payload type, audience, run (and wave/worker when given) binding, time, jti
        and revocation, the latter also against the ledger. Returns the payload."""
        t = _epoch(now)
        v, _ = self._token(token)
        p = v.payload
        self._check_audience_and_binding(p, audience=audience, run_id=run_id,
                                         wave_id=p["wave_id"] if wave_id is None else wave_id,
                                         worker_id=p.get("worker_id") if worker_id is None else worker_id)
        self._check_time_and_state(v, t, run_id=run_id, ask_ledger=True)
        return p

    # ---- the checks every verification makes, written once ------------------------
    def _token(self, token: Any) -> tuple[_Verified, bool]:
        """Checks 1-2 (signature, payload type), from the cache when this token passed them
        before under a key still in the keyring. Returns the claims and whether it was cached."""
        v = self._cache.get(token) if isinstance(token, str) else None
        if v is not None and v.kid in self.keyring:
            self.stats["warm"] += 1
            return v, True
        if not isinstance(token, str):
            raise GrantMalformed("a grant token is a string")
        self.stats["cold"] += 1
        return self._cold(token), False

    @staticmethod
    def _check_audience_and_binding(p: Mapping[str, Any], *, audience: str, run_id: str, wave_id: str | None,
                                    worker_id: str | None) -> None:
        """Checks 3-4: the grant is for this audience and bound to this run (wave, worker)."""
        tp.check_audience(p, audience)
        tp.check_binding(p, run_id=run_id, wave_id=wave_id, worker_id=worker_id)

    def _check_time_and_state(self, v: _Verified, t: float, *, run_id: str, ask_ledger: bool) -> None:
        """Checks 5-7: inside its validity window (with the leeway), not spent by a write, not
        revoked. Revocations this verifier has seen are in memory; `ask_ledger` also asks the
        ledger for a run this verifier does not follow (a listing outside the run loop)."""
        p = v.payload
        if t + self.leeway < v.nbf or t - self.leeway >= v.exp:
            tp.check_time(p, t, self.leeway)
        self._ensure_run(run_id)
        jti, profile_id = p["jti"], p["profile_id"]
        if jti in self._spent:
            raise GrantReplayed("this single-use grant was already spent by a write", details={"jti": jti},
                                hints=["each node attempt gets a fresh grant"])
        if (jti in self._revoked_jti or profile_id in self._revoked_profiles
                or (ask_ledger and self.ledger is not None and run_id not in self._followed
                    and self.ledger.is_revoked(jti, profile_id))):
            raise GrantRevoked("grant was revoked", details={"jti": jti, "profile_id": profile_id})

    def verify_egress(self, token: str, *, run_id: str, audience: str, proof: str | None,
                      request: Mapping[str, Any], now: float | datetime | None = None) -> Mapping[str, Any]:
        """The egress gate's check of one outbound request: every listing check
        (signature, payload type, audience, run binding, time, spent jti,
        revocation), then, for a sender-constrained grant, the call proof over
        EGRESS_METHOD and `request` ({host, path, body_digest}), single use.
        Returns the payload; which hosts and models it allows is the gate's
        decision. A rejection raises the GrantError and is recorded like a
        gateway call's."""
        t = _epoch(now)
        try:
            p = self.verify_listing(token, run_id=run_id, audience=audience, now=t)
            if "cnf" in p and tp.is_call_mac(proof):
                sig = tp.check_call_mac(p, proof, self._call_keys.get(p["jti"]), method=EGRESS_METHOD,
                                        args_canonical=canonical_json(dict(request)), idempotency_key=None, now=t,
                                        leeway=self.leeway)
            else:
                sig = tp.check_call_proof(p, proof, method=EGRESS_METHOD, args=dict(request),
                                          idempotency_key=None, now=t, leeway=self.leeway)
            if sig is not None:
                with self._lock:
                    seen = self._proofs.get(sig)
                    if seen is not None and seen >= t:
                        raise GrantProofReplayed("this call proof was already used", details={"method": EGRESS_METHOD})
                    self._proofs[sig] = t + 2 * tp.MAX_LEEWAY_SECONDS
        except GrantError as err:
            self.record_rejection(err, run_id=run_id, method=EGRESS_METHOD, token=token)
            raise
        return p

    def _method(self, name: str) -> Method:
        try:
            return self.registry.method(name)
        except UnknownMethod:
            raise GrantMethodNotGranted(f"unknown method {name!r}", details={"method": name}) from None

    def _check_budget(self, p: Mapping[str, Any], m: Method, t: float) -> None:
        b = p["budgets"]
        u = self._usage.get(p["profile_id"])
        calls, fam_calls, cost = (u.calls_total, u.by_family.get(m.family, 0), u.cost_units) if u else (0, 0, 0)
        fam_limit = (b.get("max_calls_by_family") or {}).get(m.family)
        over = None
        if "max_calls" in b and calls + 1 > b["max_calls"]:
            over = ("max_calls", b["max_calls"], calls)
        elif fam_limit is not None and fam_calls + 1 > fam_limit:
            over = (f"max_calls_by_family.{m.family}", fam_limit, fam_calls)
        elif "max_cost" in b and cost + m.cost_units > b["max_cost"]:
            over = ("max_cost", b["max_cost"], cost)
        elif "max_wall_seconds" in b and u and u.first_call_at is not None and t - u.first_call_at > b["max_wall_seconds"]:
            over = ("max_wall_seconds", b["max_wall_seconds"], round(t - u.first_call_at, 3))
        if over:
            raise GrantBudgetExhausted(f"budget {over[0]} exhausted ({over[2]} used of {over[1]})", details={
                "budget": over[0], "limit": over[1], "used": over[2], "profile_id": p["profile_id"]})

    # ---- state: loaded lazily per run from the ledger, kept current in memory ----
    def _ensure_run(self, run_id: str) -> None:
        if run_id in self._runs_loaded or self.ledger is None:
            return
        with self._lock:
            if run_id in self._runs_loaded:
                return
            for ev in self.ledger.events(run_id):
                self._apply_event(ev.topic, ev.payload, _event_ts(ev))
            self._runs_loaded.add(run_id)

    def _apply_event(self, topic: str, payload: Mapping[str, Any], ts: float) -> None:
        if topic == CALL_TOPIC:
            self._charge(payload["profile_id"], payload["family"], int(payload.get("cost_units", 0)),
                         float(payload.get("at", ts)), +1)
            if payload.get("spent_jti"):
                self._spent.add(payload["jti"])
        elif topic == REVOKED_TOPIC:
            if payload.get("jti"):
                self._revoked_jti.add(payload["jti"])
            if payload.get("profile_id"):
                self._revoked_profiles.add(payload["profile_id"])

    def _charge(self, profile_id: str, family: str, cost: int, at: float, sign: int) -> None:
        u = self._usage.setdefault(profile_id, _Usage())
        u.calls_total += sign
        u.by_family[family] = u.by_family.get(family, 0) + sign
        u.cost_units += sign * cost
        if sign > 0 and u.first_call_at is None:
            u.first_call_at = at
        if u.calls_total <= 0:
            u.first_call_at = None

    def follow_run(self, run_id: str) -> None:
        """Every record of `run_id` will reach `observe` as it is stored (the run loop's single,
        lease-holding writer): the in-memory revocations are then the ledger's, and a listing
        needs no revocation query."""
        self._ensure_run(run_id)
        with self._lock:
            self._followed.add(run_id)

    def observe(self, record: Any) -> None:
        """A stored record of a followed run: a revocation takes effect here, before the writer returns."""
        if getattr(record, "topic", None) == REVOKED_TOPIC:
            with self._lock:
                self._apply_event(REVOKED_TOPIC, record.payload, 0.0)

    def revoke(self, *, run_id: str, jti: str | None = None, profile_id: str | None = None,
               reason: str = "revoked by coordinator") -> None:
        """Revoke before expiry: a ledger event; effective on the next call."""
        if not jti and not profile_id:
            raise DomeError("revoke needs a jti or a profile_id", code="GRANT_REVOKE_INVALID")
        self.ledger.revoke(jti=jti, profile_id=profile_id, run_id=run_id, reason=reason)
        with self._lock:
            if jti:
                self._revoked_jti.add(jti)
            if profile_id:
                self._revoked_profiles.add(profile_id)

    def usage(self, profile_id: str) -> dict[str, Any]:
        u = self._usage.get(profile_id) or _Usage()
        return {"calls_total": u.calls_total, "by_family": dict(u.by_family), "cost_units": u.cost_units,
                "first_call_at": u.first_call_at}

    # ---- the gateway path -----------------------------------------------------
    def _charge_payload(self, g: VerifiedGrant, t: float, *, spent: bool, outcome: str,
                        idempotency_key: str | None, args: Any) -> dict[str, Any]:
        return {"profile_id": g.profile_id, "jti": g.jti, "method": g.method.name, "family": g.method.family,
                "cost_units": g.method.cost_units, "at": round(t, 6), "spent_jti": spent, "outcome": outcome,
                "idempotency_key": idempotency_key,
                "args_digest": digest_bytes(g.args_canonical) if g.args_canonical is not None
                else digest_json({} if args is None else args)}

    def record_rejection(self, err: GrantError, *, run_id: str, method: str, token: Any,
                         wave_id: str | None = None, node_execution_id: str | None = None) -> None:
        """The one ledger trace of a rejected call."""
        cached = self._cache.get(token) if isinstance(token, str) else None
        payload = {"code": err.code, "check": err.check, "message": err.message, "method": method,
                   "token_digest": tp.token_digest(token) if isinstance(token, str) else None,
                   "profile_id": cached.payload.get("profile_id") if cached else None,
                   "jti": cached.payload.get("jti") if cached else None}
        self.ledger.append(run_id, REJECTED_TOPIC, payload, wave_id=wave_id, node_execution_id=node_execution_id)

    def _grouped_call(self, g: Any, t: float, *, run_id: str, wave_id: str, nex: Any, method: str,
                      token: str, idempotency_key: str | None, args: Any, record_rejections: bool) -> Iterator[Any]:
        """The body of `authorize` for a read-only call (already verified and charged in
        memory): its action runs outside any transaction (it writes nothing); its charge, after a
        revocation check against the ledger, joins the verifier's next group commit, and the call
        returns, so it is answered, only once that commit is durable."""

        def charge(outcome: str, check_revoked: bool) -> None:
            payload = self._charge_payload(g, t, spent=False, outcome=outcome, idempotency_key=idempotency_key,
                                           args=args)

            def write(tx: Any) -> Any:
                if check_revoked and (getattr(tx, "is_revoked", None) or self.ledger.is_revoked)(g.jti, g.profile_id):
                    raise GrantRevoked("grant was revoked", details={"jti": g.jti, "profile_id": g.profile_id})
                return tx.append(run_id, CALL_TOPIC, payload, wave_id=wave_id, node_execution_id=nex)
            self.group.submit(write)

        try:
            yield GatewayCall(tx=None, grant=g)
        except BaseException:
            charge("failed", False)  # the action failed: the call is still charged, as with a transaction
            raise
        try:
            charge("ok", True)
        except GrantRevoked as err:
            self._refund(g, t, err)
            if record_rejections:
                self.record_rejection(err, run_id=run_id, method=method, token=token, wave_id=wave_id)
            raise

    @contextmanager
    def authorize(self, token: str, *, method: str, run_id: str, wave_id: str, audience: str,
                  now: float | datetime | None = None, worker_id: str | None = None, args: Any = None,
                  idempotency_key: str | None = None, proof: str | None = None,
                  record_rejections: bool = True) -> Iterator[GatewayCall]:
        t = _epoch(now)
        with self._lock:  # verify + charge are one step, so concurrent calls cannot overdraw a budget
            try:
                g = self.verify(token, method=method, run_id=run_id, wave_id=wave_id, audience=audience,
                                now=t, worker_id=worker_id, args=args, idempotency_key=idempotency_key,
                                proof=proof)
            except GrantError as err:
                if record_rejections:
                    self.record_rejection(err, run_id=run_id, method=method, token=token, wave_id=wave_id)
                raise
            self._charge(g.profile_id, g.method.family, g.method.cost_units, t, +1)
            if g.proof_sig is not None:
                self._proofs[g.proof_sig] = t + 2 * tp.MAX_LEEWAY_SECONDS
        spend = g.single_use and g.method.spends_single_use
        nex = g.payload.get("node_execution_id")
        if self.group is not None and not g.method.is_write and not spend:
            yield from self._grouped_call(g, t, run_id=run_id, wave_id=wave_id, nex=nex, method=method,
                                          token=token, idempotency_key=idempotency_key, args=args,
                                          record_rejections=record_rejections)
            return
        try:
            with self.ledger.transaction() as tx:
                try:
                    is_revoked = getattr(tx, "is_revoked", None) or self.ledger.is_revoked
                    if is_revoked(g.jti, g.profile_id):
                        raise GrantRevoked("grant was revoked", details={"jti": g.jti, "profile_id": g.profile_id})
                    if spend:
                        try:
                            tx.spend_jti(g.jti, run_id, g.profile_id)
                        except GrantReplayed as exc:
                            raise GrantReplayed("this single-use grant was already spent by a write",
                                                details={"jti": g.jti}) from exc
                except GrantError as err:
                    raise _Rejected(err) from err
                record = getattr(tx, "defer", None) or tx.append  # deferred: stored with the tool's first event
                record(run_id, CALL_TOPIC, self._charge_payload(g, t, spent=spend, outcome="ok", args=args,
                                                                idempotency_key=idempotency_key),
                       wave_id=wave_id, node_execution_id=nex)
                yield GatewayCall(tx=tx, grant=g)
        except _Rejected as rej:
            self._refund(g, t, rej.err)
            if record_rejections:
                self.record_rejection(rej.err, run_id=run_id, method=method, token=token, wave_id=wave_id)
            raise rej.err from None
        except BaseException:
            # the action failed and its transaction rolled back: nothing spent, the call still charged
            self.ledger.append(run_id, CALL_TOPIC, self._charge_payload(
                g, t, spent=False, outcome="failed", idempotency_key=idempotency_key, args=args),
                wave_id=wave_id, node_execution_id=nex)
            raise
        if spend:
            with self._lock:
                self._spent.add(g.jti)
        if len(self._proofs) > PROOF_SWEEP_AT:
            with self._lock:
                self._proofs = {s: e for s, e in self._proofs.items() if e >= t}

    def _refund(self, g: VerifiedGrant, t: float, err: GrantError) -> None:
        """A call refused after it was charged in memory (revoked, replayed): not charged after all."""
        with self._lock:
            self._charge(g.profile_id, g.method.family, g.method.cost_units, t, -1)
            if isinstance(err, GrantRevoked):
                self._revoked_jti.add(g.jti)
            elif isinstance(err, GrantReplayed):
                self._spent.add(g.jti)

    def close(self) -> None:
        """Stop the group committer (after committing what is queued)."""
        if self.group is not None:
            self.group.close()


class _Rejected(Exception):
    def __init__(self, err: GrantError) -> None:
        super().__init__(err.code)
        self.err = err


def _event_ts(ev: Any) -> float:
    ts = getattr(ev, "ts", None)
    if isinstance(ts, (int, float)):
        return float(ts)
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() if isinstance(ts, str) else 0.0
    except ValueError:
        return 0.0
