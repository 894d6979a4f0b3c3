"""The integration policy: what the coordinator accepts, how it stacks, what
the gate needs. Pure data.

Validation and human-gate settings come from the named policy in
registry/policy/policy_spec.json (`validation`, `human_gate`; schema
`policy_spec`). Path, mode, size, dependency-file, atomicity and checkpoint
knobs are integration settings with fail-closed defaults below; a policy may
override them under an optional `integration` object.
"""
from __future__ import annotations

import fnmatch
import functools
import json
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from registry import limits
from registry.canonical import digest_json

RISK_LEVELS = ("low", "medium", "high", "critical")
ATOMICITY = ("atomic_proposal", "atomic_file", "hunk_ok")

DEFAULT_DEPENDENCY_GLOBS = (
    "requirements*.txt", "requirements*.in", "constraints*.txt", "pyproject.toml", "setup.py",
    "setup.cfg", "Pipfile", "Pipfile.lock", "poetry.lock", "uv.lock", "pdm.lock",
    "environment.yml", "environment.yaml", "conda-lock.yml", "package.json",
    "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "Cargo.toml",
    "Cargo.lock", "go.mod", "go.sum", "Gemfile", "Gemfile.lock", "composer.json",
    "composer.lock", "*.gemspec", "build.gradle", "pom.xml", "vcpkg.json", "conanfile.*",
)

# What validation trusts: CI scripts, test-runner configuration that can switch tests off,
# work queues (they define the suites) and dome's own policy. A proposal touching one is
# high risk and waits for a person (the human gate), however green its validation is.
DEFAULT_PROTECTED_PATHS = (
    ".ci/**", ".github/**", ".gitlab-ci.yml", ".gitlab/**", ".circleci/**", "Jenkinsfile",
    "azure-pipelines.yml", ".buildkite/**", ".travis.yml", "**/conftest.py", "pytest.ini", "tox.ini",
    "noxfile.py", "**/*.queue.json", "registry/policy/**", ".dome/**",
)
REPO_PROTECTED_FILE = ".dome/protected-paths"
"""A repository's own additions to `protected_paths`: one glob per line, read from the
run's base commit (never from a proposal); `#` starts a comment."""

# The size rule's defaults: more files or more changed lines than these makes a proposal medium risk.
SIZE_RISK_FILES = 20
SIZE_RISK_LINES = 500
UNRECORDED_AT_DEFAULT = frozenset({"validation_inputs_from", "size_risk_files", "size_risk_lines",
                                   "size_risk_to", "domain"})
"""Fields added after policies were recorded: left out of `to_dict` (and the digest) at their default."""
VALIDATION_INPUTS_FROM = ("base", "head")

POLICY_SPEC_PATH = Path(__file__).resolve().parents[2] / "registry" / "policy" / "policy_spec.json"


