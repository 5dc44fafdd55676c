"""The README's batch example, run as written against the live server (only the client's base URL and key are the
test server's): it uploads `requests.jsonl`, waits for the batch and prints its output lines."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.conftest import API_KEY, REPO


def _readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)


def test_the_readme_batch_example_runs(server, tmp_path):
    chat, batch = _readme_blocks()[:2]
    assert "client.batches.create" in batch
    setup = chat.split("stream = client")[0]  # the imports and the client, as the README makes them
    setup = setup.replace("http://127.0.0.1:8000/v1", server.v1).replace('"sk-tsr-…"', repr(API_KEY))
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
