"""One trace per request across the gateway and the replica: the gateway's server span holds its steps (routing,
quota, admission, media, the engine call with its first token, the usage write), the replica's `llm_request` span
(vLLM, `--otlp-traces-endpoint`) is a child of the engine span, and the trace id is in the response header and on
the receipt. A client's own `traceparent` is continued."""

from __future__ import annotations

import httpx

from tests import media
from tests.conftest import API_KEY

AUTH = {"authorization": f"Bearer {API_KEY}"}
GATEWAY_STEPS = {
    "POST /v1/chat/completions",
    "tessera.route",
    "tessera.media.fetch",
    "tessera.quota.reserve",
    "tessera.admission.wait",
    "tessera.media",
    "tessera.media.decode",
    "tessera.media.encode",
    "tessera.usage.open",
    "tessera.engine",
    "tessera.usage.write",
}


def render(spans) -> str:
    """The trace as an indented tree, for the docs and for a failing assertion."""
    children: dict[str, list] = {}
    for s in spans:
        children.setdefault(s.parent_id, []).append(s)
    ids = {s.span_id for s in spans}
    lines: list[str] = []

    def walk(span, depth: int) -> None:
        extra = f" [{span.service}]" if span.service != "tessera" else ""
        events = f" events={list(span.events)}" if span.events else ""
        lines.append("  " * depth + span.name + extra + events)
        for child in children.get(span.span_id, []):
            walk(child, depth + 1)

    for root in (s for s in spans if s.parent_id not in ids):
        walk(root, 0)
    return "\n".join(lines)


def test_one_trace_holds_the_gateway_steps_and_the_replica_span(gateway, otlp_receiver):
    content = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": media.png_data_url(3)}},
    ]
    body = {"model": "small", "messages": [{"role": "user", "content": content}], "max_tokens": 4}
    resp = httpx.post(gateway.v1 + "/chat/completions", headers=AUTH, json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    trace_id = resp.headers["x-tessera-trace-id"]
    spans = otlp_receiver.trace(trace_id, wait_for={*GATEWAY_STEPS, "llm_request"}, timeout_s=60)
    tree = render(spans)
    names = {s.name for s in spans}
    assert GATEWAY_STEPS | {"llm_request"} <= names, tree
    by_name = {s.name: s for s in spans}
    root, engine, replica = by_name["POST /v1/chat/completions"], by_name["tessera.engine"], by_name["llm_request"]
    assert root.parent_id == ""  # the client sent no traceparent
    assert engine.parent_id == root.span_id, tree
    assert replica.parent_id == engine.span_id, tree
    assert replica.service == "vllm-small"
    assert "first_token" in engine.events
    assert by_name["tessera.media.encode"].attributes["tessera.medium"] == "image"
    receipt = httpx.get(f"{gateway.v1}/usage/{resp.json()['id']}", headers=AUTH, timeout=30).json()
    assert receipt["trace_id"] == trace_id
    print("\n" + tree)


def test_a_clients_traceparent_is_continued(gateway, otlp_receiver):
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {**AUTH, "traceparent": f"00-{trace_id}-{parent}-01"}
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    resp = httpx.post(gateway.v1 + "/chat/completions", headers=headers, json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-tessera-trace-id"] == trace_id
    spans = otlp_receiver.trace(trace_id, wait_for={"POST /v1/chat/completions", "tessera.engine"}, timeout_s=30)
    root = next(s for s in spans if s.name == "POST /v1/chat/completions")
    assert root.parent_id == parent
