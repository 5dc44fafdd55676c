"""The README's examples, run as written against the live server (only the client's base URL and key are the test
server's): the batch example uploads `requests.jsonl`, waits for the batch and prints its output lines; the
embeddings and speech example embeds two texts and prints the transcript of `clip.wav`."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.conftest import API_KEY, REPO


def _readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)


def _block(needle: str) -> str:
    found = [b for b in _readme_blocks() if needle in b]
    assert len(found) == 1, f"the README has {len(found)} python blocks with {needle!r}"
    return found[0]


def _setup(server) -> str:
    """The imports and the client, as the README's first example makes them."""
    setup = _readme_blocks()[0].split("stream = client")[0]
    return setup.replace("http://127.0.0.1:8000/v1", server.v1).replace('"sk-tsr-…"', repr(API_KEY))


def test_the_readme_embeddings_and_speech_example_runs(server, tmp_path):
    import soundfile as sf

    from tests.media import speech

    example = _block("client.embeddings.create")
    sf.write(tmp_path / "clip.wav", speech("Thank you very much."), 16_000, subtype="PCM_16")
    ran = subprocess.run(
        [sys.executable, "-c", _setup(server) + example + "\nprint(len(vectors.data))\n"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    transcript, count = ran.stdout.strip().splitlines()[-2:]
    assert "thank you" in transcript.lower()
    assert count == "2"


def test_the_readme_batch_example_runs(server, tmp_path):
    batch = _block("client.batches.create")
    setup = _setup(server)
    lines = [
        {
            "custom_id": f"q{n}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "small", "max_tokens": 4, "messages": [{"role": "user", "content": f"Say {n}."}]},
        }
        for n in range(3)
    ]
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    ran = subprocess.run(
        [sys.executable, "-c", setup + batch], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    printed = [json.loads(line) for line in ran.stdout.splitlines() if line.strip()]
    assert sorted(p["custom_id"] for p in printed) == ["q0", "q1", "q2"]
    assert all(p["response"]["status_code"] == 200 for p in printed)
