"""A tenant's routing policy on the live server: `cascade` escalates an answer grounding cannot vouch for and links
both attempts on the receipts; text and streams are placed by the heuristic; the admin API refuses what it lacks."""

from __future__ import annotations

import httpx

from tests.admin import ADMIN, new_tenant
from tests.integration.test_guardrail import _image_question, _receipt, _red_circle, _requests_metered
from tests.openai_wire import openai_client


def test_a_cascade_escalates_an_image_answer_the_small_pool_cannot_ground_and_links_the_attempts(server):
    # The small pool's weights are random: what it says of the circle is not what the label head sees, so the
    # cascade cannot keep it, and the large pool answers instead.
    key = new_tenant(server, "cascade", routing_policy="cascade")
    client = openai_client(server.v1, key, timeout=180)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=_image_question(_red_circle()), max_tokens=16, temperature=0
    )
    answer = raw.parse()
    assert answer.model == "large"  # the pool whose answer is returned
    assert raw.headers["x-tessera-route"] == "cascade: escalated from small (grounding failed)"
    assert "grounding" not in answer.model_dump()  # the tenant's guardrail is `score`: no verdict on the response

    second = _receipt(server, key, answer.id)
    assert second["route_reason"] == "cascade: escalated from small (grounding failed)"
    first_id = second["attempt_of"]
    assert first_id
    assert first_id != answer.id
    first = _receipt(server, key, first_id)
    assert (first["model"], first["route_reason"], first["attempt_of"]) == ("small", "cascade: first attempt", None)
    assert first["grounding_passed"] is False  # checked, whatever the tenant's guardrail
    assert first["followed_by"] == [
        {"request_id": answer.id, "model": "large", "cost_micros": second["cost_micros"], "status": "completed"}
    ]
    assert first["cost_micros"] > 0
    assert second["cost_micros"] > 0
    assert _requests_metered(server, key) == 2  # both attempts ran on an engine, and the tenant pays for both


def test_a_cascade_places_text_and_streams_by_the_heuristic(server):
    key = new_tenant(server, "cascade", routing_policy="cascade")
    headers = {"authorization": f"Bearer {key}"}
    with httpx.Client(timeout=180) as http:
        text = http.post(
            f"{server.v1}/chat/completions",
            headers=headers,
            json={"model": "auto", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        )
        assert text.status_code == 200, text.text
        assert text.json()["model"] == "small"
        assert text.headers["x-tessera-route"] == "cascade: simple text, placed by the heuristic"
        body = {"model": "auto", "messages": _image_question(_red_circle()), "max_tokens": 2, "stream": True}
        with http.stream("POST", f"{server.v1}/chat/completions", headers=headers, json=body) as streamed:
            assert streamed.status_code == 200
            assert streamed.headers["x-tessera-route"] == "cascade: simple stream, placed by the heuristic"
            assert any(line.startswith("data: [DONE]") for line in streamed.iter_lines())
    assert _requests_metered(server, key) == 2  # one attempt each


def test_static_policies_and_refusals(server):
    key = new_tenant(server, "strong", routing_policy="strongest")
    client = openai_client(server.v1, key, timeout=180)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert (raw.parse().model, raw.headers["x-tessera-route"]) == ("large", "policy strongest")
    named = client.chat.completions.with_raw_response.create(
        model="small", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert (named.parse().model, named.headers["x-tessera-route"]) == ("small", "explicit")  # names are honoured

    tenants = httpx.get(f"{server.base_url}/admin/tenants", headers=ADMIN).json()["data"]
    some = tenants[0]["id"]
    refused = httpx.put(
        f"{server.base_url}/admin/tenants/{some}/quota", headers=ADMIN, json={"routing_policy": "cheap"}
    )
    assert refused.status_code == 400
    assert "routing_policy" in refused.text


def test_the_router_policy_places_auto_by_the_fitted_router_and_says_why(server):
    # The shared server reads a router (conftest) that gives the small pool 0.95 on text and 0.05 on images.
    key = new_tenant(server, "routed", routing_policy="router")
    client = openai_client(server.v1, key, timeout=180)
    text = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert (text.parse().model, text.headers["x-tessera-route"]) == ("small", "router: p(weak right) 0.95 >= 0.50")
    image = client.chat.completions.with_raw_response.create(
        model="auto", messages=_image_question(_red_circle()), max_tokens=2
    )
    assert (image.parse().model, image.headers["x-tessera-route"]) == ("large", "router: p(weak right) 0.05 < 0.50")
    receipt = _receipt(server, key, image.parse().id)
    assert receipt["route_reason"] == "router: p(weak right) 0.05 < 0.50"
    named = client.chat.completions.with_raw_response.create(
        model="small", messages=_image_question(_red_circle()), max_tokens=2
    )
    assert named.parse().model == "small"  # a named pool is honoured under every policy
