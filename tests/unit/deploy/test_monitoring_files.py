"""deploy/prometheus's SLO rules pass `promtool check rules`, and every query of deploy/grafana's dashboard is valid
PromQL (promtool checks each as a recording rule) over metrics the server exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import REPO

RULES = REPO / "deploy/prometheus/tessera-rules.yml"
DASHBOARD = REPO / "deploy/grafana/tessera-slo.json"


def _promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: scripts/setup_venv.sh installs Debian's prometheus package"
    return found


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def test_the_rules_pass_promtool():
    out = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 10 rules found" in out.stdout


def test_every_dashboard_query_is_valid_promql(tmp_path: Path):
    queries = dashboard_queries()
    assert len(queries) >= 10
    checked = {
        "groups": [{"name": "dashboard", "rules": [{"record": f"q:{i}", "expr": q} for i, q in enumerate(queries)]}]
    }
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(checked))
    out = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_rules_and_dashboard_name_only_exported_metrics():
    from serving.metrics import ServerMetrics

    exported = {m.name for m in ServerMetrics().registry.collect()}  # Tessera's own histograms and counters
    exported |= {"tessera_grounding_verdicts", "tessera_engine_kv_cache_usage_ratio", "tessera_refused_requests"}
    recorded = {r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "record" in r}
    text = RULES.read_text() + "\n".join(dashboard_queries())
    for name in set(re.findall(r"\b(tessera(?:_[a-z0-9]+)+|tessera:[a-z0-9_:]+)", text)):
        base = re.sub(r"_(bucket|total|count|sum)$", "", name)
        assert name in recorded or base in exported, f"{name} is neither exported nor recorded"
