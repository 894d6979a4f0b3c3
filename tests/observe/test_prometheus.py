"""A real Prometheus server scrapes `dome serve` while `dome run` runs, and answers
queries about attempts by outcome and the gateway's latency histogram."""
from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from tests.observe.helpers import TOKEN, dome_serve, free_port, get, start_run, stop, wait_until
from tests.runloop.conftest import cmd_task, write_queue


def _prometheus() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.fail("the Debian package prometheus is required (scripts/setup.sh installs it)")
    return exe


def _query(prom: str, q: str) -> list[dict]:
    status, body = get(f"{prom}/api/v1/query?query={urllib.parse.quote(q)}", token=None)
    assert status == 200, body
    data = json.loads(body)
    assert data["status"] == "success", data
    return data["data"]["result"]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_prometheus_scrapes_dome_serve_during_a_run(git_repo, ops_root, tmp_path: Path) -> None:
    q = write_queue(tmp_path, git_repo, [cmd_task("a", "sleep 1; echo a > a.txt"),
                                         cmd_task("b", "sleep 1; echo b > b.txt"),
                                         cmd_task("bad", "exit 3", outputs=())],
                    scheduling={"endgame_max_duplicates": 0, "default_max_attempts": 1},
                    if_tasks_fail="promote_rest")
    with dome_serve(ops_root) as serve:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN)
        port = free_port()
        target = serve.removeprefix("http://")
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: dome\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
            f"    authorization: {{type: Bearer, credentials_file: '{token_file}'}}\n")
        prom_proc = subprocess.Popen([_prometheus(), f"--config.file={tmp_path / 'prometheus.yml'}",
                                      f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        prom = f"http://127.0.0.1:{port}"
        try:
            def ready() -> bool:
                assert prom_proc.poll() is None, prom_proc.stderr.read().decode()[-2000:]
                try:
                    return get(prom + "/-/ready", token=None, timeout=2)[0] == 200
                except OSError:
                    return False
            wait_until(ready, 60, "prometheus to start")
            run = start_run(q, ops_root)
            out, err = run.communicate(timeout=120)
            assert run.returncode in (0, 7), err[-3000:]
            # the scrape after the run's last event: Prometheus saw the target up and the attempts
            up = wait_until(lambda: [r for r in _query(prom, 'up{job="dome"}') if r["value"][1] == "1"],
                            30, "the target to be up")
            assert up
            outcomes = wait_until(lambda: {r["metric"]["outcome"]: float(r["value"][1])
                                           for r in _query(prom, "dome_attempts_total")}
                                  if len(_query(prom, "dome_attempts_total")) >= 2 else None,
                                  30, "attempts by outcome")
            assert outcomes.get("succeeded") == 2.0 and sum(v for k, v in outcomes.items() if k != "succeeded") >= 1
            p95 = _query(prom, "histogram_quantile(0.95, sum by (le) (dome_gateway_call_seconds_bucket))")
            assert p95 and 0 < float(p95[0]["value"][1]) < 60
            calls = _query(prom, "sum(dome_gateway_call_seconds_count)")
            assert float(calls[0]["value"][1]) >= 4
            steps = {r["metric"]["step"] for r in _query(prom, "dome_integration_step_seconds_count")}
            assert {"verify", "apply", "validate", "gate"} <= steps
        finally:
            stop(prom_proc, grace=15)


def test_serve_refuses_without_the_token_and_refuses_writes(ops_root) -> None:
    import urllib.request
    with dome_serve(ops_root) as serve:
        assert get(serve + "/metrics", token=None)[0] == 401
        assert get(serve + "/metrics", token="wrong")[0] == 401
        assert get(serve + "/runs.json")[0] == 200
        for cookie, want in ((f"dome_serve={TOKEN}", 200), ("dome_serve=wrong", 401), (f"other={TOKEN}", 401)):
            req = urllib.request.Request(serve + "/runs.json", headers={"Cookie": cookie})
            try:
                status = urllib.request.urlopen(req, timeout=10).status
            except urllib.error.HTTPError as exc:
                status = exc.code
            assert status == want, cookie
        req = urllib.request.Request(serve + "/runs.json", data=b"{}", method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError("a POST was served")
        except urllib.error.HTTPError as exc:
            assert exc.code == 405
