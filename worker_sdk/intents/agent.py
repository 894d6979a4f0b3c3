"""The `agent` intent: a model-driven coding agent, configured by its runtime card.

    {"intent": "agent", "params": {"card": {...runtime card...}, "instructions": "fix ..."}}

The card (registry/agent_card.py) pins the client SDK and its version (the
official `openai` package; a different installed version refuses to start,
RUNTIME_SDK_MISMATCH), the model, the transport (timeout, retries), the
output cap per call and the turn limit. The client talks to the coordinator's
egress gate over /dome/egress.sock (DOME_EGRESS_SOCKET), naming the card's
host in the URL; its "API key" is the attempt's grant token, and every
request carries a call proof signed by the attempt's worker key. The real
key is added by the gate, outside the sandbox.

The tools offered to the model are the grant's own methods that act on the
attempt's checkout: `read_file`, `list_tree` and `grep` (their parameters
are the registry contract's request schemas) and `submit_patch`, whose
model-facing form takes a unified diff; each is offered only when the grant
allows it. Lifecycle methods (put_artifact, complete_task, ...) stay with the
runtime. `submit_patch` applies the diff to the checkout and ends the loop;
the runtime then builds, uploads and submits the PatchProposal with its
evidence like every worker's. The transcript is stored as evidence.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

from registry.agent_card import check_card
from registry.canonical import digest_bytes
from registry.errors import DomeError

from . import IntentContext, IntentFailed, IntentResult

EGRESS_METHOD = "egress"  # coordinator.grants.EGRESS_METHOD: what the call proof names
IN_EGRESS = "/dome/egress.sock"
MAX_TOOL_OUTPUT = 16_000
SUBMIT_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["diff"],
                 "properties": {"diff": {"type": "string", "minLength": 1, "maxLength": 1_000_000,
                                         "description": "a unified diff (git format) against the checkout"},
                                "summary": {"type": "string", "maxLength": 2000}}}
AGENT_METHODS = ("read_file", "list_tree", "grep", "submit_patch")


class RuntimeMismatch(DomeError):
    code = "RUNTIME_SDK_MISMATCH"


class ToolFailed(DomeError):
    code = "TOOL_FAILED"


# -- the checkout tools ---------------------------------------------------------
def _inside(root: Path, rel: str | None) -> Path:
    p = (root / (rel or ".")).resolve()
    r = root.resolve()
    if p != r and r not in p.parents:
        raise ToolFailed("path is outside the checkout", code="PATH_DENIED", details={"path": rel})
    if ".git" in p.relative_to(r).parts:
        raise ToolFailed("the repository's .git is not readable", code="PATH_DENIED", details={"path": rel})
    return p


def read_file(root: Path, args: Mapping[str, Any]) -> dict[str, Any]:
    p = _inside(root, args["path"])
    if not p.is_file():
        raise ToolFailed(f"no file {args['path']!r}", code="FILE_NOT_FOUND", details={"path": args["path"]})
    data = p.read_bytes()[: int(args.get("max_bytes", MAX_TOOL_OUTPUT))]
    return {"path": args["path"], "content": data.decode("utf-8", "replace")}


def list_tree(root: Path, args: Mapping[str, Any]) -> dict[str, Any]:
    base = _inside(root, args.get("path"))
    depth, limit = int(args.get("max_depth", 8)), int(args.get("max_entries", 1000))
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        rel = Path(dirpath).relative_to(root.resolve())
        dirnames[:] = sorted(d for d in dirnames if d != ".git" and len(rel.parts) < depth)
        out += [str(rel / f) if rel.parts else f for f in sorted(filenames)]
        if len(out) >= limit:
            break
    return {"entries": out[:limit]}


def grep(root: Path, args: Mapping[str, Any]) -> dict[str, Any]:
    pat = re.escape(args["pattern"]) if args.get("fixed_string") else args["pattern"]
    try:
        rx = re.compile(pat, re.IGNORECASE if args.get("ignore_case") else 0)
    except re.error as exc:
        raise ToolFailed(f"bad pattern: {exc}", code="INVALID_REQUEST") from None
    limit = int(args.get("max_matches", 200))
    matches = []
    for f in list_tree(root, {"path": args.get("path"), "max_entries": 100_000})["entries"]:
        try:
            lines = (root / f).read_text("utf-8").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for i, line in enumerate(lines, 1):
            if rx.search(line):
                matches.append({"path": f, "line": i, "text": line[:500]})
                if len(matches) >= limit:
                    return {"matches": matches, "truncated": True}
    return {"matches": matches, "truncated": False}


def apply_diff(root: Path, diff: str) -> list[str]:
    """git apply the model's diff to the checkout; returns the touched paths."""
    touched = sorted({m for m in re.findall(r"^\+\+\+ b/(\S+)", diff, re.M)})
    if not touched or any(fnmatch.fnmatch(t, ".git/*") or t.startswith("/") or ".." in t.split("/") for t in touched):
        raise ToolFailed("the diff names no file, or a path outside the checkout", code="PATCH_INVALID")
    r = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=root, input=diff.encode(),
                       capture_output=True, timeout=60)
    if r.returncode != 0:
        raise ToolFailed(f"the diff does not apply: {r.stderr.decode('utf-8', 'replace')[:500]}", code="PATCH_INVALID")
    return touched


