"""`dome registry check|openrpc|gen-client|tag|resolve`.

check       every schema valid, every method in a contract, every resolver
            mapping resolves, every contract-test case validates, committed
            generated clients up to date. Exit 0 clean, 1 with one line per
            problem (`--json` for a list).
openrpc     an OpenRPC document from the same source (`--profile P`,
            `--tool T`, `--out FILE`; stdout by default).
gen-client  a typed Python client for --tool T --profile P into --out DIR,
            byte-identical for the same inputs, with manifest.json.
tag         create the release tag registry/<tool>/vX.Y.Z (`--commit`).
resolve     print the pinned ref tool_id@<sha> of a release or check a pin.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from coordinator.cli.main import EXIT_INVALID, EXIT_OK, EXIT_USAGE, add_common_arguments
from registry.errors import DomeError

CLIENTS_DIR = Path("clients") / "python"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("check", help="check the registry; non-zero exit with precise messages")
    p.add_argument("--root", help="registry folder (default: the registry/ shipped with dome)")
    add_common_arguments(p)
    p = sub.add_parser("openrpc", help="write an OpenRPC document")
    p.add_argument("--root")
    p.add_argument("--profile", help="filter each tool by its profile of this name")
    p.add_argument("--tool", action="append", help="only this tool (repeatable)")
    p.add_argument("--out", help="file to write (default stdout)")
    add_common_arguments(p)
    p = sub.add_parser("gen-client", help="generate a typed Python client")
    p.add_argument("--root")
    p.add_argument("--tool", required=True)
    p.add_argument("--profile", required=True)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--spec-ref", help="pinned ref tool_id@<sha> recorded in the manifest")
    p.add_argument("--check", action="store_true", help="do not write; exit 1 if --out differs")
    add_common_arguments(p)
    p = sub.add_parser("tag", help="tag a release registry/<tool>/vX.Y.Z")
    p.add_argument("--repo", default=".")
    p.add_argument("--tool", required=True)
    p.add_argument("--commit", default="HEAD")
    p.add_argument("--version")
    add_common_arguments(p)
    p = sub.add_parser("resolve", help="resolve a release (--tool T --version V) or a pin (--pin tool@sha)")
    p.add_argument("--repo", default=".")
    p.add_argument("--tool")
    p.add_argument("--version")
    p.add_argument("--pin")
    add_common_arguments(p)


def _registry(args: argparse.Namespace):
    from registry.contracts import default_registry, load_registry
    return load_registry(Path(args.root)) if args.root else default_registry()


def committed_client_problems(reg) -> list:
    """Committed clients under <root>/clients/python/<tool>/<profile>/ must equal a fresh generation."""
    from registry.check import Problem
    from registry.codegen import diff_files, generate_python_client
    out = []
    for manifest in sorted((reg.root / CLIENTS_DIR).glob("*/*/manifest.json")):
        d = manifest.parent
        tool_id, profile_id = d.parent.name, d.name
        try:
            refs = json.loads(manifest.read_text()).get("inputs", {})
            files = generate_python_client(reg, tool_id, profile_id, spec_ref=(refs.get("spec") or {}).get("ref"))
        except DomeError as exc:
            out.append(Problem(str(d.relative_to(reg.root.parent)), f"cannot regenerate: {exc.message}"))
            continue
        for msg in diff_files(files, d):
            out.append(Problem(str(d.relative_to(reg.root.parent)), msg + " (run dome registry gen-client)"))
    return out


def _check(args: argparse.Namespace) -> int:
    from registry.check import check_registry
    reg = _registry(args)
    problems = check_registry(reg) + committed_client_problems(reg)
    if args.json:
        print(json.dumps({"ok": not problems, "problems": [p.to_dict() for p in problems],
                          "contracts": sorted(c.ref for c in reg.contracts.values()),
                          "methods": len(reg.methods)}, indent=2))
    else:
        for p in problems:
            print(p)
        if not problems:
            print(f"registry ok: {len(reg.contracts)} contracts, {len(reg.methods)} methods, "
                  f"{sum(len(c) for c in reg.cases.values())} contract-test cases, "
                  f"{len(reg.profiles)} profiles, {len(reg.cards)} cards")
        else:
            print(f"registry check: {len(problems)} problem(s)", file=sys.stderr)
    return EXIT_INVALID if problems else EXIT_OK


def _write(text: str, out: str | None) -> None:
    if out:
        Path(out).write_text(text)
    else:
        sys.stdout.write(text)


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "check":
            return _check(args)
        if args.action == "openrpc":
            from registry.openrpc import openrpc_document
            doc = openrpc_document(_registry(args), profile_id=args.profile, tool_ids=args.tool)
            _write(json.dumps(doc, indent=2, sort_keys=True) + "\n", args.out)
            return EXIT_OK
        if args.action == "gen-client":
            from registry.codegen import diff_files, generate_python_client, write_files
            files = generate_python_client(_registry(args), args.tool, args.profile, spec_ref=args.spec_ref)
            out = Path(args.out)
            if args.check:
                problems = diff_files(files, out)
                for p in problems:
                    print(f"{out}/{p}")
                return EXIT_INVALID if problems else EXIT_OK
            write_files(files, out)
            manifest = json.loads(files["manifest.json"])
            print(json.dumps({"out": str(out), "client_artifact_hash": manifest["client_artifact_hash"],
                              "files": sorted(files)}) if args.json else
                  f"wrote {len(files)} files to {out} ({manifest['client_artifact_hash']})")
            return EXIT_OK
        from coordinator import registry_git
        repo = Path(args.repo)
        if args.action == "tag":
            tag, pin = registry_git.tag_release(repo, args.tool, commit=args.commit, version=args.version)
            print(json.dumps({"tag": tag, "pin": str(pin)}) if args.json else f"{tag} -> {pin}")
            return EXIT_OK
        if args.action == "resolve":
            if args.pin:
                r = registry_git.resolve_pin(repo, args.pin)
                print(json.dumps({"pin": str(r.pin), "version": r.version, "digest": r.digest}) if args.json
                      else f"{r.pin} {r.contract.get('contract_id')}@{r.version} {r.digest}")
                return EXIT_OK
            if not (args.tool and args.version):
                print("dome registry resolve: give --pin, or --tool and --version", file=sys.stderr)
                return EXIT_USAGE
            pin = registry_git.resolve_release(repo, args.tool, args.version)
            print(json.dumps({"pin": str(pin)}) if args.json else str(pin))
            return EXIT_OK
    except DomeError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"error": exc.to_object()}))
        else:
            print(f"dome registry {args.action}: {exc}", file=sys.stderr)
            for h in exc.hints:
                print(f"  hint: {h}", file=sys.stderr)
        return EXIT_USAGE if exc.code in ("UNKNOWN_TOOL", "UNKNOWN_PROFILE", "PIN_INVALID", "PIN_NOT_IMMUTABLE") else EXIT_INVALID
    return EXIT_USAGE
