"""The towers' stage losses of `tessera models train-demo` (demo.training.trainer), and the targets they pull towards.

- *vision*: `image_stage_loss` regresses each shape's centre token onto its colour, kind, size and position words
  (`WordTargets.shape_vector`) and every other token onto zero (with `spread_beyond` set, every cell a shape drawn
  that much bigger than the world's covers carries its words too: `speaks_from_cover`), beside a label head
  (`cell_labels`: which shape and colour covers each cell) and a coordinate head (`cell_coordinates`).
- *audio*: `audio_stage_loss` is CTC over the world's words (`ctc_vocabulary`), each token read as the word whose
  embedding lies nearest (`word_logits`), and every token pulled onto what the best CTC path (`ctc_alignment`)
  puts on its frame.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from demo.speech import SOUNDS
from demo.world import COLOURS, POSITIONS, SHAPES, SIZES, Scene, Shape, world_radius
from grounding.hearing import pieces, spoken_word_vectors

if TYPE_CHECKING:
    from demo.training.trainer import TrainConfig

LABELS = 1 + len(SHAPES) * len(COLOURS)  # 0: no shape; then shape-major, colour-minor
# What each image answer may say about a shape, and what a shape's centre token carries.
ATTRIBUTES = {"colour": COLOURS, "kind": SHAPES, "size": SIZES, "position": POSITIONS}


def centre_cell(scene: Scene, shape: Shape, rows: int, cols: int) -> int:
    """The raster index of the merged token whose cell holds `shape`'s centre."""
    r = min(rows - 1, int(shape.cy * rows / scene.height))
    c = min(cols - 1, int(shape.cx * cols / scene.width))
    return r * cols + c


def cell_coordinates(rows: int, cols: int) -> np.ndarray:
    """Each cell's centre as (row, column) fractions of the image, in raster order."""
    r, c = np.meshgrid((np.arange(rows) + 0.5) / rows, (np.arange(cols) + 0.5) / cols, indexing="ij")
    return np.stack([r.reshape(-1), c.reshape(-1)], axis=-1).astype(np.float32)


def clip_words(clip: Any) -> list[str]:
    """What a clip says, word by word, or its sound label for a clip without speech. Words outside the world's
    sentences (a clip said in another form: "The meeting is moved to ...") are left out: the tower passes over
    them as it does the pauses between words."""
    if not clip.is_speech:
        return [clip.kind]
    known = set(ctc_vocabulary())
    return [w for w in _words(clip.text) if w in known]


class WordTargets:
    """What the towers' tokens are pulled towards: the text model's own input embeddings of the world's words.

    `attribute_vectors` hold each attribute's words (`ATTRIBUTES`) in order; `shape_vector` is the token a shape's
    centre should carry (its colour, kind, size and position words' embeddings, summed and halved, so about as long
    as one word's); `word_vectors` row i + 1 is the embedding of CTC class i + 1 as the text model reads that word
    (row 0, CTC's blank, is zero: frames between words carry nothing). `table` is the text model's input embedding
    matrix."""

    def __init__(self, table: Any, tokenizer: Any) -> None:
        import torch

        table = table.detach().float()

        def vector(word: str) -> Any:
            return table[pieces(tokenizer, " " + word)].mean(0)

        self.attribute_vectors = {k: torch.stack([vector(w) for w in words]) for k, words in ATTRIBUTES.items()}
        self.vocabulary = ctc_vocabulary()
        self.index = {w: i + 1 for i, w in enumerate(self.vocabulary)}  # 0 is CTC's blank
        self.word_vectors = spoken_word_vectors(table, tokenizer, self.vocabulary)
        self.norm = float(table.norm(dim=-1).mean())

    def shape_vector(self, shape: Shape) -> Any:
        return (
            sum(self.attribute_vectors[name][words.index(getattr(shape, name))] for name, words in ATTRIBUTES.items())
            / 2
        )


def ctc_alignment(log_probs: Any, wanted: list[int]) -> list[int]:
    """The most likely CTC path (Viterbi) through `log_probs` ([T, C], class 0 the blank) that spells `wanted`:
    each frame's class, 0 where the path is on a blank. A path that cannot fit (too few frames) is all blank."""
    lp = np.asarray(log_probs, dtype=np.float64)
    frames = lp.shape[0]
    states = [0]
    for k in wanted:
        states += [k, 0]
    n = len(states)
    labels = np.array(states)
    # a label state may be entered from two states back when it differs from that state's label
    skip = np.zeros(n, dtype=bool)
    for s in range(2, n):
        skip[s] = labels[s] != 0 and labels[s] != labels[s - 2]
    score = np.full(n, -np.inf)
    score[0] = lp[0, labels[0]]
    if n > 1:
        score[1] = lp[0, labels[1]]
    back = np.zeros((frames, n), dtype=np.int64)
    for t in range(1, frames):
        stay = score
        step = np.concatenate([[-np.inf], score[:-1]])
        jump = np.where(skip, np.concatenate([[-np.inf, -np.inf], score[:-2]]), -np.inf)
        best = np.maximum(np.maximum(stay, step), jump)
        back[t] = np.where(best == stay, 0, np.where(best == step, 1, 2))
        score = best + lp[t, labels]
    ends = [n - 1, n - 2] if n > 1 else [0]
    end = max(ends, key=lambda s: score[s])
    if not np.isfinite(score[end]):
        return [0] * frames
    path = [0] * frames
    s = end
    for t in range(frames - 1, -1, -1):
        path[t] = int(labels[s])
        s -= int(back[t, s])
    return path


