"""An embedding pool on two `vllm serve --runner pooling` replicas behind a gateway: requests spread over both,
the vectors are the model's, and when one replica is killed every request still succeeds on the other; once it is
back it is readmitted."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from tests.conftest import API_KEY
from tests.openai_wire import openai_client

TEXTS = [f"Sentence number {i} about the fleet." for i in range(24)]


def _picks(gateway) -> dict[str, float]:
    text = httpx.get(gateway.base_url + "/metrics", timeout=10).text
    found = re.findall(r'tessera_replica_picks_total\{model="minilm",replica="([^"]+)"\} ([0-9.e+]+)', text)
    return {name: float(n) for name, n in found}


def _embed_all(client, texts):
    with ThreadPoolExecutor(max_workers=6) as pool:
        return list(pool.map(lambda t: client.embeddings.create(model="minilm", input=t), texts))


def test_embeddings_spread_over_replicas_and_match_the_model(gateway, embedding_replicas):
    from grounding.models import MiniLMEmbedder, default_minilm_dir

    client = openai_client(gateway.v1, API_KEY, timeout=60)
    before = _picks(gateway)
    answers = _embed_all(client, TEXTS)
    after = _picks(gateway)
    assert set(after) == {r.url.removeprefix("http://") for r in embedding_replicas}
    assert all(after[name] - before.get(name, 0) > 0 for name in after), (before, after)
    reference = MiniLMEmbedder(default_minilm_dir())
    try:
        expected = reference.embed(TEXTS)
    finally:
        reference.close()
    got = np.array([a.data[0].embedding for a in answers], dtype=np.float32)
    assert np.abs(got - expected).max() < 1e-5


def test_a_killed_embedding_replica_fails_over_and_is_readmitted(gateway, embedding_replicas):
    client = openai_client(gateway.v1, API_KEY, timeout=60)
    victim, survivor = embedding_replicas
    victim.kill()
    try:
        answers = _embed_all(client, TEXTS)  # the first one sent to the dead replica is retried on the other
        assert [len(a.data[0].embedding) for a in answers] == [384] * len(TEXTS)
    finally:
        victim.start()
        victim.wait_ready()
    name = victim.url.removeprefix("http://")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # ejected replicas are probed with backoff (at most 8 s apart)
        before = _picks(gateway).get(name, 0)
        _embed_all(client, TEXTS[:8])
        if _picks(gateway).get(name, 0) > before:
            break
        time.sleep(1)
    else:
        raise AssertionError(f"replica {name} was not readmitted within 60 s")
    assert survivor.proc is not None
    assert survivor.proc.poll() is None
