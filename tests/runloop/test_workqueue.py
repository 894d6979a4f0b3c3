"""Work queue loading: closed schema, graph rules listing every offending id, cycles."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from coordinator.workgraph import WorkQueueGraphError
from coordinator.workqueue import load_work_queue, parse_work_queue
from registry.errors import SchemaValidationError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def queue(tasks, **extra):
    return {"artifact_kind": "dome.work.queue/v1", "repo": ".", "base_ref": "main",
            "determinism_seed": 1, "policy": "default", "promote_to": "refs/heads/out", "tasks": tasks, **extra}


def task(nid, deps=(), **extra):
    return {"node_id": nid, "dependencies": list(deps), "containers": [], "required_capabilities": ["write"],
            "required_outputs": ["patch_proposal"],
            "action_spec": {"intent": "command", "argv": ["true"]}, **extra}


def test_valid_queue_loads_with_topological_order():
    wq = parse_work_queue(queue([task("b", ["a"]), task("a"), task("c", ["a", "b"])]))
    assert wq.graph.topo_order == ("a", "b", "c")
    assert wq.graph.descendants == {"a": 2, "b": 1, "c": 0}


def test_unknown_fields_rejected_everywhere():
    for mutate in (lambda q: q.__setitem__("surprise", 1),
                   lambda q: q["tasks"][0].__setitem__("methods", ["x"]),
                   lambda q: q["tasks"][0]["action_spec"].__setitem__("shell", True),
                   lambda q: q.__setitem__("scheduling", {"max_paralel": 2})):
        q = queue([task("a")])
        mutate(q)
        with pytest.raises(SchemaValidationError) as ei:
            parse_work_queue(q)
        assert ei.value.code == "WORK_QUEUE_UNKNOWN_FIELD"  # named, with where it is
        assert ei.value.details["unknown_fields"][0]["field"] in ("surprise", "methods", "shell", "max_paralel")


def test_graph_errors_list_every_offending_id():
    q = queue([task("a"), task("a", ["x"]), task("b", ["zz", "yy"]), task("c", ["c"]),
               task("d", ["e"]), task("e", ["d"]), task("f", ["g"]), task("g", ["f"])])
    with pytest.raises(WorkQueueGraphError) as ei:
        parse_work_queue(q)
    p = ei.value.details["problems"]
    assert p["duplicate_node_ids"] == ["a"]
    assert {d["dependency"] for d in p["unknown_dependencies"]} == {"zz", "yy"}
    assert p["self_dependencies"] == ["c"]
    assert sorted(p["cycles"]) == [["d", "e"], ["f", "g"]]
    assert ei.value.code == "WORK_QUEUE_GRAPH_INVALID"


def test_single_kind_gets_its_own_code():
    with pytest.raises(WorkQueueGraphError) as ei:
        parse_work_queue(queue([task("a", ["b"]), task("b", ["a"])]))
    assert ei.value.code == "DEPENDENCY_CYCLE"
    with pytest.raises(WorkQueueGraphError) as ei:
        parse_work_queue(queue([task("a", ["a"])]))
    assert ei.value.code == "SELF_DEPENDENCY"


def test_annotated_cycle_is_unrolled_with_bounded_rounds():
    cyc = {"group": "refine", "max_iterations": 3}
    q = queue([task("start"), task("a", ["start", "b"], cycle=cyc), task("b", ["a"], cycle=cyc),
               task("end", ["b"])])
    g = parse_work_queue(q).graph
    assert set(g.nodes) == {"start", "end", "a@1", "b@1", "a@2", "b@2", "a@3", "b@3"}
    assert g.nodes["a@1"].dependencies == ("start",)
    assert g.nodes["b@1"].dependencies == ("a@1",)
    assert g.nodes["a@2"].dependencies == ("b@1", "start")
    assert g.nodes["end"].dependencies == ("b@3",)
    assert len({g.nodes[n].task_spec_digest for n in g.nodes}) == len(g.nodes)


def test_cycle_annotation_must_match_a_real_cycle():
    cyc = {"group": "g", "max_iterations": 2}
    q = queue([task("a", cycle=cyc), task("b", ["a"], cycle=cyc)])
    with pytest.raises(WorkQueueGraphError) as ei:
        parse_work_queue(q)
    assert ei.value.details["problems"]["annotated_cycles_not_found"] == ["g"]
    q = queue([task("a", ["b"], cycle=cyc), task("b", ["a"], cycle={"group": "g", "max_iterations": 3})])
    with pytest.raises(WorkQueueGraphError) as ei:
        parse_work_queue(q)
    assert ei.value.details["problems"]["inconsistent_cycle_groups"] == ["g"]
    q = queue([task("a", ["a"], cycle={"group": "g", "max_iterations": 5000})])
    with pytest.raises(SchemaValidationError):
        parse_work_queue(q)  # unbounded iteration is refused by the schema
    assert parse_work_queue(queue([task("a", ["a"], cycle=cyc)])).graph.nodes["a@2"].dependencies == ("a@1",)


def test_examples_load():
    files = sorted(EXAMPLES.glob("*.queue.json"))
    assert files
    for f in files:
        load_work_queue(f)


ids = st.text(alphabet="abcdefgh", min_size=1, max_size=3)


def tasks_with_unique_dep_lists(spec):
    return [task(n, sorted(set(deps))) for n, deps in spec]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(ids, st.lists(ids, max_size=4)), min_size=1, max_size=12))
def test_property_parser_accepts_exactly_valid_dags(spec):
    """Property: the parser accepts a graph iff it has no duplicate, unknown, self or
    cyclic dependency, and when it rejects, every offending id is named."""
    tasks = tasks_with_unique_dep_lists(spec)  # the schema refuses repeated dependencies
    ids_seen = [n for n, _ in spec]
    dups = {n for n in ids_seen if ids_seen.count(n) > 1}
    known = set(ids_seen)
    unknown = {(n, d) for n, deps in spec for d in deps if d not in known}
    try:
        wq = parse_work_queue(queue(copy.deepcopy(tasks)))
    except WorkQueueGraphError as exc:
        p = exc.details["problems"]
        assert set(p.get("duplicate_node_ids", [])) == dups
        assert {(u["node_id"], u["dependency"]) for u in p.get("unknown_dependencies", [])} <= unknown
        if not dups and not unknown:
            assert p.get("self_dependencies") or p.get("cycles")
            for comp in p.get("cycles", []):
                assert len(comp) > 1
        return
    assert not dups and not unknown
    pos = {n: i for i, n in enumerate(wq.graph.topo_order)}
    for n in wq.graph.nodes.values():
        for d in n.dependencies:
            assert pos[d] < pos[n.node_id]
    # canonical: the same queue gives the same digests
    assert parse_work_queue(queue(copy.deepcopy(tasks))).graph.digest == wq.graph.digest


def test_schema_files_are_closed():
    root = Path(__file__).resolve().parents[2] / "registry/schemas"
    wq = json.loads((root / "work_queue.json").read_text())
    assert wq["additionalProperties"] is False
    assert wq["$defs"]["scheduling"]["additionalProperties"] is False
    assert json.loads((root / "task_node.json").read_text())["additionalProperties"] is False
