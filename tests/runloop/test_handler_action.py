"""Work-queue actions nest handler inputs under `params`; handlers see them flat."""
from __future__ import annotations

import pytest

from worker_sdk.intents import IntentFailed, handler_action


def test_work_queue_params_are_flattened_for_the_handler() -> None:
    a = {"intent": "litho.optimize", "params": {"layout": "l.oas", "iterations": 5}}
    assert handler_action(a) == {"intent": "litho.optimize", "layout": "l.oas", "iterations": 5}


def test_suite_name_is_dropped_and_a_nested_deck_params_field_survives() -> None:
    a = {"suite": "drc", "params": {"deck": "d.drc", "layouts": ["m.oas"], "params": {"min_width": "0.01"}}}
    assert handler_action(a) == {"deck": "d.drc", "layouts": ["m.oas"], "params": {"min_width": "0.01"}}


def test_an_already_flat_action_passes_through() -> None:
    a = {"deck": "d.drc", "layouts": ["m.oas"], "params": {"layer": "1"}}
    assert handler_action(a) == a
    assert handler_action({"intent": "command", "argv": ["true"], "env": {"A": "1"}}) == \
        {"intent": "command", "argv": ["true"], "env": {"A": "1"}}


def test_a_field_given_twice_is_refused() -> None:
    with pytest.raises(IntentFailed) as exc:
        handler_action({"intent": "x", "env": {}, "params": {"env": {"B": "2"}}})
    assert exc.value.code == "INTENT_PARAMS_CLASH" and exc.value.details["fields"] == ["env"]
