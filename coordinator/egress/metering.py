"""Token and cost metering for the egress gate (pure decisions, no I/O).

Budgets are charged to the node (run_id, node_id), across all its attempts,
so neither a retry nor a duplicate attempt gets a fresh budget. A call is
reserved before it is forwarded and settled when it returns:

- the reservation bounds the call from above: its input by the request's
  size in bytes (a byte-level tokenizer never makes more tokens than
  bytes, and the JSON around each message is longer than the few tokens
  of chat framing), its output by the output cap the gate writes into the
  request (`max_completion_tokens` or the field the request used), which
  is what is left of the budget after the input bound;
- the settlement replaces the reservation by the provider's `usage`
  (prompt_tokens, completion_tokens), or keeps the whole reservation when
  the reply has no usable usage (`charge`): whatever its status, an error
  reply or a connection lost after the request went out included, since the
  gate cannot know what the provider billed. A call is never charged zero
  because the provider did not say.

Every `egress.reserved` and `model.call` event carries the node's account
after it (`account_after`: settled tokens, cost and calls, and the open
reservations), so reading the account is reading the node's latest such
event, in the same ledger transaction that writes the next one: two
attempts racing for the last tokens are serialized by the ledger's write
lock and the second sees the first's reservation. `fold_account` recomputes
the same account from all the events (an audit of the running one).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any, Iterable, Mapping

RESERVED_TOPIC = "egress.reserved"
CALL_TOPIC = "model.call"
REFUSED_TOPIC = "egress.refused"
ACCOUNT_TOPICS = (RESERVED_TOPIC, CALL_TOPIC)
OUTPUT_CAP_FIELDS = ("max_completion_tokens", "max_tokens")


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens; a cost in micro-dollars is then tokens x price."""

    input_usd_per_mtok: Decimal = Decimal(0)
    output_usd_per_mtok: Decimal = Decimal(0)

    @classmethod
    def parse(cls, doc: Mapping[str, Any] | None) -> "Price":
        doc = doc or {}
        return cls(Decimal(str(doc.get("input_usd_per_mtok", 0))), Decimal(str(doc.get("output_usd_per_mtok", 0))))

    def cost_micros(self, tokens_in: int, tokens_out: int) -> int:
        return int((self.input_usd_per_mtok * tokens_in + self.output_usd_per_mtok * tokens_out)
                   .to_integral_value(ROUND_CEILING))


@dataclass(frozen=True)
class Account:
    tokens: int = 0        # settled + open reservations
    cost_micros: int = 0
    calls: int = 0
    open_reservations: int = 0
    open: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # reservation id -> (tokens, cost)

    def snapshot(self) -> dict[str, Any]:
        """What an event records as `account_after`."""
        t_open = sum(t for t, _ in self.open.values())
        c_open = sum(c for _, c in self.open.values())
        return {"tokens_settled": self.tokens - t_open, "cost_micros_settled": self.cost_micros - c_open,
                "calls": self.calls, "open": {k: list(v) for k, v in sorted(self.open.items())}}

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any] | None) -> "Account":
        if not snap:
            return cls()
        op = {k: (int(v[0]), int(v[1])) for k, v in (snap.get("open") or {}).items()}
        return cls(int(snap["tokens_settled"]) + sum(t for t, _ in op.values()),
                   int(snap["cost_micros_settled"]) + sum(c for _, c in op.values()), int(snap["calls"]), len(op), op)

    def reserved(self, rid: str, tokens: int, cost: int) -> "Account":
        return Account(self.tokens + tokens, self.cost_micros + cost, self.calls, self.open_reservations + 1,
                       {**self.open, rid: (tokens, cost)})

    def settled(self, rid: str, tokens: int, cost: int) -> "Account":
        t, c = self.open.get(rid, (0, 0))
        op = {k: v for k, v in self.open.items() if k != rid}
        return Account(self.tokens - t + tokens, self.cost_micros - c + cost, self.calls + 1, len(op), op)


def fold_account(payloads: Iterable[Mapping[str, Any]]) -> Account:
    """The node's account from its egress.reserved and model.call payloads (a reservation has tokens_reserved)."""
    reserved: dict[str, tuple[int, int]] = {}
    tokens = cost = calls = 0
    for p in payloads:
        if "tokens_reserved" in p:
            reserved[p["reservation_id"]] = (int(p["tokens_reserved"]), int(p["cost_micros_reserved"]))
        else:
            reserved.pop(p.get("reservation_id"), None)
            tokens += int(p.get("tokens_in", 0)) + int(p.get("tokens_out", 0))
            cost += int(p.get("cost_micros", 0))
            calls += 1
    for t, c in reserved.values():
        tokens += t
        cost += c
    return Account(tokens, cost, calls, len(reserved), dict(reserved))


@dataclass(frozen=True)
class Reservation:
    tokens_in_bound: int
    output_cap: int
    tokens: int
    cost_micros: int


def reserve(*, account: Account, budgets: Mapping[str, Any], request_bytes: int, requested_cap: int | None,
            price: Price) -> Reservation | dict[str, Any]:
    """The reservation for one call, or the exhausted budget ({budget, limit, used, needed})."""
    in_bound = int(request_bytes)
    caps: list[int] = [] if requested_cap is None else [int(requested_cap)]
    if "max_tokens" in budgets:
        left = int(budgets["max_tokens"]) - account.tokens - in_bound
        if left < 1:
            return {"budget": "max_tokens", "limit": budgets["max_tokens"], "used": account.tokens,
                    "needed": in_bound + 1}
        caps.append(left)
    if "max_model_cost_micros" in budgets:
        left_cost = Decimal(int(budgets["max_model_cost_micros"]) - account.cost_micros) - \
            price.input_usd_per_mtok * in_bound
        by_cost = (left_cost / price.output_usd_per_mtok).to_integral_value(ROUND_FLOOR) \
            if price.output_usd_per_mtok > 0 else None
        if left_cost < 0 or (by_cost is not None and by_cost < 1):
            return {"budget": "max_model_cost_micros", "limit": budgets["max_model_cost_micros"],
                    "used": account.cost_micros, "needed": price.cost_micros(in_bound, 1)}
        if by_cost is not None:
            caps.append(int(by_cost))
    if not caps:
        raise ValueError("a model call needs a token budget or an output cap")  # grants from cards always have one
    cap = max(1, min(caps))
    return Reservation(in_bound, cap, in_bound + cap, price.cost_micros(in_bound, cap))


def charge(usage: tuple[int, int] | None, reservation: Reservation) -> tuple[int, int]:
    """(tokens_in, tokens_out) a settled call is charged: the reported usage, else the
    whole reservation (its input bound and the output cap the gate wrote)."""
    if usage is not None:
        return usage
    return reservation.tokens_in_bound, reservation.output_cap


def usage_of(reply: Any) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) from an OpenAI-compatible reply's `usage`, or None."""
    u = reply.get("usage") if isinstance(reply, Mapping) else None
    if not isinstance(u, Mapping):
        return None
    tin, tout = u.get("prompt_tokens"), u.get("completion_tokens")
    if not (isinstance(tin, int) and isinstance(tout, int)) or tin < 0 or tout < 0:
        return None
    return tin, tout


def requested_cap(body: Mapping[str, Any]) -> tuple[str, int | None]:
    """(field the request caps its output with, the value), defaulting to max_completion_tokens."""
    for f in OUTPUT_CAP_FIELDS:
        if isinstance(body.get(f), int):
            return f, int(body[f])
    return OUTPUT_CAP_FIELDS[0], None
