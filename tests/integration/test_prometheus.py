"""A real Prometheus (Debian's) scraping the live server every second with deploy/prometheus's rules: after a few
text and image requests it has evaluated the SLO recording rules, and every query of deploy/grafana's dashboard
runs against it without error; the latency histograms carry the modality mix."""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests import media
from tests.conftest import free_port
from tests.unit.deploy.test_monitoring_files import RULES, dashboard_queries

CONFIG = """
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["{rules}"]
scrape_configs:
  - job_name: tessera
    static_configs: [{{targets: ["{target}"]}}]
"""


@pytest.fixture(scope="module")
def prometheus(server, tmp_path_factory):
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: scripts/setup_venv.sh installs Debian's prometheus package"
    work: Path = tmp_path_factory.mktemp("prometheus")
    (work / "prometheus.yml").write_text(CONFIG.format(rules=RULES, target=urlsplit(server.base_url).netloc))
    port = free_port()
    with (work / "log").open("wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            raise AssertionError((work / "log").read_text())
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _query(prometheus: str, expr: str) -> list[dict]:
    resp = httpx.get(prometheus + "/api/v1/query", params={"query": expr}, timeout=10)
    body = resp.json()
    assert resp.status_code == 200, (expr, body)
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def _traffic(client) -> None:
    import io

    import soundfile as sf

    clip = io.BytesIO()
    sf.write(clip, media.speech("Thank you very much."), 16_000, format="WAV")
    for i in range(4):
        client.embeddings.create(model="minilm", input=f"a sentence, try {i}")
        if i < 2:
            client.audio.transcriptions.create(model="whisper", file=("a.wav", clip.getvalue()), temperature=0.1 * i)
        client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": f"Count to ten, try {i}."}], max_tokens=8
        )
        content = [
            {"type": "text", "text": "Describe it."},
            {"type": "image_url", "image_url": {"url": media.png_data_url(i)}},
        ]
        client.chat.completions.create(model="small", messages=[{"role": "user", "content": content}], max_tokens=4)
        time.sleep(1.2)  # a scrape between rounds, so rates have two samples


def test_prometheus_evaluates_the_slo_rules_on_live_metrics(prometheus, client):
    _traffic(client)
    deadline = time.monotonic() + 60
    found: dict[str, list[dict]] = {}
    wanted = ("tessera:ttft_seconds:p50_text", "tessera:ttft_seconds:p99_media", "tessera:tpot_seconds:p50")
    while time.monotonic() < deadline and len(found) < len(wanted):
        for rule in wanted:
            result = _query(prometheus, f'{rule}{{model="small"}}')
            # NaN: the rule's window held no new observation (a scrape came late under load): not a value yet.
            if rule not in found and result and not math.isnan(float(result[0]["value"][1])):
                found[rule] = result
        if len(found) < len(wanted):  # keep every rule's window fed while waiting: text and media alike
            client.chat.completions.create(
                model="small", messages=[{"role": "user", "content": "Count to three."}], max_tokens=4
            )
            content = [
                {"type": "text", "text": "Describe it."},
                {"type": "image_url", "image_url": {"url": media.png_data_url(int(time.monotonic()) % 7)}},
            ]
            client.chat.completions.create(model="small", messages=[{"role": "user", "content": content}], max_tokens=4)
        time.sleep(1)
    assert set(found) == set(wanted), f"rules without a value after traffic: {set(wanted) - set(found)}"
    assert 0 < float(found["tessera:ttft_seconds:p50_text"][0]["value"][1]) < 60
    mixes = {r["metric"]["modalities"] for r in _query(prometheus, "tessera_time_to_first_token_seconds_count")}
    assert {"text", "text+image"} <= mixes
    assert _query(prometheus, 'tessera:error_ratio:rate5m{endpoint="chat",model="small"}')
    alerts = httpx.get(prometheus + "/api/v1/rules", params={"type": "alert"}, timeout=10).json()
    assert len(alerts["data"]["groups"][0]["rules"]) == 5
    assert all(r["health"] == "ok" for g in alerts["data"]["groups"] for r in g["rules"])


def test_every_dashboard_query_runs_on_live_metrics(prometheus):
    empty = [expr for expr in dashboard_queries() if not _query(prometheus, expr)]
    # The traffic above gives every panel a value but the grounding pass ratio (no scored answer on the shared
    # server's small pool) and the refusals, which appear once a request is refused.
    assert all("grounding" in e or "refused" in e for e in empty), empty


def test_every_rule_is_healthy(prometheus):
    groups = httpx.get(prometheus + "/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == 10
    assert [r["name"] for r in rules if r["health"] != "ok"] == []
