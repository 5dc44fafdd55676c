"""The grounding scorer on its real weights (Whisper tiny.en, all-MiniLM-L6-v2) and speech spoken by espeak-ng."""

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from grounding import GroundingScorer
from grounding.models import MiniLMEmbedder, default_minilm_dir
from grounding.scorer import SUPPORT_THRESHOLD
from grounding.sentences import split_claims, transcript_chunks
from tests import media

INVOICE = "Please send the invoice to the finance team."
TRAIN = "Our train leaves from platform four at noon."
# What Whisper hears in the clip of INVOICE and TRAIN; the calibration below needs no audio.
TRANSCRIPT = "Please send the invoice to the finance team. Our train leaves from platform 4 at noon."


def _speak(text: str, _tmp: Path | None = None) -> np.ndarray:
    return media.speech(text)


@pytest.fixture(scope="module")
def scorer():
    made = GroundingScorer()
    made.load()
    yield made
    made.close()


@pytest.fixture(scope="module")
def invoice_clip(tmp_path_factory) -> np.ndarray:
    return _speak(INVOICE, tmp_path_factory.mktemp("speech"))


@pytest.fixture(scope="module")
def two_sentence_clip(tmp_path_factory) -> np.ndarray:
    return _speak(f"{INVOICE} {TRAIN}", tmp_path_factory.mktemp("speech"))


def test_transcribes_a_spoken_sentence(scorer, invoice_clip):
    assert 2.5 < invoice_clip.size / 16_000 < 6
    words = scorer.transcribe(invoice_clip).lower()
    for word in ("please", "send", "invoice", "finance", "team"):
        assert word in words


def test_transcribes_two_sentences(scorer, two_sentence_clip):
    words = scorer.transcribe(two_sentence_clip).lower()
    for word in ("invoice", "finance", "train", "platform", "noon"):
        assert word in words


def test_silence_and_no_samples_transcribe_to_nothing(scorer):
    assert scorer.transcribe(np.zeros(2 * 16_000, dtype=np.float32)) == ""
    assert scorer.transcribe(np.zeros(0, dtype=np.float32)) == ""


def test_stereo_is_refused(scorer):
    with pytest.raises(ValueError, match="mono"):
        scorer.transcribe(np.zeros((16_000, 2), dtype=np.float32))


def test_an_answer_restating_the_audio_scores_high_and_an_unrelated_one_low(scorer, two_sentence_clip):
    supported = scorer.score_request(
        "The speaker asks for the invoice to be sent to the finance team. Their train leaves at noon.",
        two_sentence_clip,
    )
    unrelated = scorer.score_request(
        "The stock market fell sharply on Tuesday. Photosynthesis turns sunlight into chemical energy. "
        "The recipe needs two cups of flour.",
        two_sentence_clip,
    )
    assert supported is not None
    assert unrelated is not None
    assert supported >= 0.5
    assert unrelated <= 0.34
    assert unrelated < supported


def test_score_is_the_fraction_of_supported_claims(scorer):
    half = "Send the invoice to finance. Bananas are rich in potassium."
    assert scorer.score(half, TRANSCRIPT) == 0.5
    assert scorer.score(TRANSCRIPT, TRANSCRIPT) == 1.0


# Calibration of SUPPORT_THRESHOLD: the best cosine similarity of each claim to the transcript's chunks.
@pytest.mark.parametrize(
    "claim",
    [
        "The invoice should be sent to the finance team.",
        "You need to email the bill to finance.",
        "The train departs at 12 pm from platform four.",
        "The speaker asks for the invoice to go to finance.",
        "Their train leaves at noon.",
    ],
)
def test_calibration_paraphrases_are_supported(scorer, claim):
    [(_, best)] = scorer.claim_support(claim, TRANSCRIPT)
    assert best >= SUPPORT_THRESHOLD


