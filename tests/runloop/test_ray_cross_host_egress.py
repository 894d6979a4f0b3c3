"""Agent workers on another host, for real: the Ray node in its own network and mount namespace
(the cluster of test_ray_cross_host.py), the scripted model endpoint on the coordinator's loopback
only. The agents' model calls (the SDK in the worker, and an agent CLI through the in-sandbox
endpoint) leave their sandboxes through the node's relay and the coordinator's TLS listener to the
egress gate, which authorises and meters each one; the run is promoted and verifies. On that node nothing reaches the endpoint directly, and calls without a valid grant are
refused by the gate behind the TLS listener. Needs root (ip netns, unshare, mount), Ray, bubblewrap.
"""
from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys

import pytest

from tests.agents.helpers import HOST, MODEL, load_scripted_llm
from tests.agents.test_agent_run import CLI, SCRIPT, _agent_task
from tests.attacks import attack
from tests.conftest import dome_cli
from tests.runloop.conftest import cmd_task, write_queue
from tests.runloop.ray_netns import can_run
from tests.runloop.test_ray_cross_host import RESOURCE, cluster  # noqa: F401 - the namespaced node

pytestmark = [pytest.mark.slow, pytest.mark.skipif(can_run() is not None, reason=str(can_run()))]

KEY_ENV = "DOME_TEST_MODEL_KEY"

# a command worker in its sandbox on the node: straight to the endpoint, then to the gate without a
# valid grant (none, a forged one, the attempt's own grant without its key's proof)
SANDBOX_PROBE = r'''
import json, socket, sys
sys.path.insert(0, "/mnt/dome")  # dome's packages on the node (ray_netns.NODE_SCRIPT)
from registry import toolprofile as tp
out = {}
for name, addr in (("loopback", ("127.0.0.1", %(port)d)), ("coordinator", (%(head)r, %(port)d))):
    try:
        socket.create_connection(addr, timeout=3).close()
        out[name] = "connected"
    except OSError as exc:
        out[name] = type(exc).__name__
def via_gate(token):
    body = json.dumps({"model": %(model)r, "messages": [{"role": "user", "content": "[script:fix-readme] hi"}]}).encode()
    auth = b"Authorization: Bearer " + token.encode() + b"\r\n" if token else b""
    s = socket.socket(socket.AF_UNIX); s.settimeout(30); s.connect("/dome/egress.sock")
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %(host)s\r\n" + auth + b"Content-Length: "
              + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    data = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        data += c
    head, _, rest = data.partition(b"\r\n\r\n")
    return {"status": head.split(b" ")[1].decode(), "code": json.loads(rest)["error"]["code"]}
token = tp.envelope_to_token(json.load(open("/dome/spawn.json"))["grant"])
out["no_grant"] = via_gate(None)
out["forged"] = via_gate(token[:-8] + "AAAAAAAA")
out["no_proof"] = via_gate(token)
open("probe.json", "w").write(json.dumps(out, sort_keys=True) + "\n")
'''

# an unsandboxed Ray worker on the node: can it reach the endpoint without the gate?
NODE_PROBE = r"""
import json, socket, sys, ray
ray.init(log_to_driver=False)
@ray.remote(num_cpus=1, resources={sys.argv[1]: 1})
def probe(addrs):
    import socket, ray
    out = {}
    for host, port in addrs:
        try:
            socket.create_connection((host, port), timeout=3).close()
            out[host] = "connected"
        except OSError as exc:
            out[host] = type(exc).__name__
    return {"ip": ray.util.get_node_ip_address(), "reached": out}
port = int(sys.argv[2])
print(json.dumps(ray.get(probe.remote([("127.0.0.1", port), (sys.argv[3], port)]), timeout=120)))
"""


def _events(ops, run_id):
    return [json.loads(p.read_text()) for p in (ops / "runs" / run_id / "events").glob("event.*.json")]