@dataclass(frozen=True)
class IntegrationPolicy:
    name: str = "default"
    version: str = "0.0.0"
    # proposal checks
    allow_exec_bit: bool = False
    allow_symlinks: bool = True
    allow_binary: bool = True
    max_binary_bytes: int = limits.MAX_BINARY_BYTES
    max_total_bytes: int = limits.MAX_DIFF_BYTES
    max_files: int = 2000
    dependency_globs: tuple[str, ...] = DEFAULT_DEPENDENCY_GLOBS
    dependency_risk_allowed: tuple[str, ...] = ("medium", "high", "critical")
    protected_paths: tuple[str, ...] = DEFAULT_PROTECTED_PATHS
    # stacking
    allowed_atomicity: tuple[str, ...] = ATOMICITY
    checkpoint_strategy: str = "per_layer"  # or "per_batch"
    batch_size: int = 8
    conflict_actions: tuple[str, ...] = ("reorder", "split", "resolver", "drop")
    max_reorder_passes: int = 1
    # gate
    suites_by_risk: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    validation_counts: str = "final_head_only"  # or "per_layer_or_final"
    escalate_on_split: tuple[str, ...] = ()
    human_gate_risk: tuple[str, ...] = ("high", "critical")
    human_gate_paths: tuple[str, ...] = ()
    consent_ttl_seconds: int = 3600
    promote_to: str = "refs/heads/main"
    # the size rule (see `size_rise`): a proposal over either figure is raised to `size_risk_to`
    size_risk_files: int = SIZE_RISK_FILES
    size_risk_lines: int = SIZE_RISK_LINES
    size_risk_to: str = "medium"
    domain: str = ""  # the preset applied (`software`, `eda`); "" when the policy names none
    # where a required suite's inputs (tests, fixtures, runner configuration, decks, scripts) come
    # from when it judges the head: "base" (the run's base; a proposal changing them needs consent)
    # or "head" (the repository opts out: the proposal's own inputs judge it)
    validation_inputs_from: str = "base"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in UNRECORDED_AT_DEFAULT and v == f.default:
                continue  # policies recorded before the field existed keep their digest
            if isinstance(v, tuple):
                v = list(v)
            elif isinstance(v, Mapping):
                v = {k: list(x) for k, x in sorted(v.items())}
            out[f.name] = v
        return out

    @property
    def digest(self) -> str:
        return digest_json(self.to_dict())

    def required_suites(self, risks: set[str] | list[str]) -> list[str]:
        need: set[str] = set()
        for r in risks:
            need.update(self.suites_by_risk.get(r, ()))
        return sorted(need)

    def with_(self, **kw: Any) -> "IntegrationPolicy":
        return replace(self, **kw)

    def protected_touched(self, paths: Any) -> list[str]:
        """The paths among `paths` that match `protected_paths`."""
        hit = globs_matcher(tuple(self.protected_paths))
        return sorted(p for p in paths if hit(p))

    def with_human_gate_always(self) -> "IntegrationPolicy":
        """This policy with the human gate on for every risk class (recorded, so verify agrees)."""
        return replace(self, human_gate_risk=RISK_LEVELS)

    def with_protected(self, extra: Any) -> "IntegrationPolicy":
        """This policy with more protected paths (a repository can add, never remove)."""
        return replace(self, protected_paths=tuple(dict.fromkeys((*self.protected_paths, *extra))))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "IntegrationPolicy":
        """The inverse of `to_dict` (unknown keys ignored)."""
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in d:
                continue
            v = d[f.name]
            if f.name == "suites_by_risk":
                v = {k: tuple(x) for k, x in dict(v).items()}
            elif isinstance(v, list):
                v = tuple(v)
            kw[f.name] = v
        return cls(**kw)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], name: str = "default",
                  domain: str | None = None) -> "IntegrationPolicy":
        """Build from a `dome.policy_spec/v1` document and a policy name; `domain`
        picks one of the policy's `validation.presets` (see `apply_preset`)."""
        if name not in spec.get("policies", {}):
            from registry.errors import DomeError
            raise DomeError(f"no policy named {name!r}", code="POLICY_UNKNOWN",
                            details={"policy": name, "known": sorted(spec.get("policies", {}))})
        pol = spec["policies"][name]
        val = pol.get("validation", {})
        gate = pol.get("human_gate", {})
        kw: dict[str, Any] = {
            "name": name, "version": str(spec.get("version", "0.0.0")),
            "suites_by_risk": {k: tuple(v) for k, v in val.get("suites_by_risk", {}).items()},
            "validation_counts": val.get("counts", "final_head_only"),
            "escalate_on_split": tuple(val.get("escalate_on_split", ())),
            "validation_inputs_from": str(val.get("inputs_from", "base")),
            "human_gate_risk": tuple(gate.get("required_for_risk", ("high", "critical"))),
            "human_gate_paths": tuple(gate.get("required_for_paths", ())),
            "consent_ttl_seconds": int(gate.get("consent_ttl_seconds", 3600)),
        }
        kw.update(size_rule_fields(val.get("size_rule") or {}))
        extra = pol.get("integration") or {}
        names = {f.name for f in fields(cls)}
        for k, v in extra.items():
            if k in names:
                kw[k] = tuple(v) if isinstance(v, list) else v
        return apply_preset(cls(**kw), val.get("presets") or {}, domain)

    @classmethod
    def load(cls, name: str = "default", path: Path | None = None,
             domain: str | None = None) -> "IntegrationPolicy":
        p = path or POLICY_SPEC_PATH
        if not p.is_file():
            return cls(name=name)
        return cls.from_spec(json.loads(p.read_text()), name, domain)