@pytest.mark.parametrize(
    "claim",
    [
        "The stock market fell sharply on Tuesday.",
        "The recipe needs two cups of flour and an egg.",
        "The audio is about a cat sleeping on a sofa.",
        "The train was cancelled because of snow.",
        "The finance team rejected the budget proposal.",
        # Same topic words, a fact never said: the nearest miss measured (0.48).
        "The invoice was paid in cash by the customer last year.",
    ],
)
def test_calibration_unrelated_claims_are_not_supported(scorer, claim):
    [(_, best)] = scorer.claim_support(claim, TRANSCRIPT)
    assert best < SUPPORT_THRESHOLD


def test_requests_without_audio_get_no_score(scorer):
    assert scorer.score_request("Anything at all.", None) is None
    assert scorer.score_request("Anything at all.", np.zeros(0, dtype=np.float32)) is None


def test_empty_and_filler_answers_and_empty_transcripts_score_zero(scorer):
    assert scorer.score("", TRANSCRIPT) == 0.0
    assert scorer.score("Sure! Okay.", TRANSCRIPT) == 0.0
    assert scorer.score("Send the invoice to the finance team.", "") == 0.0


def test_audio_of_silence_grounds_nothing(scorer):
    assert scorer.score_request("Send the invoice to the finance team.", np.zeros(16_000, dtype=np.float32)) == 0.0


def test_claims_drop_lead_ins_filler_and_list_markers():
    answer = (
        "Sure!\nHere is what the speaker says:\n- Send the **invoice** to finance.\n2. The train leaves at noon. Ok."
    )
    assert split_claims(answer) == ["Send the invoice to finance.", "The train leaves at noon."]


def test_transcript_chunks_are_windows_of_one_to_three_sentences():
    chunks = transcript_chunks("A one. B two. C three. D four.")
    assert len(chunks) == 4 + 3 + 2
    assert chunks[0] == "A one."
    assert "A one. B two. C three." in chunks
    run_on = " ".join(f"w{i}" for i in range(100))
    windows = transcript_chunks(run_on, max_window=1)
    assert [len(w.split()) for w in windows] == [40, 40, 40, 40]  # half-overlapping 40-word windows
    assert windows[-1].endswith("w99")


def test_concurrent_first_use_is_safe_and_leaves_torch_threads_alone(invoice_clip):
    fresh = GroundingScorer()
    threads_before = torch.get_num_threads()
    with ThreadPoolExecutor(max_workers=3) as pool:
        transcripts = list(pool.map(fresh.transcribe, [invoice_clip] * 3))
        scores = list(pool.map(lambda _: fresh.score("Send the invoice to the finance team.", TRANSCRIPT), range(3)))
        # CTranslate2 sets the OpenMP thread count of the thread that builds a model, and torch reads the same
        # setting: the scorer builds on a throwaway thread, so every pool thread, the loader among them, keeps it.
        barrier = threading.Barrier(3)
        seen = list(pool.map(lambda _: (barrier.wait(), torch.get_num_threads())[1], range(3)))
    assert len(set(transcripts)) == 1
    assert "invoice" in transcripts[0].lower()
    assert scores == [1.0, 1.0, 1.0]
    assert seen == [threads_before] * 3
    fresh.close()


def test_embeddings_run_on_one_torch_thread_without_changing_the_process():
    embedder = MiniLMEmbedder(default_minilm_dir())
    before = torch.get_num_threads()
    assert embedder.torch_threads() == 1
    assert torch.get_num_threads() == before
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(torch.get_num_threads).result() == before
    embedder.close()


