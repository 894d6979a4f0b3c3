"""Honest annotations: every tool's hints and door class follow from its declared effects."""
from __future__ import annotations

import pytest

from coordinator.mcp.catalog import default_specs
from coordinator.mcp.effects import EFFECTS, TOOL_EFFECTS, capability, hints
from registry.pathpolicy import TOOL_PATHS


def production() -> dict:
    return default_specs(include_test=False)


def test_every_served_tool_declares_its_effects_and_nothing_else() -> None:
    assert set(production()) == set(TOOL_EFFECTS)
    for name, effects in TOOL_EFFECTS.items():
        assert effects <= EFFECTS, (name, effects - EFFECTS)


@pytest.mark.parametrize("name", sorted(TOOL_EFFECTS))
def test_published_annotations_and_class_are_derived_from_the_effects(name: str) -> None:
    spec = production()[name]
    d = spec.descriptor()
    effects = TOOL_EFFECTS[name]
    assert {k: v for k, v in d["annotations"].items() if k != "openWorldHint"} == hints(effects)
    assert spec.capability == capability(effects) and d["_meta"]["dome/effects"] == sorted(effects)


def test_effects_agree_with_the_contracts_and_the_path_table() -> None:
    for name, spec in production().items():
        effects = TOOL_EFFECTS[name]
        # the registry's coarser vocabulary: admin is admin, a write method is at least write here
        assert (spec.side_effect == "admin") == ("repository" in effects), name
        paths = set(TOOL_PATHS.get(name, {}).values())
        assert ("write" in paths or "write_dir" in paths) == ("writes_files" in effects), name
        assert ("deck" in paths) == ("runs_code" in effects), name
        assert ("overwrite" in spec.input_schema["properties"]) == ("writes_files" in effects), name


def test_the_hints_tell_what_the_old_ones_hid() -> None:
    """optimize writes files (it was announced read-only) and run_drc_script runs code (it was a read)."""
    s = production()
    assert s["optimize"].descriptor()["annotations"]["readOnlyHint"] is False
    assert s["optimize"].descriptor()["annotations"]["destructiveHint"] is True
    assert s["run_drc_script"].capability == "execute"
    assert s["evaluate"].descriptor()["annotations"]["readOnlyHint"] is True


def test_a_mismatch_is_caught() -> None:
    """The derivation is not vacuous: a tool that writes files is never read-only, code never a read."""
    assert hints(frozenset({"writes_files"}))["readOnlyHint"] is False
    assert hints(frozenset({"reads_files"}))["readOnlyHint"] is True
    assert capability(frozenset({"reads_files", "runs_code"})) == "execute"
    assert capability(frozenset({"repository"})) == "admin"
    assert hints(frozenset({"new_each_call"}))["idempotentHint"] is False