def path_matches(path: str, glob: str) -> bool:
    """fnmatch, with a leading "**/" also matching at the top level."""
    return fnmatch.fnmatchcase(path, glob) or (glob.startswith("**/") and
                                                fnmatch.fnmatchcase(path, glob[3:]))


@functools.lru_cache(maxsize=64)
def globs_matcher(globs: tuple[str, ...], double_star: bool = True) -> Callable[[str], bool]:
    """One test for "does a path match any of `globs`" (`path_matches` for each
    glob when `double_star`, plain `fnmatch.fnmatchcase` otherwise): the globs'
    fnmatch translations joined into one compiled alternation, so a path costs
    one regular-expression match rather than one fnmatch call per glob."""
    pats = [fnmatch.translate(g) for g in globs]
    if double_star:
        pats += [fnmatch.translate(g[3:]) for g in globs if g.startswith("**/")]
    if not pats:
        return lambda _path: False
    match = re.compile("|".join(f"(?:{p})" for p in pats)).match
    return lambda path: match(path) is not None


def parse_protected_file(text: str) -> tuple[str, ...]:
    """The globs of a `.dome/protected-paths` file."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return tuple(out)


def max_risk(*risks: Any) -> str:
    """The highest of several risk classes (absent ones count as low)."""
    return max((risk_level(r) for r in risks), key=RISK_LEVELS.index, default="low")


def risk_level(risk: Any) -> str:
    """The risk class of a proposal's `risk` field ("low" when absent)."""
    if risk is None:
        return "low"
    if isinstance(risk, Mapping):
        risk = risk.get("class", risk.get("level", "high"))
    return risk if risk in RISK_LEVELS else "high"  # unknown: fail closed


# ---------------------------------------------------------------------------
# Policies that fit the repository: domain presets and the size rule.
#
# A policy's `validation.presets` maps a domain (`software`, `eda`) to the
# suites each risk class needs there; a work queue gets the preset of its
# domain (`domain_of`). The size rule raises a large proposal's risk; every
# rise is recorded with the rule and its figures (`RiskRise`), so a verdict
# can say which proposal raised the risk and why.

DOMAINS = ("software", "eda")
# intents and suites that only mean something for mask/layout work
EDA_INTENT_PREFIXES = ("litho", "drc", "layout", "klayout", "opc", "mask")
EDA_SUITES = ("drc", "litho.resim")


def domain_of(intents: Any, suites: Any, declared: str | None = None) -> str:
    """The preset a work queue gets: its own `domain` when it names one; else
    `eda` when a task runs an EDA intent or a validation is an EDA suite; else
    `software`. So a plain repository is never asked for a DRC run it cannot make."""
    if declared:
        return declared
    if any(str(i).split(".")[0] in EDA_INTENT_PREFIXES for i in intents):
        return "eda"
    if any(str(s) in EDA_SUITES for s in suites):
        return "eda"
    return "software"


def size_rule_fields(rule: Mapping[str, Any]) -> dict[str, Any]:
    """A policy's `validation.size_rule` (`files_over`, `lines_over`, `raises_to`) as fields."""
    out: dict[str, Any] = {}
    for key, name in (("files_over", "size_risk_files"), ("lines_over", "size_risk_lines"),
                      ("raises_to", "size_risk_to")):
        if key in rule:
            out[name] = rule[key]
    return out


def fitted_to_queue(policy: IntegrationPolicy, provided: Any, declared: Any = ()) -> IntegrationPolicy:
    """A preset's policy that never requires, for a risk class only a rule can raise a proposal to
    (the size rule, a dependency file: no task `declared` it), a suite the work queue cannot
    provide: `provided` names the suites it declares, by name and kind
    (`validation_inputs.provided_suites`), and suites that need no definition (`litho.resim`)
    count too. A risk class a task declares keeps every suite the preset names, and pre-flight
    refuses a queue that lacks one; so does a policy that names no preset."""
    if not policy.domain:
        return policy
    from registry.intents import SUITES_WITHOUT_CONFIG

    have, keep = set(SUITES_WITHOUT_CONFIG) | set(provided), set(declared)
    fitted = {k: v if k in keep else tuple(x for x in v if x in have) for k, v in policy.suites_by_risk.items()}
    return policy if fitted == dict(policy.suites_by_risk) else replace(policy, suites_by_risk=fitted)


