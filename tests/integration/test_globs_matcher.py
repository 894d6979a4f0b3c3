"""globs_matcher joins a policy's globs into one compiled match: it must answer exactly
as fnmatch does glob by glob (protected paths, human-gate paths with their "**/"
rule, dependency files without it)."""
from __future__ import annotations

import fnmatch

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.integration.policy import IntegrationPolicy, globs_matcher, path_matches

_pieces = st.sampled_from(list("ab/._-*?[]!x") + ["**/", "é", "\n"])
_globs = st.lists(st.lists(_pieces, max_size=8).map("".join), max_size=5)
_paths = st.text(st.sampled_from(list("ab/._-x") + ["é", "\n", "*"]), max_size=10)


@settings(max_examples=500, deadline=None)
@given(globs=_globs, path=_paths)
def test_one_match_answers_as_fnmatch_glob_by_glob(globs, path) -> None:
    assert globs_matcher(tuple(globs))(path) == any(path_matches(path, g) for g in globs)
    assert globs_matcher(tuple(globs), double_star=False)(path) == any(fnmatch.fnmatchcase(path, g) for g in globs)


def test_protected_touched_and_the_double_star_rule() -> None:
    pol = IntegrationPolicy().with_protected(["**/secrets/*", ".dome/*", "ci/[ab].yml"])
    touched = ["secrets/k", "x/secrets/k", ".dome/protected-paths", "ci/a.yml", "ci/c.yml", "src/a.py"]
    assert pol.protected_touched(touched) == sorted(["secrets/k", "x/secrets/k", ".dome/protected-paths",
                                                      "ci/a.yml"])
    assert not globs_matcher(())("anything")
