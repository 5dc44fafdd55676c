"""The `router` policy's fitted model: features read from the request alone, stable across processes, stored and
read back as JSON, and obeyed by `route` with its probability in the reason."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from serving.prompt_router import (
    DEFAULT_BUCKETS,
    CascadeGate,
    PromptRouter,
    feature_count,
    load_router,
    router_features,
    save_router,
    slice_of,
)
from serving.routing import CASCADE_FIRST, PoolView, RouteRequest, RoutingPolicy, route
from tests.stubs import slice_router

SMALL = PoolView("small", [], ["text", "image", "audio"], 0, lambda: 1.0)
LARGE = PoolView("large", [], ["text", "image"], 1, lambda: 1.0)


def test_slices_come_from_the_requests_media():
    assert slice_of({"text"}) == "text"
    assert slice_of({"text", "image"}) == "image"
    assert slice_of({"audio"}) == "audio"
    assert slice_of({"text", "image", "audio"}) == "image+audio"


def test_features_hash_words_and_pairs_the_same_in_every_process():
    row = router_features("image", "How many shapes are there?", 80, False)
    assert len(row) == feature_count(DEFAULT_BUCKETS)
    assert row[:4] == [0.0, 1.0, 0.0, 0.0]
    assert 1 <= sum(row[4 : 4 + DEFAULT_BUCKETS]) <= 9  # five words and four pairs, some sharing a slot
    assert row[-1] == 1.0
    assert router_features("image", "how MANY shapes are there", 80, False) == row  # case and punctuation aside
    code = (
        "from serving.prompt_router import router_features as f;"
        "print(f('image', 'How many shapes are there?', 80, False))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(other.stdout) == row  # another process, another string-hash seed: the same slots
    with pytest.raises(ValueError, match="unknown slice"):
        router_features("video", "hi", 1, False)


def test_a_router_round_trips_through_its_file_and_refuses_what_is_not_one(tmp_path):
    router = slice_router(text=0.9, image=0.2)
    path = tmp_path / "models" / "router.json"
    save_router(router, path)
    back = load_router(path)
    assert back == router
    assert back.p_weak_right("text", "anything", 10, False) == pytest.approx(0.9)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "weights": data["weights"][:-1]}))
    with pytest.raises(ValueError, match=r"router\.json.*weights"):
        load_router(path)
    path.write_text(json.dumps({**data, "format": "other"}))
    with pytest.raises(ValueError, match="format"):
        load_router(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_router(tmp_path / "absent.json")
    with pytest.raises(ValueError, match="probability"):
        PromptRouter(router.weights, threshold=3.0)


def test_route_follows_the_router_and_names_its_probability():
    policy = RoutingPolicy(router=slice_router(text=0.95, image=0.05))
    text = RouteRequest("auto", {"text"}, 10, "Explain step by step why", policy="router")
    assert route(text, [SMALL, LARGE], policy) == ("small", "router: p(weak right) 0.95 >= 0.50")  # not the heuristic
    image = RouteRequest("auto", {"text", "image"}, 80, "hi", policy="router")
    assert route(image, [SMALL, LARGE], policy) == ("large", "router: p(weak right) 0.05 < 0.50")
    audio = RouteRequest("auto", {"text", "audio"}, 80, "hi", policy="router")
    assert route(audio, [SMALL, LARGE], policy) == ("small", "simple")  # one able pool: nothing to choose
    named = RouteRequest("large", {"text"}, 10, "hi", policy="router")
    assert route(named, [SMALL, LARGE], policy) == ("large", "explicit")
    busy = PoolView("small", [], ["text", "image", "audio"], 0, lambda: 0.0)
    assert route(text, [busy, LARGE], policy) == ("large", "router: p(weak right) 0.95 >= 0.50, small saturated")


def test_a_fitted_cascade_places_text_and_streams_by_the_router_when_its_gate_says_so(tmp_path):
    by_router = dataclasses.replace(slice_router(text=0.2), cascade=CascadeGate("label_head", 0.7, text="router"))
    save_router(by_router, tmp_path / "router.json")
    assert load_router(tmp_path / "router.json") == by_router
    policy = RoutingPolicy(router=by_router)
    text = RouteRequest("auto", {"text"}, 10, "hello", policy="cascade")
    placed = ("large", "cascade: text placed by the router, p(weak right) 0.20 < 0.50")
    assert route(text, [SMALL, LARGE], policy) == placed
    stream = RouteRequest("auto", {"text", "image"}, 10, "hello", policy="cascade", streamed=True)
    assert route(stream, [SMALL, LARGE], policy)[1].startswith("cascade: stream placed by the router")
    image = RouteRequest("auto", {"text", "image"}, 10, "hello", policy="cascade")
    assert route(image, [SMALL, LARGE], policy) == ("small", CASCADE_FIRST)  # media still cascade
    by_heuristic = RoutingPolicy(router=dataclasses.replace(by_router, cascade=CascadeGate("label_head", 0.7)))
    assert route(text, [SMALL, LARGE], by_heuristic) == ("small", "cascade: simple text, placed by the heuristic")
    with pytest.raises(ValueError, match="evidence"):
        CascadeGate("gut feeling", 0.5)
    with pytest.raises(ValueError, match="places text"):
        CascadeGate("judge", 0.5, text="coin")


def test_without_a_router_the_policy_falls_back_to_the_heuristic_and_says_so():
    req = RouteRequest("auto", {"text"}, 10, "hello", policy="router")
    assert route(req, [SMALL, LARGE]) == ("small", "router: none loaded, simple by the heuristic")


def test_the_server_reads_the_router_beside_its_checkpoints_or_where_it_is_told(tmp_path):
    from config.settings import Settings
    from tessera.state import _router

    models = tmp_path / "models"
    assert _router(Settings(data_dir=tmp_path, models_dir=models)) is None
    save_router(slice_router(text=0.7), models / "router.json")
    assert _router(Settings(data_dir=tmp_path, models_dir=models)) == slice_router(text=0.7)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match=r"bad\.json"):
        _router(Settings(data_dir=tmp_path, models_dir=models, router_path=bad))