def test_media_answers_are_checked_fact_by_fact(scorer):
    from demo.speech import Clip, render_clip
    from serving.encoders.detection import Detection, ImageFindings

    beep = render_clip(Clip("beep", seconds=1.5, frequency=880.0, amplitude=0.3))
    assert scorer.score_media("A beep: a pure tone.", beep).score == 1.0
    wrong = scorer.score_media("Someone says the meeting is on Friday.", beep)
    assert "on Friday" in wrong.unsupported
    assert wrong.score < 0.5
    said = "The meeting is on Thursday at 3 o'clock."
    meeting = Clip("meeting", {"weekday": "Thursday", "hour": 3}, voice="en", speed=160, pitch=50)
    speech = render_clip(meeting)  # the transcript is given, so only the sound label is taken from it
    right = scorer.score_media("The meeting is on Thursday at three o'clock.", speech, transcript=said)
    assert (right.score, right.unsupported) == (1.0, ())
    assert scorer.score_media("It is on Friday at three.", speech, transcript=said).unsupported == ("on Friday",)
    # With both media, a colour either one supports is supported.
    red_circle = (ImageFindings(4, 4, (Detection("circle:red", 2, 0.5, 0.5),)),)
    both = scorer.score_media("The circle is red. My favourite colour is blue.", speech, red_circle, transcript=said)
    assert both.unsupported == ("the colour blue",)
    # what the label head spoke to: the shapes it checked, and the values heard
    assert {"circle", "blue"} <= both.about
    assert "thursday" in right.about
    counted = scorer.score_media("There are two shapes, a red circle.", None, red_circle)
    assert {"circle", "shape"} <= counted.about


def test_an_image_answer_that_asserts_nothing_scores_by_what_was_asked(scorer):
    from serving.encoders.detection import Detection, ImageFindings

    red_circle = (ImageFindings(4, 4, (Detection("circle:red", 2, 0.5, 0.5),)),)
    assert (
        scorer.score_media("According to sources, indeed.", None, red_circle, "What colour is the circle?").score == 0
    )
    assert scorer.score_media("Hello there, friend.", None, red_circle, "Write a poem.").score == 1.0


def test_a_hint_of_the_expected_names_makes_whisper_spell_them():
    # The first "please call <name>" clips of the held-out set: without a hint Whisper hears some names as common
    # words ("Please go marry."); with the hint the demo checkpoints carry, which names them, it spells them.
    from demo.golden import golden_set
    from demo.speech import render_clip, transcript_hint

    clips = [item.clip for item in golden_set("heldout") if item.clip is not None and item.clip.kind == "call"][:16]
    heard = {}
    for hint in ("", transcript_hint()):
        scorer = GroundingScorer(transcript_hint=hint)
        said = [scorer.transcribe(np.asarray(render_clip(c), dtype=np.float32)) for c in clips]
        heard[hint] = sum(c.slots["name"] in s for c, s in zip(clips, said, strict=True))
        scorer.close()
    assert heard[transcript_hint()] >= 15
    assert heard[transcript_hint()] > heard[""]


def test_a_spoken_fact_any_of_the_best_transcripts_says_is_heard(scorer, two_sentence_clip):
    said = ("There are 18 cuts on the table.", "There are 19 cuts on the table.", "There are 18 cups on the table.")
    count = render_clip_of("count")
    nineteen = scorer.score_media("There are nineteen cups on the table.", count, transcript=said)
    assert (nineteen.score, nineteen.unsupported) == (1.0, ())
    # a fact none of them says stays unsupported, and sentences are checked against the best transcript alone
    assert scorer.score_media("There are twelve cups on the table.", count, transcript=said).unsupported == (
        "the number 12",
    )
    assert scorer.score_media("There are eighteen dogs here.", count, transcript=said).unsupported == ("a dog",)
    # the recogniser's own guesses: best first, distinct, and the best is what `transcribe` gives
    heard = scorer.hypotheses(two_sentence_clip)
    assert heard.reading == ""  # no tower to read with
    guesses = heard.transcripts
    assert 1 < len(guesses) <= 5
    assert len(set(guesses)) == len(guesses)
    assert guesses[0] == scorer.transcribe(two_sentence_clip)
    assert scorer.hypotheses(np.zeros(16_000, dtype=np.float32)).transcripts == ("",)


def render_clip_of(kind: str) -> np.ndarray:
    from demo.speech import Clip, render_clip

    slots = {"count": {"count": 19, "noun": "cups"}}[kind]
    return render_clip(Clip(kind, slots, voice="en", speed=160, pitch=50))
