"""Pure planning: overlap index and StackPlan ordering (hypothesis)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.integration.planning import (Candidate, OverlapIndex, bisect_culprit,
                                              decide_conflict, plan_stack)
from coordinator.integration.policy import IntegrationPolicy

POLICY = IntegrationPolicy()
BASE = "a" * 40


def fp(path: str, start: int, end: int, ctx: str = "c", edit: str = "e") -> dict:
    return {"path": path, "base_ref": BASE, "base_context_digest": "sha256:" + ctx.ljust(64, "0"),
            "edit_digest": "sha256:" + edit.ljust(64, "0"), "range_hint": {"start": start, "end": end},
            "kind": "hunk", "fingerprint_version": "v"}


@st.composite
def candidates(draw: st.DrawFn) -> list[Candidate]:
    n = draw(st.integers(1, 12))
    out = []
    for k in range(n):
        path = draw(st.sampled_from(["a.py", "b.py", "c.py", "requirements.txt"]))
        start = draw(st.integers(1, 50))
        out.append(Candidate(
            proposal_id=f"p{k:02d}", created_at=draw(st.sampled_from(["2026-01-01T00:00:00Z",
                                                                    "2026-01-02T00:00:00Z"])),
            diff_digest="sha256:" + f"{k:02d}".ljust(64, "1"),
            risk=draw(st.sampled_from(["low", "medium", "high"])), touched_files=(path,),
            fingerprints=(fp(path, start, start + draw(st.integers(0, 6)), ctx=f"{k}", edit=f"{k}"),),
            critical=draw(st.booleans()), deps=path == "requirements.txt"))
    return out


@settings(max_examples=120, deadline=None)
@given(candidates(), st.randoms())
def test_property_plan_is_deterministic_and_order_free(cands, rnd) -> None:
    plan1, _ = plan_stack(cands, base_ref=BASE, seed=5, policy=POLICY)
    shuffled = list(cands)
    rnd.shuffle(shuffled)
    plan2, _ = plan_stack(shuffled, base_ref=BASE, seed=5, policy=POLICY)
    assert plan1.to_dict() == plan2.to_dict()
    assert plan1.stack_plan_id == plan2.stack_plan_id


@settings(max_examples=120, deadline=None)
@given(candidates())
def test_property_ordering_rules(cands) -> None:
    plan, index = plan_stack(cands, base_ref=BASE, seed=0, policy=POLICY)
    by_id = {c.proposal_id: c for c in cands}
    order = [by_id[p] for p in plan.ordered]
    # dependency/lock files late
    deps_pos = [i for i, c in enumerate(order) if c.deps]
    assert all(i >= len(order) - len(deps_pos) for i in deps_pos)
    # within the non-deps group: critical path first, then low risk, then non-overlapping
    rank = {"low": 0, "medium": 1, "high": 2}
    keys = [(c.deps, not c.critical, rank[c.risk], index.degree(c.proposal_id) > 0) for c in order]
    assert keys == sorted(keys)
    # overlap is symmetric
    for a in by_id:
        for b in index.neighbours(a):
            assert a in index.neighbours(b)


def test_overlap_by_range_and_by_context_collision() -> None:
    a = Candidate("a", "", "sha256:" + "a" * 64, "low", ("x.py",), (fp("x.py", 10, 16, "c1", "e1"),))
    b = Candidate("b", "", "sha256:" + "b" * 64, "low", ("x.py",), (fp("x.py", 14, 20, "c2", "e2"),))
    c = Candidate("c", "", "sha256:" + "c" * 64, "low", ("x.py",), (fp("x.py", 40, 46, "c1", "e3"),))
    d = Candidate("d", "", "sha256:" + "d" * 64, "low", ("x.py",), (fp("x.py", 60, 66, "c9", "e9"),))
    idx = OverlapIndex([a, b, c, d])
    assert [o.kind for o in idx.overlaps("a", "b")] == ["range"]
    assert [o.kind for o in idx.overlaps("a", "c")] == ["context"]  # same preimage, other edit
    assert idx.overlaps("a", "d") == [] and idx.degree("d") == 0


def test_redundant_and_tie_breaks() -> None:
    same = "sha256:" + "5" * 64
    x = Candidate("x", "2026-01-02T00:00:00Z", same, "low", ("f",), (fp("f", 1, 3),))
    y = Candidate("y", "2026-01-01T00:00:00Z", same, "low", ("f",), (fp("f", 1, 3),))
    plan, _ = plan_stack([y, x], base_ref=BASE, seed=1, policy=POLICY)
    assert plan.ordered == ("x",)  # proposal_id breaks the tie before created_at
    assert plan.rejected[0]["proposal_id"] == "y" and plan.rejected[0]["reason"] == "redundant"
    sel = plan.selection_decision()
    assert sel["tie_break_order"] == ["proposal_id", "created_at", "diff_digest"]
    assert [e["proposal_id"] for e in sel["entries"]] == ["x", "y"]


def test_conflict_policy_precedence() -> None:
    kw = dict(proposal_id="p", conflicts=[{"path": "f", "hunk": 0}], policy=POLICY, head_ref=BASE,
              total_parts=2)
    assert decide_conflict(atomicity="hunk_ok", applicable_parts=1, reorders_used=0, later_pending=2,
                           resolver_available=True, **kw).action == "reorder"
    assert decide_conflict(atomicity="hunk_ok", applicable_parts=1, reorders_used=1, later_pending=2,
                           resolver_available=True, **kw).action == "split"
    assert decide_conflict(atomicity="atomic_proposal", applicable_parts=1, reorders_used=1,
                           later_pending=0, resolver_available=True, **kw).action == "resolver"
    d = decide_conflict(atomicity="atomic_proposal", applicable_parts=1, reorders_used=1,
                        later_pending=0, resolver_available=False, **kw)
    assert d.action == "drop"
    assert d.to_dict()["tie_break"]["policy_precedence"] == 3


@given(st.integers(1, 64), st.data())
def test_property_bisect_finds_first_failing_prefix(n, data) -> None:
    culprit = data.draw(st.integers(1, n))
    calls = []
    found, steps = bisect_culprit(n, lambda k: calls.append(k) or k < culprit)
    assert found == culprit
    assert len(steps) <= max(1, n.bit_length())


def test_a_requirement_already_on_the_canvas_is_not_missing() -> None:
    """In-run batches: a proposal whose derived base holds one stacked by an earlier batch is planned;
    one whose requirement is neither in the batch nor stacked is rejected."""
    c = Candidate(proposal_id="pB", created_at="2026-01-01T00:00:00Z", diff_digest="sha256:" + "b" * 64,
                  risk="low", touched_files=("b.txt",), fingerprints=(fp("b.txt", 1, 1, ctx="b", edit="b"),),
                  requires=("pA",))
    alone, _ = plan_stack([c], base_ref=BASE, seed=0, policy=POLICY)
    assert alone.ordered == () and [r["code"] for r in alone.rejected] == ["PLAN_DEPENDENCY_MISSING"]
    later, _ = plan_stack([c], base_ref=BASE, seed=0, policy=POLICY, stacked=frozenset({"pA"}))
    assert later.ordered == ("pB",) and later.rejected == ()