def image_stage_loss(
    out: Any, scenes: list[Scene], grid_thw: Any, targets: WordTargets, heads: dict[str, Any], config: TrainConfig
) -> tuple[Any, dict[str, float]]:
    """The vision stage's loss on merged image tokens `out` (all images' tokens in order)."""
    import torch
    from torch.nn.functional import cross_entropy

    centres, shapes, labels, coords = [], [], [], []
    spread, spread_shapes = [], []  # cells beside a big shape's centre that speak its words too
    offset = 0
    for scene, (_, h, w) in zip(scenes, grid_thw.tolist(), strict=True):
        rows, cols = h // 2, w // 2
        for shape in scene.shapes:
            centre = centre_cell(scene, shape, rows, cols)
            centres.append(offset + centre)
            shapes.append(shape)
            if speaks_from_cover(scene, shape, config.spread_beyond):
                cells = [c for c in covered_cells(scene, shape, rows, cols) if c != centre]
                spread += [offset + c for c in cells]
                spread_shapes += [shape] * len(cells)
        labels.append(torch.from_numpy(cell_labels(scene, rows, cols).reshape(-1)))
        coords.append(torch.from_numpy(cell_coordinates(rows, cols)))
        offset += rows * cols
    index = torch.tensor(centres)
    chosen = out[index].detach().float()
    carried = torch.stack([targets.shape_vector(s) for s in shapes])
    stats: dict[str, float] = {}
    for name, words in ATTRIBUTES.items():
        # read as the option whose words, put in place of the true one, come nearest the token
        truth = torch.tensor([words.index(getattr(s, name)) for s in shapes])
        vectors = targets.attribute_vectors[name]
        options = carried[:, None] + (vectors[None] - vectors[truth][:, None]) / 2
        read = (options - chosen[:, None]).norm(dim=-1).argmin(-1)
        stats[f"{name} accuracy"] = float((read == truth).float().mean())
    # Every token regresses onto what it should carry: a shape's centre its words (and, for a shape drawn far bigger
    # than the world's, every cell it covers), every other token nothing.
    if spread:
        index = torch.cat([index, torch.tensor(spread)])
        carried = torch.cat([carried, torch.stack([targets.shape_vector(s) for s in spread_shapes])])
    wanted = out.new_zeros(out.shape)
    wanted[index] = carried.to(out.dtype)
    error = ((out.float() - wanted.float()) ** 2).sum(-1) / targets.norm**2
    rest = torch.ones(out.shape[0], dtype=torch.bool)
    rest[index] = False
    total = config.centre_weight * error[index].mean() + config.empty_weight * error[rest].mean()
    stats["centre error"] = float(error[index].mean().detach())
    stats["empty error"] = float(error[rest].mean().detach())
    label_logits = heads["label"](out)
    cell_truth = torch.cat(labels)
    total = total + cross_entropy(label_logits, cell_truth)
    stats["cell accuracy"] = float((label_logits.argmax(-1) == cell_truth).float().mean())
    where = torch.sigmoid(heads["coordinates"](out))
    total = total + config.coordinate_weight * ((where - torch.cat(coords)) ** 2).sum(-1).mean()
    return total, stats


def word_logits(tokens: Any, targets: WordTargets, temperature: float) -> Any:
    """Each token's log-odds of being each CTC class: minus its squared distance from the class's word embedding
    (the blank's is zero), over `temperature` times a word's squared length."""
    import torch

    vectors = targets.word_vectors.to(tokens.device)
    distance = torch.cdist(tokens.float(), vectors) ** 2
    return -distance / (temperature * targets.norm**2)


