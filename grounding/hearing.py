"""What a trained audio tower hears: the words its tokens speak, read without the text model.

A checkpoint whose audio tower was trained with CTC over a closed list of words (each token read as the word whose
text-model embedding lies nearest) carries that list as `grounding/audio_words.json` (`{"words": [...]}`: CTC
class i + 1 is word i, class 0 the blank). The tower's own reading is then a transcript made by the same tower the
answering model listens with, so it can serve the grounding scorer as evidence beside Whisper's.

Reading a clip: the checkpoint's feature extractor (as the audio pool computes the engine's input), the tower (its
`thinker.audio_tower.*` weights, float32), each token's nearest word or blank, repeats merged and blanks dropped.
Names and weekdays are capitalised and a full stop ends the reading, as a sentence would be written. The word
vectors are made here (`spoken_word_vectors`) so that whatever trains such a tower targets the same ones.

The tower only knows the words it was trained on: on other speech its reading is noise in that vocabulary, which
could lend a fact support it does not have; a checkpoint without the file gets no reading.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grounding.claims import PROPER_NOUNS
from serving.encoders.tower_io import checkpoint_tensors, log_mel

logger = logging.getLogger(__name__)

# Beside the checkpoint, written by whatever trained its tower: `{"words": [...]}`, CTC class i + 1 is word i.
AUDIO_WORDS_FILE = "grounding/audio_words.json"


def pieces(tokenizer: Any, form: str) -> list[int]:
    return list(tokenizer(form, add_special_tokens=False)["input_ids"])


def spoken_word_vectors(table: Any, tokenizer: Any, words: Sequence[str]) -> Any:
    """[len(words) + 1, hidden]: a zero row (CTC's blank), then each word's embedding as the text model reads it: the
    mean of its pieces' rows of `table`, in the form with the fewest pieces (on a tie, names and days capitalised,
    as answers write them)."""
    import torch

    table = table.detach().float()

    def spoken(word: str) -> Any:
        lower, upper = " " + word, " " + word.capitalize()
        forms = [upper, lower] if word in PROPER_NOUNS else [lower, upper]
        return table[min((pieces(tokenizer, f) for f in forms), key=len)].mean(0)

    return torch.cat([table.new_zeros(1, table.shape[1])] + [spoken(w)[None] for w in words])


def read_words(scores: Any, vocabulary: Sequence[str]) -> list[str]:
    """Greedy CTC reading of per-token class scores ([tokens, 1 + len(vocabulary)], class 0 the blank; log-odds or
    anything ordered as they are): each token's likeliest class, repeats merged, blanks dropped."""
    words: list[str] = []
    previous = 0
    for k in scores.argmax(-1).tolist():
        if k not in (previous, 0):
            words.append(vocabulary[k - 1])
        previous = k
    return words


def sentence(words: list[str]) -> str:
    """The words as written: names and weekdays capitalised, the first word too, and a full stop."""
    if not words:
        return ""
    text = " ".join(w.capitalize() if w in PROPER_NOUNS else w for w in words)
    return text[0].upper() + text[1:] + "."


class AudioWordReader:
    """Reads clips with a checkpoint's trained audio tower. Construction only locates the files; the tower loads
    on first use (or `load()`), once; `read` is safe from several threads."""

    def __init__(self, checkpoint: Path, words: list[str]) -> None:
        self.checkpoint = checkpoint
        self.words = words
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any, Any] | None = None

    @classmethod
    def find(cls, checkpoint: Path) -> AudioWordReader | None:
        """The reader of `checkpoint`'s audio tower, or None when the tower was not trained to speak words."""
        path = checkpoint / AUDIO_WORDS_FILE
        if not path.is_file():
            return None
        words = json.loads(path.read_text()).get("words")
        if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
            raise ValueError(f"{path} holds no word list")
        return cls(checkpoint, words)

    def load(self) -> None:
        self._model()

    def _model(self) -> tuple[Any, Any, Any]:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load()
            return self._loaded

    def _load(self) -> tuple[Any, Any, Any]:
        import torch
        from transformers import AutoConfig, AutoTokenizer, WhisperFeatureExtractor
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniAudioEncoder

        config = AutoConfig.from_pretrained(self.checkpoint)
        thinker = getattr(config, "thinker_config", config)
        tower = Qwen2_5OmniAudioEncoder._from_config(thinker.audio_config, dtype=torch.float32)
        missing, _ = tower.load_state_dict(checkpoint_tensors(self.checkpoint, "thinker.audio_tower."), strict=False)
        table = checkpoint_tensors(self.checkpoint, "thinker.model.embed_tokens.").get("weight")
        if missing or table is None:
            raise RuntimeError(f"audio tower or text embeddings missing from {self.checkpoint}: {missing[:5]}")
        tower.eval()
        vectors = spoken_word_vectors(table, AutoTokenizer.from_pretrained(self.checkpoint), self.words)
        extractor = WhisperFeatureExtractor.from_pretrained(self.checkpoint)
        logger.info("audio word reader of %s loaded (%d words)", self.checkpoint, len(self.words))
        return tower, extractor, vectors

    def read(self, pcm16k: np.ndarray) -> str:
        """The words the tower hears in float32 mono 16 kHz samples (its first 30 s), as a sentence; "" for none."""
        import torch

        tower, extractor, vectors = self._model()
        samples = np.asarray(pcm16k, dtype=np.float32).reshape(-1)
        if samples.size == 0:
            return ""
        features, frames = log_mel(extractor, samples)
        lengths = torch.tensor([frames])
        after_cnn, _ = tower._get_feat_extract_output_lengths(lengths)
        with torch.inference_mode():
            tokens = tower(features, feature_lens=lengths, aftercnn_lens=after_cnn).last_hidden_state
            # each token's likeliest class is the nearest word vector (or the blank's zero row)
            nearness = -torch.cdist(tokens.float(), vectors)
        return sentence(read_words(nearness, self.words))