HANDLERS: dict[str, Callable[[Path, Mapping[str, Any]], dict[str, Any]]] = {
    "read_file": read_file, "list_tree": list_tree, "grep": grep}


def agent_tools(allowed_methods: list[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """The model's tool list: the grant's methods an agent acts with, schemas from the registry contracts."""
    from registry.contracts import default_registry

    reg = default_registry()
    tools = []
    for name in sorted(set(allowed_methods) & set(AGENT_METHODS)):
        if name == "submit_patch":
            params, desc = SUBMIT_SCHEMA, "Propose the change as a unified diff; ends the task."
        else:
            m = reg.method(name)
            params = {k: v for k, v in reg.schema(m.input).items() if k not in ("$schema", "$id", "title")}
            params["properties"] = {k: v for k, v in params.get("properties", {}).items() if k != "ref"}
            desc = m.summary
        tools.append({"type": "function", "function": {"name": name, "description": desc, "parameters": params}})
    return tools


# -- the client -------------------------------------------------------------------
def check_sdk(card: Mapping[str, Any]) -> str | None:
    """The installed version of the card's package, refused unless it is the pinned one.
    A Python package is read from this Python or from `sdk.install_dir` (a virtual
    environment); an npm package (`npm:<name>`) from `sdk.install_dir` (an npm prefix).
    An npm package without `install_dir` is not checked: None."""
    pkg, want = card["sdk"]["package"], card["sdk"]["version"]
    where_dir = card["sdk"].get("install_dir")
    if pkg.startswith("npm:") and where_dir is None:
        return None
    have = installed_version(pkg, where_dir)
    if have != want:
        where = f"{where_dir}" if where_dir else "this sandbox"
        raise RuntimeMismatch(f"the runtime card pins {pkg}=={want}; {where} has {have}",
                              details={"package": pkg, "pinned": want, "installed": have,
                                       **({"install_dir": where_dir} if where_dir else {})})
    return have


def installed_version(pkg: str, install_dir: str | None = None) -> str | None:
    """The version of `pkg` installed in this Python, in the virtual environment
    `install_dir` (read from its site-packages), or for `npm:<name>` in the npm prefix
    `install_dir` (its package.json); nothing of it is imported or run. None when absent."""
    if pkg.startswith("npm:"):
        try:
            meta = json.loads((Path(str(install_dir)) / "node_modules" / pkg[4:] / "package.json").read_text())
        except (OSError, ValueError):
            return None
        return str(meta.get("version")) if isinstance(meta, dict) and meta.get("version") else None
    if install_dir is None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None
    paths = [str(p) for p in sorted(Path(install_dir).glob("lib/python3*/site-packages"))]
    if not paths:
        return None
    want = re.sub(r"[-_.]+", "-", pkg).lower()
    for dist in metadata.distributions(path=paths):
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower() == want:
            return dist.version
    return None


def make_client(card: Mapping[str, Any], gateway: Any, socket: str) -> Any:
    import httpx2
    import openai

    host = card["endpoint"]["host"]

    def sign(request: Any) -> None:
        proof = gateway.proof(EGRESS_METHOD, {"host": host, "path": request.url.raw_path.decode("ascii"),
                                              "body_digest": digest_bytes(request.read())})
        if proof:
            request.headers["dome-call-proof"] = proof

    t = card.get("transport") or {}
    http = httpx2.Client(transport=httpx2.HTTPTransport(uds=socket), trust_env=False,
                         event_hooks={"request": [sign]}, timeout=float(t.get("timeout_s", 120)))
    return openai.OpenAI(api_key=gateway.token, base_url=f"http://{host}{card['endpoint'].get('base_path', '/v1')}",
                         http_client=http, max_retries=int(t.get("max_retries", 0)),
                         timeout=float(t.get("timeout_s", 120)))


def _gate_error(exc: Exception) -> DomeError:
    body = getattr(exc, "body", None)
    err = body.get("dome_error") if isinstance(body, Mapping) else None
    if isinstance(err, Mapping) and err.get("code"):
        return DomeError(str(err.get("message", "")), code=str(err["code"]), details=dict(err.get("details") or {}),
                         hints=list(err.get("hints") or []), retry="none")
    return DomeError(f"model call failed: {type(exc).__name__}: {str(exc)[:500]}", code="MODEL_CALL_FAILED",
                     retry="light")


def run(ctx: IntentContext) -> IntentResult:
    import openai

    card = check_card(ctx.action.get("card"))
    instructions = str(ctx.action.get("instructions") or "")
    check_sdk(card)
    if ctx.gateway is None:
        raise IntentFailed("the agent intent needs the attempt's grant", code="AGENT_UNAVAILABLE")
    socket = os.environ.get("DOME_EGRESS_SOCKET", IN_EGRESS)
    if not Path(socket).exists():
        raise IntentFailed("no egress gate in this sandbox (the run has no egress configuration)",
                           code="EGRESS_UNAVAILABLE", details={"socket": socket})
    if card.get("cli"):
        return run_cli(ctx, card, instructions, socket)
    client = make_client(card, ctx.gateway, socket)
    tools = agent_tools(ctx.gateway.profile.get("allowed_methods", []))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": card.get("system") or "You are a coding agent. Use the tools; finish with submit_patch."},
        {"role": "user", "content": instructions}]
    usage = {"tokens_in": 0, "tokens_out": 0, "calls": 0}
    extra = {k: card[k] for k in ("temperature", "seed") if k in card}
    touched: list[str] | None = None
    try:
        for turn in range(int(card.get("max_turns", 12))):
            ctx.token.check()
            try:
                resp = client.chat.completions.create(model=card["model"], messages=messages, tools=tools,
                                                      max_completion_tokens=int(card.get("max_output_tokens", 1024)),
                                                      **extra)
            except openai.APIError as exc:
                raise _gate_error(exc) from None
            usage["calls"] += 1
            if resp.usage is not None:
                usage["tokens_in"] += resp.usage.prompt_tokens
                usage["tokens_out"] += resp.usage.completion_tokens
            msg = resp.choices[0].message
            calls = msg.tool_calls or []
            messages.append({"role": "assistant", "content": msg.content or "",
                             **({"tool_calls": [c.model_dump() for c in calls]} if calls else {})})
            if not calls:
                raise IntentFailed("the model stopped without submitting a patch", code="AGENT_NO_PATCH",
                                   details={"turns": turn + 1, "last": (msg.content or "")[:500]})
            for c in calls:
                out = _call_tool(ctx.scratch, c.function.name, c.function.arguments, tools)
                if c.function.name == "submit_patch" and "touched" in out:
                    touched = out["touched"]
                messages.append({"role": "tool", "tool_call_id": c.id,
                                 "content": json.dumps(out)[:MAX_TOOL_OUTPUT]})
            ctx.progress(min(0.9, (turn + 1) / int(card.get("max_turns", 12))), f"turn {turn + 1}")
            if touched is not None:
                break
        else:
            raise IntentFailed("the agent used all its turns without submitting a patch", code="AGENT_NO_PATCH",
                               details={"max_turns": card.get("max_turns", 12)})
    except BaseException:
        client.close()
        try:  # the conversation so far is evidence of the failure too
            ctx.put_artifact(_transcript(card, messages), "application/json")
        except Exception:  # noqa: BLE001 - the original failure is what the attempt reports
            pass
        raise
    client.close()
    digest = ctx.put_artifact(_transcript(card, messages), "application/json")
    return IntentResult(summary={"model": card["model"], "runtime_id": card["runtime_id"], "touched": touched,
                                 "turns": usage["calls"]},
                        evidence=[{"kind": "agent:transcript", "digest": digest}] if digest else [],
                        metrics={"model_calls": usage["calls"], "model_tokens_in": usage["tokens_in"],
                                 "model_tokens_out": usage["tokens_out"]})


def run_cli(ctx: IntentContext, card: Mapping[str, Any], instructions: str, socket: str) -> IntentResult:
    """An agent CLI in the same slot: it edits the checkout; its model traffic goes
    shim -> gate; it may connect to the shim's port only. A gate refusal it ran
    into is the attempt's error when the CLI fails."""
    from ..egress_shim import EgressShim
    from .command import execute

    shim = EgressShim(gateway=ctx.gateway, host=card["endpoint"]["host"], socket=socket,
                      timeout=float((card.get("transport") or {}).get("timeout_s", 300))).start()
    base = f"http://127.0.0.1:{shim.port}{card['endpoint'].get('base_path', '/v1')}"
    env = {"OPENAI_BASE_URL": base, "OPENAI_API_BASE": base, "OPENAI_API_KEY": "dome-egress-gate",
           "DOME_AGENT_MODEL": card["model"], "DOME_AGENT_INSTRUCTIONS": instructions,
           **card["cli"].get("env", {})}
    argv = cli_argv(card, instructions)
    try:
        res = execute(ctx, argv, env, cwd=ctx.scratch, connect_ports=(shim.port,))
    finally:
        shim.stop()
    if res["exit_code"] != 0:
        if shim.refusals:
            err = shim.refusals[-1]
            raise DomeError(str(err.get("message", "")), code=str(err["code"]), details=dict(err.get("details") or {}))
        raise IntentFailed(f"the agent CLI exited with {res['exit_code']}", code="AGENT_CLI_FAILED",
                           details={"exit_code": res["exit_code"], "stderr_tail": res["stderr_tail"][-1024:]})
    return IntentResult(summary={"model": card["model"], "runtime_id": card["runtime_id"], "cli": card["cli"]["argv"][0],
                                 "stdout_tail": res["stdout_tail"][-1024:]},
                        evidence=res["logs"], metrics={"model_calls": shim.calls})


def cli_argv(card: Mapping[str, Any], instructions: str) -> list[str]:
    """The CLI's argv with `{instructions}` and `{model}` filled in (each argument
    stays one argument: no shell ever reads them)."""
    values = {"instructions": instructions, "model": card["model"]}
    return [re.sub(r"\{(instructions|model)\}", lambda m: values[m.group(1)], a) for a in card["cli"]["argv"]]


def _transcript(card: Mapping[str, Any], messages: list[dict[str, Any]]) -> bytes:
    return json.dumps({"model": card["model"], "messages": messages}, sort_keys=True).encode()


def _call_tool(root: Path, name: str, raw_args: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Run one tool call; a failure goes back to the model as {error}."""
    if name not in {t["function"]["name"] for t in tools}:
        return {"error": {"code": "OUT_OF_PROFILE", "message": f"{name!r} is not one of this grant's tools"}}
    try:
        args = json.loads(raw_args or "{}")
        if not isinstance(args, dict):
            raise ValueError("arguments are not an object")
        if name == "submit_patch":
            return {"applied": True, "touched": apply_diff(root, str(args.get("diff", "")))}
        return HANDLERS[name](root, args)
    except DomeError as exc:
        return {"error": exc.to_object()}
    except (ValueError, KeyError, TypeError, OSError) as exc:
        return {"error": {"code": "INVALID_REQUEST", "message": f"{type(exc).__name__}: {exc}"[:500]}}