def apply_preset(policy: IntegrationPolicy, presets: Mapping[str, Any], domain: str | None) -> IntegrationPolicy:
    """`policy` with the named preset's suites, split escalation, human gate and size rule."""
    if not domain or domain not in presets:
        return policy
    pre = presets[domain]
    kw: dict[str, Any] = {"domain": domain}
    if "suites_by_risk" in pre:
        kw["suites_by_risk"] = {k: tuple(v) for k, v in pre["suites_by_risk"].items()}
    if "escalate_on_split" in pre:
        kw["escalate_on_split"] = tuple(pre["escalate_on_split"])
    if "human_gate_risk" in pre:
        kw["human_gate_risk"] = tuple(pre["human_gate_risk"])
    kw.update(size_rule_fields(pre.get("size_rule") or {}))
    return replace(policy, **kw)


@dataclass(frozen=True)
class RiskRise:
    """One rule that raised a proposal's risk, with the figures that made it fire."""

    rule: str  # "size", "protected_paths"
    raises_to: str
    figures: Mapping[str, Any]
    limits: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "raises_to": self.raises_to, "figures": dict(self.figures),
                "limits": dict(self.limits)}

    def describe(self) -> str:
        if self.rule == "size":
            return (f"size rule: {self.figures.get('files')} files, {self.figures.get('lines')} changed lines "
                    f"(more than {self.limits.get('files_over')} files or {self.limits.get('lines_over')} "
                    f"lines makes it {self.raises_to})")
        if self.rule == "validation_inputs":
            return (f"changes inputs of a required suite {', '.join(self.figures.get('paths', []))} "
                    f"(makes it {self.raises_to})")
        if self.rule == "protected_paths":
            return f"touches protected paths {', '.join(self.figures.get('paths', []))} (makes it {self.raises_to})"
        return f"{self.rule}: {dict(self.figures)} (makes it {self.raises_to})"


def size_rise(policy: IntegrationPolicy, files: int, lines: int) -> RiskRise | None:
    """The size rule: more than `size_risk_files` files or `size_risk_lines` changed
    lines (added plus removed) raises a proposal to `size_risk_to`."""
    if files > policy.size_risk_files or lines > policy.size_risk_lines:
        return RiskRise("size", risk_level(policy.size_risk_to), {"files": files, "lines": lines},
                        {"files_over": policy.size_risk_files, "lines_over": policy.size_risk_lines})
    return None


def risk_sources(verified: Any) -> list[dict[str, Any]]:
    """From the run's proposal verdicts (`integration.proposal_verified` artifacts), each
    proposal whose risk is above low, with the rules that raised it: what a verdict,
    `dome verify` and the report print beside the suites a risk class needed."""
    out = []
    for a in verified:
        risk = risk_level(a.get("risk"))
        if risk == "low":
            continue
        rises = [dict(r) for r in a.get("risk_rises", [])]
        declared = a.get("declared_risk")
        deps = list(a.get("dependency_files") or [])
        out.append({"proposal_id": a.get("proposal_id"), "node_id": a.get("node_id"), "risk": risk,
                    "rises": rises, **({"declared": declared} if declared else {}),
                    **({"dependency_files": deps} if deps else {})})
    return sorted(out, key=lambda x: (-RISK_LEVELS.index(x["risk"]), str(x["proposal_id"])))


def describe_source(src: Mapping[str, Any]) -> str:
    """Why one proposal of `risk_sources` is above low, in words."""
    why = [describe_rise(x) for x in src.get("rises") or []]
    if src.get("dependency_files"):
        why.append(f"touches dependency files {', '.join(src['dependency_files'])} (its worker marks it "
                   f"{src.get('declared', 'medium')})")
    elif src.get("declared") and not why:
        why.append(f"declared {src['declared']} by its task or worker")
    return "; ".join(why) or "declared by its worker"


def describe_rise(r: Mapping[str, Any]) -> str:
    return RiskRise(str(r.get("rule")), str(r.get("raises_to")), r.get("figures") or {},
                    r.get("limits") or {}).describe()