def audio_stage_loss(
    out: Any, token_lens: Any, clips: list[Any], targets: WordTargets, config: TrainConfig
) -> tuple[Any, dict[str, float]]:
    """CTC over the world's words, each token read as the word whose embedding lies nearest (the blank: zero), and
    every token pulled onto what the CTC path through the true words puts on its frame: that word's embedding, or
    nothing between words."""
    import torch
    from torch.nn.functional import ctc_loss, log_softmax

    pieces = out.split(token_lens.tolist())
    per_clip = [log_softmax(word_logits(p, targets, config.ctc_temperature), dim=-1) for p in pieces]
    log_probs = torch.nn.utils.rnn.pad_sequence(per_clip)  # [T, N, C]
    wanted = [[targets.index[w] for w in clip_words(c)] for c in clips]
    loss = ctc_loss(
        log_probs,
        torch.tensor([k for w in wanted for k in w], dtype=torch.long),
        token_lens,
        torch.tensor([len(w) for w in wanted]),
        zero_infinity=True,
    )
    frames = torch.tensor(
        [k for lp, w in zip(per_clip, wanted, strict=True) for k in ctc_alignment(lp.detach().numpy(), w)]
    )
    error = ((out.float() - targets.word_vectors[frames].to(out.device)) ** 2).sum(-1) / targets.norm**2
    spoken = frames != 0
    token_loss = error[spoken].mean() if bool(spoken.any()) else error.new_zeros(())
    token_loss = token_loss + error[~spoken].mean()
    right = 0
    for lp, truth in zip(per_clip, wanted, strict=True):
        best = lp.argmax(-1).tolist()
        said = [k for i, k in enumerate(best) if k != 0 and (i == 0 or best[i - 1] != k)]
        right += said == truth
    stats = {"ctc loss": float(loss.item()), "token error": float(token_loss.item())}
    return loss + config.token_weight * token_loss, {**stats, "clip accuracy": right / len(clips)}


def label_of(shape_kind: str, colour: str) -> int:
    return 1 + SHAPES.index(shape_kind) * len(COLOURS) + COLOURS.index(colour)


def describe_label(label: int) -> tuple[str, str] | None:
    if label == 0:
        return None
    return SHAPES[(label - 1) // len(COLOURS)], COLOURS[(label - 1) % len(COLOURS)]


def covered_cells(scene: Scene, shape: Shape, rows: int, cols: int) -> list[int]:
    """The raster indices of the cells whose centres `shape` covers (lies within 0.9 of its radius of), so a cell
    only grazing its outline is left out."""
    cells = []
    for r in range(rows):
        y = (r + 0.5) * scene.height / rows
        for c in range(cols):
            x = (c + 0.5) * scene.width / cols
            if math.hypot(x - shape.cx, y - shape.cy) <= 0.9 * shape.radius:
                cells.append(r * cols + c)
    return cells


def speaks_from_cover(scene: Scene, shape: Shape, beyond: float) -> bool:
    """Whether every cell `shape` covers carries its words: when it is drawn more than `beyond` times the world's
    radius for its size (0: never). Inside a shape that fills much of the frame the cells look alike, and one near
    its edge cannot tell it is not a shape's centre; speaking as the centre does, it reads as the same shape."""
    return beyond > 0 and shape.radius > beyond * world_radius(shape.size, scene.width, scene.height)


def cell_labels(scene: Scene, rows: int, cols: int) -> np.ndarray:
    """For each merged token (a `rows` x `cols` raster over the image), the label of the shape covering the centre
    of its cell, or 0. A shape covers a point within 0.9 of its radius, so a cell only grazing an outline is empty;
    and every shape labels at least the cell holding its own centre, since at the served resolution (a cell is
    28 px of an image resized to at most 224x224) a small shape covers no cell's centre."""
    out = np.zeros((rows, cols), dtype=np.int64)
    for shape in scene.shapes:
        out.reshape(-1)[covered_cells(scene, shape, rows, cols)] = label_of(shape.kind, shape.colour)
    for shape in scene.shapes:
        out.reshape(-1)[centre_cell(scene, shape, rows, cols)] = label_of(shape.kind, shape.colour)
    return out


def _words(text: str) -> list[str]:
    return [w for w in (t.strip('.,:;!?"').lower() for t in text.split()) if w]


@functools.cache
def ctc_vocabulary() -> tuple[str, ...]:
    """Every word the audio world's sentences use, then the sound labels, in a fixed order (CTC class i + 1; 0 is
    the blank)."""
    from demo.speech import COUNT_NOUNS, COUNTS, HOURS, NAMES, SPEECH_COLOURS, WEEKDAYS, Clip

    words: list[str] = []
    samples = (
        [Clip("meeting", {"weekday": d, "hour": h}) for d in WEEKDAYS for h in HOURS]
        + [Clip("call", {"name": n}) for n in NAMES]
        + [Clip("count", {"count": c, "noun": n}) for c in COUNTS for n in COUNT_NOUNS]
        + [Clip("colour", {"colour": c}) for c in SPEECH_COLOURS]
    )
    for clip in samples:
        for w in _words(clip.text):
            if w not in words:
                words.append(w)
    return (*words, *SOUNDS)


def answer_cross_entropy(logits: Any, targets: Any, where: Any, *, per_item: bool) -> Any:
    """Cross-entropy of answer tokens: `logits` holds one row per True of `where` (batch x positions), in the
    order `where` selects them, and `targets` the token ids at those positions. Averaged over every token, or,
    `per_item`, over each row's tokens and then over the rows that have any."""
    from torch.nn.functional import cross_entropy

    if not per_item:
        return cross_entropy(logits, targets[where])
    losses = cross_entropy(logits, targets[where], reduction="none")
    rows = where.nonzero()[:, 0]
    counts = where.sum(-1).clamp(min=1).to(losses.dtype)
    per_row = losses.new_zeros(where.shape[0]).index_add(0, rows, losses) / counts
    return per_row[where.any(-1)].mean()
