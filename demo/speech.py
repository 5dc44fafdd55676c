"""The closed synthetic audio world of the grounding demo: espeak-ng sentences and non-speech clips.

A `Clip` holds every parameter needed to make its samples (sentence slots, voice, speed and pitch for speech;
frequency, length and noise seed otherwise), so a clip is re-rendered from its JSON form. Speech comes from the
espeak-ng binary (`--stdout`, 22,050 Hz 16-bit WAV) resampled to 16 kHz; the same espeak-ng version gives the same
samples. Every clip is float32 mono at 16 kHz, the rate the audio encoders and the grounding scorer read.
"""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

SAMPLE_RATE = 16_000
ESPEAK_RATE = 22_050
ESPEAK_TIMEOUT_S = 30

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
HOURS = tuple(range(1, 13))
NAMES = ("James", "Mary", "John", "Linda", "Robert", "Sarah", "David", "Emma", "Michael", "Olivia")
COUNT_NOUNS = ("apples", "books", "cups", "chairs", "dogs", "cats")
COUNTS = tuple(range(1, 21))
SPEECH_COLOURS = ("red", "green", "blue", "yellow", "orange", "purple", "black")
NUMBER_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
)  # fmt: skip

SENTENCES = ("meeting", "call", "count", "colour")
# How each sentence may be said. The first form is the world's own sentence (the golden sets and the joint stage's
# items say only it); the others wrap the same slots in words outside the world, which the audio stage teaches
# the tower to pass over, as people say "The meeting is moved to Thursday" as often as "The meeting is on Thursday".
SENTENCE_FORMS: dict[str, tuple[str, ...]] = {
    "meeting": (
        "The meeting is on {weekday} at {hour} o'clock.",
        "The meeting is moved to {weekday} at {hour} o'clock.",
        "The meeting has been moved to {weekday} at {hour} o'clock.",
        "Remember that the meeting is on {weekday} at {hour} o'clock.",
    ),
    "call": ("Please call {name}.", "Please call {name} back.", "Could you please call {name} today?"),
    "count": (
        "There are {count} {noun} on the table.",
        "I think there are {count} {noun} on the table now.",
        "Look, there are {count} {noun} on the table.",
    ),
    "colour": (
        "My favourite colour is {colour}.",
        "Honestly, my favourite colour is {colour}.",
        "My favourite colour is {colour}, I think.",
    ),
}
# espeak-ng's pause between words (`-g`, in units of 10 ms at the default speed) for the audio stage's varied clips
WORD_GAPS = (0, 1, 2, 4)
SOUNDS = ("beep", "silence", "noise")
# espeak-ng voices (language plus a variant) that ship with the package: British, American, Scottish, Caribbean
# and New York accents, male and female variants.
VOICES = (
    "en",
    "en-us",
    "en-gb-x-rp",
    "en-gb-scotland",
    "en-029",
    "en-us-nyc",
    "en-us+f3",
    "en-gb+f2",
    "en+m3",
    "en-us+m5",
)
SPEEDS = (130, 145, 160, 175, 190)  # words per minute
PITCHES = (35, 50, 65)


def transcript_hint() -> str:
    """The names and weekdays the world's clips say, as one line for a transcriber's hint."""
    return f"{', '.join(NAMES)}. {', '.join(WEEKDAYS)}."


def number_word(n: int) -> str:
    return NUMBER_WORDS[n]


@dataclass(frozen=True)
class Clip:
    """One clip: a `kind` in SENTENCES (speech) or SOUNDS, and what it needs to be rendered."""

    kind: str
    slots: dict[str, Any] = field(default_factory=dict)  # weekday+hour, name, count+noun, or colour
    voice: str = ""
    speed: int = 0
    pitch: int = 0
    seconds: float = 0.0  # non-speech clips only; speech lasts as long as espeak-ng takes
    frequency: float = 0.0  # beep
    amplitude: float = 0.0  # beep and noise
    seed: int = 0  # noise
    form: int = 0  # which of SENTENCE_FORMS[kind] is said (0: the world's own sentence)
    gap: int = 0  # espeak-ng's pause between words (`-g`), 0 for none

    @property
    def is_speech(self) -> bool:
        return self.kind in SENTENCES

    @property
    def text(self) -> str:
        """The sentence spoken ('' for a non-speech clip)."""
        if not self.is_speech:
            return ""
        slots = dict(self.slots)
        for number in ("hour", "count"):
            if number in slots:
                slots[number] = number_word(slots[number])
        return SENTENCE_FORMS[self.kind][self.form].format(**slots)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for extra in ("form", "gap"):  # left out at 0, so the golden sets' clips read as they always have
            if not data[extra]:
                del data[extra]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Clip:
        return cls(**data)


