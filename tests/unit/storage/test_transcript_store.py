"""The transcription results cache on SQLite and PostgreSQL: a tenant's own, keyed by everything that changes the
transcript, and forgotten after its days."""

from __future__ import annotations

from datetime import timedelta

from storage.transcripts import TranscriptStore, transcript_key


def test_a_transcript_is_found_by_its_tenant_and_key_alone(db, clock):
    store = TranscriptStore(db, keep_days=7, clock=clock)
    key = transcript_key("t1", "hash", "whisper", "transcriptions", "", "", "json")
    store.put(key, "t1", '{"text": "hello"}', audio_ms=2500, output_tokens=3)
    hit = store.get(key, "t1")
    assert hit is not None
    assert (hit.body, hit.audio_ms, hit.output_tokens) == ('{"text": "hello"}', 2500, 3)
    assert store.get(key, "t2") is None  # another tenant never sees it, even with the same key
    for other in (
        transcript_key("t2", "hash", "whisper", "transcriptions", "", "", "json"),
        transcript_key("t1", "other", "whisper", "transcriptions", "", "", "json"),
        transcript_key("t1", "hash", "whisper", "transcriptions", "en", "", "json"),
        transcript_key("t1", "hash", "whisper", "transcriptions", "", "names: Ada", "json"),
        transcript_key("t1", "hash", "whisper", "transcriptions", "", "", "srt"),
    ):
        assert other != key
        assert store.get(other, "t1") is None


def test_old_transcripts_are_not_answered_and_are_swept(db, clock):
    store = TranscriptStore(db, keep_days=7, clock=clock)
    store.put("k-old", "t1", "old", audio_ms=1000, output_tokens=1)
    clock.now += timedelta(days=5)
    store.put("k-new", "t1", "new", audio_ms=1000, output_tokens=1)
    clock.now += timedelta(days=3)
    assert store.get("k-old", "t1") is None
    assert store.get("k-new", "t1") is not None
    assert store.sweep() == 1
    assert store.get("k-new", "t1") is not None
    assert not TranscriptStore(db, keep_days=0, clock=clock).enabled
