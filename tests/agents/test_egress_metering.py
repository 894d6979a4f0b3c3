"""The egress gate's metering decisions (pure): the reservation at the budget's edge, to
the token and to the micro-dollar; the charge of a reply that reports no usage (never
zero); the account an event carries and its fold. Fast, for the mutation runner."""
from __future__ import annotations

from decimal import Decimal

import pytest

from coordinator.egress import metering as mt

FREE = mt.Price()
PRICE = mt.Price.parse({"input_usd_per_mtok": 2, "output_usd_per_mtok": 10})


@pytest.mark.parametrize("used", [0, 37])
def test_the_token_budget_is_spent_to_the_token_and_never_overdrawn(used: int) -> None:
    request = 60
    # exactly one output token left after the input bound: allowed, and the account lands on the limit
    budget = used + request + 1
    r = mt.reserve(account=mt.Account(tokens=used), budgets={"max_tokens": budget}, request_bytes=request,
                   requested_cap=None, price=FREE)
    assert isinstance(r, mt.Reservation) and (r.output_cap, r.tokens) == (1, request + 1)
    assert used + r.tokens == budget
    # nothing left for output: refused, naming what it needed
    refused = mt.reserve(account=mt.Account(tokens=used), budgets={"max_tokens": budget - 1}, request_bytes=request,
                         requested_cap=None, price=FREE)
    assert refused == {"budget": "max_tokens", "limit": budget - 1, "used": used, "needed": request + 1}
    # the asked cap wins when it is smaller, the budget when it is smaller
    small = mt.reserve(account=mt.Account(tokens=used), budgets={"max_tokens": budget + 100}, request_bytes=request,
                       requested_cap=5, price=FREE)
    assert small.output_cap == 5
    big = mt.reserve(account=mt.Account(tokens=used), budgets={"max_tokens": budget + 100}, request_bytes=request,
                     requested_cap=500, price=FREE)
    assert big.output_cap == 101 and used + big.tokens == budget + 100


def test_the_cost_budget_is_spent_to_the_micro_dollar() -> None:
    request = 6  # 6 input tokens at 2 $/Mtok = 12 micro-dollars; each output token 10
    fits_one = 12 + 10
    r = mt.reserve(account=mt.Account(), budgets={"max_model_cost_micros": fits_one, "max_tokens": 10**6},
                   request_bytes=request, requested_cap=None, price=PRICE)
    assert isinstance(r, mt.Reservation) and r.output_cap == 1 and r.cost_micros == fits_one
    short = mt.reserve(account=mt.Account(), budgets={"max_model_cost_micros": fits_one - 1, "max_tokens": 10**6},
                       request_bytes=request, requested_cap=None, price=PRICE)
    assert short["budget"] == "max_model_cost_micros" and short["needed"] == fits_one
    spent = mt.reserve(account=mt.Account(cost_micros=fits_one), budgets={"max_model_cost_micros": fits_one},
                       request_bytes=request, requested_cap=3, price=PRICE)
    assert spent["budget"] == "max_model_cost_micros" and spent["used"] == fits_one
    # a free output price: the cost budget bounds the input only, the token budget the output
    free_out = mt.Price.parse({"input_usd_per_mtok": 1})
    r = mt.reserve(account=mt.Account(), budgets={"max_model_cost_micros": 6, "max_tokens": 100},
                   request_bytes=request, requested_cap=None, price=free_out)
    assert r.output_cap == 94
    assert mt.reserve(account=mt.Account(), budgets={"max_model_cost_micros": 5}, request_bytes=request,
                      requested_cap=7, price=free_out)["budget"] == "max_model_cost_micros"
    with pytest.raises(ValueError):
        mt.reserve(account=mt.Account(), budgets={}, request_bytes=1, requested_cap=None, price=FREE)
    assert mt.reserve(account=mt.Account(), budgets={}, request_bytes=1, requested_cap=9, price=FREE).output_cap == 9


def test_a_reply_without_usage_is_charged_the_whole_reservation_never_zero() -> None:
    res = mt.Reservation(tokens_in_bound=300, output_cap=50, tokens=350, cost_micros=1)
    assert mt.charge((12, 7), res) == (12, 7)
    assert mt.charge((0, 0), res) == (0, 0)  # a provider that says zero is taken at its word
    for reply in (None, {}, {"usage": None}, {"usage": {"prompt_tokens": 3}}, {"usage": {"prompt_tokens": -1,
                  "completion_tokens": 2}}, {"usage": {"prompt_tokens": "3", "completion_tokens": 2}}, [1, 2]):
        assert mt.usage_of(reply) is None, reply
        assert mt.charge(mt.usage_of(reply), res) == (300, 50)
    assert mt.usage_of({"usage": {"prompt_tokens": 3, "completion_tokens": 0}}) == (3, 0)
    assert mt.usage_of({"usage": {"prompt_tokens": 0, "completion_tokens": 2}}) == (0, 2)
    assert mt.usage_of({"usage": {"prompt_tokens": 3, "completion_tokens": -1}}) is None


def test_requested_cap_reads_either_field() -> None:
    assert mt.requested_cap({"max_tokens": 9}) == ("max_tokens", 9)
    assert mt.requested_cap({"max_completion_tokens": 4, "max_tokens": 9}) == ("max_completion_tokens", 4)
    assert mt.requested_cap({"max_tokens": "9"}) == ("max_completion_tokens", None)


def test_prices_round_up_to_the_micro_dollar() -> None:
    p = mt.Price(Decimal("0.15"), Decimal("0.6"))
    assert p.cost_micros(1, 0) == 1 and p.cost_micros(10, 0) == 2 and p.cost_micros(0, 10) == 6
    assert mt.Price.parse(None) == mt.Price() and mt.Price().cost_micros(10**6, 10**6) == 0


def test_the_account_snapshot_round_trips_and_matches_the_fold() -> None:
    two = mt.Account().reserved("r1", 100, 7).reserved("r2", 50, 3)
    assert (two.tokens, two.cost_micros, two.calls, two.open_reservations) == (150, 10, 0, 2)
    a = two.settled("r1", 30, 2)
    assert (a.tokens, a.cost_micros, a.calls, a.open_reservations) == (80, 5, 1, 1)
    snap = a.snapshot()
    assert snap == {"tokens_settled": 30, "cost_micros_settled": 2, "calls": 1, "open": {"r2": [50, 3]}}
    back = mt.Account.from_snapshot(snap)
    assert (back.tokens, back.cost_micros, back.calls, back.open_reservations, dict(back.open)) == \
        (80, 5, 1, 1, {"r2": (50, 3)})
    assert mt.Account.from_snapshot(None) == mt.Account()
    folded = mt.fold_account([{"reservation_id": "r1", "tokens_reserved": 100, "cost_micros_reserved": 7},
                              {"reservation_id": "r2", "tokens_reserved": 50, "cost_micros_reserved": 3},
                              {"reservation_id": "r1", "tokens_in": 10, "tokens_out": 20, "cost_micros": 2}])
    assert (folded.tokens, folded.cost_micros, folded.calls, dict(folded.open)) == (80, 5, 1, {"r2": (50, 3)})
    # a settlement for an unknown reservation is still a call, charged in full
    odd = mt.Account().settled("nope", 9, 4)
    assert (odd.tokens, odd.cost_micros, odd.calls, odd.open_reservations) == (9, 4, 1, 0)