def _slots(kind: str, rng: np.random.Generator) -> dict[str, Any]:
    if kind == "meeting":
        return {"weekday": WEEKDAYS[int(rng.integers(7))], "hour": int(rng.choice(HOURS))}
    if kind == "call":
        return {"name": NAMES[int(rng.integers(len(NAMES)))]}
    if kind == "count":
        return {"count": int(rng.choice(COUNTS)), "noun": COUNT_NOUNS[int(rng.integers(len(COUNT_NOUNS)))]}
    return {"colour": SPEECH_COLOURS[int(rng.integers(len(SPEECH_COLOURS)))]}


def sample_clip(
    rng: np.random.Generator, *, kind: str | None = None, speech_share: float = 0.8, variety: float = 0.0
) -> Clip:
    """A random clip; speech (one of the four sentences) with probability `speech_share`, else a sound. With
    probability `variety` speech is said in another of its forms, with pauses between words (draws from `rng` only
    when `variety` is above 0, so the golden sets' clips stay as they are)."""
    if kind is None:
        kind = (
            SENTENCES[int(rng.integers(len(SENTENCES)))]
            if rng.random() < speech_share
            else SOUNDS[int(rng.integers(len(SOUNDS)))]
        )
    if kind in SENTENCES:
        clip = Clip(
            kind=kind,
            slots=_slots(kind, rng),
            voice=VOICES[int(rng.integers(len(VOICES)))],
            speed=int(rng.choice(SPEEDS)),
            pitch=int(rng.choice(PITCHES)),
        )
        if variety > 0 and rng.random() < variety:
            form = int(rng.integers(len(SENTENCE_FORMS[kind])))
            clip = replace(clip, form=form, gap=int(rng.choice(WORD_GAPS)))
        return clip
    seconds = round(float(rng.uniform(1.0, 3.0)), 2)
    if kind == "beep":
        return Clip(
            kind=kind,
            seconds=seconds,
            frequency=float(rng.choice([440.0, 660.0, 880.0, 1000.0, 1200.0])),
            amplitude=round(float(rng.uniform(0.2, 0.5)), 3),
        )
    if kind == "noise":
        return Clip(
            kind=kind, seconds=seconds, amplitude=round(float(rng.uniform(0.05, 0.3)), 3), seed=int(rng.integers(2**31))
        )
    if kind == "silence":
        return Clip(kind=kind, seconds=seconds)
    raise ValueError(f"unknown clip kind {kind!r}")


def espeak_path() -> str:
    found = shutil.which("espeak-ng")
    if found is None:
        raise FileNotFoundError("espeak-ng is not installed (apt-get install espeak-ng); speech clips need it")
    return found


@functools.lru_cache(maxsize=256)
def _speak(text: str, voice: str, speed: int, pitch: int, gap: int = 0) -> np.ndarray:
    import soundfile as sf
    from scipy.signal import resample_poly

    wav = subprocess.run(  # noqa: S603 - fixed binary, arguments from the closed vocabulary above
        [espeak_path(), "-v", voice, "-s", str(speed), "-p", str(pitch), "-g", str(gap), "--stdout", text],
        capture_output=True,
        check=True,
        timeout=ESPEAK_TIMEOUT_S,
    ).stdout
    samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
    if rate != ESPEAK_RATE:
        raise RuntimeError(f"espeak-ng wrote {rate} Hz audio, expected {ESPEAK_RATE}")
    # 16000 / 22050 = 320 / 441
    resampled = resample_poly(samples, 320, 441).astype(np.float32)
    resampled.setflags(write=False)
    return resampled


def render_clip(clip: Clip) -> np.ndarray:
    """The clip's samples: float32, mono, 16 kHz, in [-1, 1]. The array is read-only (speech is cached)."""
    if clip.is_speech:
        return _speak(clip.text, clip.voice, clip.speed, clip.pitch, clip.gap)
    n = round(clip.seconds * SAMPLE_RATE)
    if clip.kind == "beep":
        t = np.arange(n, dtype=np.float64) / SAMPLE_RATE
        ramp = np.minimum(1.0, np.minimum(t, t[::-1]) / 0.01)  # 10 ms fades: no clicks at the edges
        out = (clip.amplitude * ramp * np.sin(2 * np.pi * clip.frequency * t)).astype(np.float32)
    elif clip.kind == "noise":
        gen = np.random.default_rng(clip.seed)
        out = np.clip(gen.normal(0.0, clip.amplitude, n), -1.0, 1.0).astype(np.float32)
    elif clip.kind == "silence":
        out = np.zeros(n, dtype=np.float32)
    else:
        raise ValueError(f"unknown clip kind {clip.kind!r}")
    out.setflags(write=False)
    return out


def wav_bytes(samples: np.ndarray) -> bytes:
    """16-bit PCM WAV at 16 kHz, the form a request carries."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.asarray(samples, dtype=np.float32), SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()