@pytest.mark.timeout(600)
@attack("remote-egress-bypass")
def test_an_agent_on_the_other_node_calls_the_model_only_through_the_metered_gate(cluster, git_repo, tmp_path):
    llm = load_scripted_llm()(SCRIPT).start()
    key = "sk-dome-test-" + secrets.token_hex(20)
    try:
        socket.create_connection(("127.0.0.1", llm.port), timeout=3).close()  # reachable here, on loopback
        egress = tmp_path / "egress.json"
        egress.write_text(json.dumps({"routes": {HOST: {
            "upstream": f"http://127.0.0.1:{llm.port}", "key_env": KEY_ENV,
            "prices": {MODEL: {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 4.0}}}}}))
        probe = SANDBOX_PROBE % {"port": llm.port, "head": cluster["head_ip"], "host": HOST, "model": MODEL}
        tasks = [_agent_task("fix-readme", "fix-readme"),  # the SDK in the worker
                 # an agent CLI: its SDK talks to the in-sandbox endpoint, which forwards to the gate
                 _agent_task("cli-agent", "cli", cli={"argv": ["python3", "-c", CLI],
                                                      "env": {"UPSTREAM_PORT": str(llm.port)}}),
                 cmd_task("probe", "python3 - <<'EOF'\n" + probe + "\nEOF", max_attempts=1)]
        q = write_queue(tmp_path, git_repo, tasks, scheduling={"max_parallel": 3, "endgame_max_duplicates": 0})
        ops = tmp_path / "ops"
        env = {**cluster["env"], "DOME_RAY_RESOURCES": json.dumps({RESOURCE: 1}), KEY_ENV: key}
        r = dome_cli("run", str(q), "--ops-root", str(ops), "--executor", "ray", "--gateway-bind",
                     cluster["head_ip"], "--egress", str(egress), "--json", env=env, timeout=400)
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["status"] == "promoted", r.stdout[-3000:] + r.stderr[-3000:]
        v = dome_cli("verify", out["run_id"], "--ops-root", str(ops), "--repo", str(git_repo), timeout=300)
        assert v.returncode == 0, v.stdout + v.stderr
        # an unsandboxed worker on that node cannot reach the endpoint either: it lives on the coordinator's loopback
        pr = subprocess.run([sys.executable, "-c", NODE_PROBE, RESOURCE, str(llm.port), cluster["head_ip"]],
                            env=cluster["env"], capture_output=True, text=True, timeout=300)
        assert pr.returncode == 0, pr.stderr[-3000:]
        node = json.loads(pr.stdout.strip().splitlines()[-1])
    finally:
        llm.stop()
    events = _events(ops, out["run_id"])
    assert {e["payload"]["executor"] for e in events if e["topic"] == "task.dispatched"} == {"ray"}
    show = ["git", "show"]
    readme = subprocess.run([*show, "refs/heads/dome/out:README.md"], cwd=git_repo, capture_output=True, text=True,
                            check=True).stdout
    assert readme.strip() == "hello, agents"  # the agent's patch, promoted
    cli_md = subprocess.run([*show, "refs/heads/dome/out:CLI.md"], cwd=git_repo, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert cli_md[0] == "written by an agent CLI" and cli_md[1] != "direct: connected", cli_md
    # every model call the endpoint saw is one metered model.call of the agent's node, keyed by the coordinator
    calls = [e for e in events if e["topic"] == "model.call"]
    assert len(calls) == len(llm.requests) == 5
    assert sorted(c["node_id"] for c in calls) == ["cli-agent"] + ["fix-readme"] * 4
    assert all(c["payload"]["tokens_in"] > 0 and c["payload"]["cost_micros"] > 0 for c in calls)
    assert all(r["headers"]["authorization"] == f"Bearer {key}" for r in llm.requests)
    assert key.encode() not in b"".join(p.read_bytes() for p in ops.rglob("*") if p.is_file())
    # the sandboxed probe on the node: no way to the endpoint but the gate, and the gate refused it
    res = json.loads(subprocess.run([*show, "refs/heads/dome/out:probe.json"], cwd=git_repo, capture_output=True,
                                    text=True, check=True).stdout)
    assert res["loopback"] != "connected" and res["coordinator"] != "connected", res
    assert res["no_grant"] == {"status": "401", "code": "GRANT_MISSING"}, res
    assert res["forged"]["status"] == "401" and res["forged"]["code"].startswith("GRANT_"), res
    assert res["no_proof"] == {"status": "401", "code": "GRANT_PROOF_MISSING"}, res
    assert [e["payload"]["code"] for e in events if e["topic"] == "egress.refused"] == ["GRANT_MISSING"]
    assert len([e for e in events if e["topic"] == "grant.rejected"]) >= 2  # the forged grant, the one without a proof
    assert node["ip"] == cluster["node_ip"]
    assert node["reached"] == {"127.0.0.1": "ConnectionRefusedError", cluster["head_ip"]: "ConnectionRefusedError"}
