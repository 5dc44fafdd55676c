"""The closed synthetic image world of the grounding demo: scenes of 1-4 coloured shapes, sampled and rendered.

A `Scene` is the whole ground truth of one image and holds every number needed to draw it (size, background,
noise seed, each shape's centre and radius), so an image is re-rendered bit for bit from its JSON form and
golden sets never store pixels.

Layout rules that keep the questions answerable:
- each shape kind appears at most once per scene, so "the circle" always names one shape;
- each position holds at most one shape; positions are anchored at fixed fractions of the image
  (left/right at 18% and 82% of the width, top/bottom at 18% and 82% of the height, centre in the middle)
  with a jitter of at most 2%; a large shape's radius is 11% of the shorter side (a small one's 5.5%) and no
  shape reaches further than 1.2 radii from its centre, so no two shapes overlap and none leaves the image;
- width and height are each 64-1024 px with an aspect ratio of at most 3:1: in a thinner strip "top" and
  "centre" would sit a few pixels apart and stop being visually distinct.

Free layouts (`sample_free_scene`) are pictures as people draw them: one to four shapes anywhere in the frame,
radii from a little under the world's small to three times its large, tinted light backgrounds and stronger noise.
A shape's position is the region its centre lies in (`region_of`, the rule the label head's detections are read
by), and a centre near a region's edge is drawn again, so "where" still has one answer.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from grounding.image_evidence import position_of

SHAPES = ("circle", "square", "triangle", "star")
COLOURS = ("red", "green", "blue", "yellow", "orange", "purple", "black")
SIZES = ("small", "large")
POSITIONS = ("left", "right", "top", "bottom", "centre")

# Saturated fills that stay distinct from each other and from every light background.
RGB: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 150, 50),
    "blue": (30, 70, 220),
    "yellow": (235, 190, 0),
    "orange": (245, 125, 15),
    "purple": (130, 45, 170),
    "black": (20, 20, 20),
}
ANCHORS: dict[str, tuple[float, float]] = {
    "left": (0.18, 0.5),
    "right": (0.82, 0.5),
    "top": (0.5, 0.18),
    "bottom": (0.5, 0.82),
    "centre": (0.5, 0.5),
}
RADIUS_FRACTION = {"small": 0.055, "large": 0.11}  # of the shorter side
JITTER = 0.02  # of each side
MIN_SIDE, MAX_SIDE, MAX_ASPECT = 64, 1024, 3.0
MAX_NOISE_SIGMA = 8.0  # "lightly noisy": grey-level standard deviation of the background noise
MAX_REACH = 1.2  # furthest point of any outline from its centre, in radii (a square's corner)
# The most merged image tokens one shape of the world covers at the served resolution (the largest seen in 1,500
# scenes); a label head trained here reads a same-coloured region bigger than this as one big shape.
WORLD_SHAPE_CELLS = 4


@dataclass(frozen=True)
class Shape:
    kind: str
    colour: str
    size: str
    position: str
    cx: int
    cy: int
    radius: int

    def phrase(self) -> str:
        """'a large red circle'."""
        return f"a {self.size} {self.colour} {self.kind}"


@dataclass(frozen=True)
class Scene:
    width: int
    height: int
    background: tuple[int, int, int]
    noise_sigma: float  # 0.0 for a plain background
    noise_seed: int
    shapes: tuple[Shape, ...]

    def shape(self, kind: str) -> Shape | None:
        return next((s for s in self.shapes if s.kind == kind), None)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(s.kind for s in self.shapes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scene:
        return cls(
            width=int(data["width"]),
            height=int(data["height"]),
            background=(int(data["background"][0]), int(data["background"][1]), int(data["background"][2])),
            noise_sigma=float(data["noise_sigma"]),
            noise_seed=int(data["noise_seed"]),
            shapes=tuple(Shape(**s) for s in data["shapes"]),
        )


def _image_size(rng: np.random.Generator) -> tuple[int, int]:
    width = int(rng.integers(MIN_SIDE, MAX_SIDE + 1))
    low = max(MIN_SIDE, math.ceil(width / MAX_ASPECT))
    high = min(MAX_SIDE, math.floor(width * MAX_ASPECT))
    return width, int(rng.integers(low, high + 1))


def world_radius(size: str, width: int, height: int) -> int:
    """The radius the world draws a shape of `size` at in a `width` x `height` image."""
    return max(3, round(RADIUS_FRACTION[size] * min(width, height)))


def sample_scene(rng: np.random.Generator, *, n_shapes: int | None = None) -> Scene:
    """A random scene: 1-4 shapes (or `n_shapes`) of distinct kinds at distinct positions."""
    width, height = _image_size(rng)
    count = n_shapes if n_shapes is not None else int(rng.integers(1, len(SHAPES) + 1))
    if not 1 <= count <= len(SHAPES):
        raise ValueError(f"a scene holds 1-{len(SHAPES)} shapes, not {count}")
    kinds = rng.choice(len(SHAPES), size=count, replace=False)
    places = rng.choice(len(POSITIONS), size=count, replace=False)
    shapes = []
    for kind_i, place_i in zip(kinds, places, strict=True):
        size = SIZES[int(rng.integers(len(SIZES)))]
        position = POSITIONS[int(place_i)]
        ax, ay = ANCHORS[position]
        jx, jy = rng.uniform(-JITTER, JITTER, size=2)
        shapes.append(
            Shape(
                kind=SHAPES[int(kind_i)],
                colour=COLOURS[int(rng.integers(len(COLOURS)))],
                size=size,
                position=position,
                cx=round((ax + jx) * width),
                cy=round((ay + jy) * height),
                radius=world_radius(size, width, height),
            )
        )
    background = tuple(int(v) for v in rng.integers(232, 256, size=3))
    noisy = bool(rng.random() < 0.5)
    return Scene(
        width=width,
        height=height,
        background=(background[0], background[1], background[2]),
        noise_sigma=round(float(rng.uniform(2.0, MAX_NOISE_SIGMA)), 2) if noisy else 0.0,
        noise_seed=int(rng.integers(2**31)),
        shapes=tuple(shapes),
    )


# Free layouts: radius bands (of the shorter side) of a "small" and a "large" shape; the large band's top shrinks
# with the number of shapes, so four shapes still fit apart.
FREE_SMALL = (0.045, 0.07)
FREE_LARGE = (0.10, 0.33)
FREE_MAX_NOISE_SIGMA = 12.0
REGION_MARGIN = 0.04  # how far inside its region a free shape's centre lies


def region_of(x: float, y: float) -> str:
    """The position word of a point (fractions of the width and height), read as the label head's detections are
    read (grounding.image_evidence `position_of`, which takes row then column)."""
    return position_of(y, x)


def _clearly_in_region(x: float, y: float) -> bool:
    """Whether the point stays in its region when moved by up to REGION_MARGIN either way."""
    m = REGION_MARGIN
    corners = {region_of(x + a, y + b) for a in (-m, 0.0, m) for b in (-m, 0.0, m)}
    return len(corners) == 1


def _free_shape(
    rng: np.random.Generator, kind: str, count: int, width: int, height: int, placed: list[Shape]
) -> Shape | None:
    """One shape placed anywhere it fits apart from `placed`, in a region none of them holds; None after 200
    tries."""
    short = min(width, height)
    taken = {s.position for s in placed}
    for _ in range(200):
        size = SIZES[int(rng.integers(len(SIZES)))]
        low, high = FREE_SMALL if size == "small" else (FREE_LARGE[0], max(0.12, FREE_LARGE[1] / math.sqrt(count)))
        radius = max(3, round(float(rng.uniform(low, high)) * short))
        reach = MAX_REACH * radius + 1
        if 2 * reach >= min(width, height):
            continue
        cx, cy = float(rng.uniform(reach, width - reach)), float(rng.uniform(reach, height - reach))
        position = region_of(cx / width, cy / height)
        if position in taken or not _clearly_in_region(cx / width, cy / height):
            continue
        if any(math.hypot(cx - s.cx, cy - s.cy) < MAX_REACH * (radius + s.radius) + 2 for s in placed):
            continue
        colour = COLOURS[int(rng.integers(len(COLOURS)))]
        return Shape(kind, colour, size, position, round(cx), round(cy), radius)
    return None


def sample_free_scene(rng: np.random.Generator, *, n_shapes: int | None = None) -> Scene:
    """A free-layout scene: 1-4 shapes (or `n_shapes`) of distinct kinds anywhere in the frame, in distinct
    regions, none overlapping another or the frame's edge."""
    count = n_shapes if n_shapes is not None else int(rng.integers(1, len(SHAPES) + 1))
    if not 1 <= count <= len(SHAPES):
        raise ValueError(f"a scene holds 1-{len(SHAPES)} shapes, not {count}")
    for _ in range(100):
        width, height = _image_size(rng)
        kinds = [SHAPES[int(k)] for k in rng.choice(len(SHAPES), size=count, replace=False)]
        shapes: list[Shape] = []
        for kind in kinds:
            shape = _free_shape(rng, kind, count, width, height, shapes)
            if shape is None:
                break
            shapes.append(shape)
        if len(shapes) == count:
            base = int(rng.integers(215, 256))
            tint = rng.integers(-10, 11, size=3)
            background = tuple(int(np.clip(base + t, 205, 255)) for t in tint)
            noisy = bool(rng.random() < 0.6)
            return Scene(
                width=width,
                height=height,
                background=(background[0], background[1], background[2]),
                noise_sigma=round(float(rng.uniform(2.0, FREE_MAX_NOISE_SIGMA)), 2) if noisy else 0.0,
                noise_seed=int(rng.integers(2**31)),
                shapes=tuple(shapes),
            )
    raise RuntimeError(f"no free layout of {count} shapes fitted in 100 frames")


def _outline(shape: Shape) -> list[tuple[float, float]]:
    """Polygon vertices of a square, triangle or star centred on the shape's centre."""
    r, cx, cy = shape.radius, shape.cx, shape.cy
    if shape.kind == "square":
        half = r * 0.85
        return [(cx - half, cy - half), (cx + half, cy - half), (cx + half, cy + half), (cx - half, cy + half)]
    if shape.kind == "triangle":
        # Pointing up, vertices on the circumcircle: the centre lies inside, well away from the edges.
        return [(cx + r * math.cos(a), cy - r * math.sin(a)) for a in (math.pi / 2, 7 * math.pi / 6, 11 * math.pi / 6)]
    points = []
    for i in range(10):
        reach = r if i % 2 == 0 else r * 0.45
        angle = math.pi / 2 + i * math.pi / 5
        points.append((cx + reach * math.cos(angle), cy - reach * math.sin(angle)))
    return points


def render_scene(scene: Scene) -> Any:
    """The scene as an RGB PIL image; the same scene always gives the same pixels."""
    from PIL import Image, ImageDraw

    pixels = np.empty((scene.height, scene.width, 3), dtype=np.float32)
    pixels[:] = scene.background
    if scene.noise_sigma > 0:
        noise = np.random.default_rng(scene.noise_seed).normal(0.0, scene.noise_sigma, size=pixels.shape[:2])
        pixels += noise[..., None].astype(np.float32)
    image = Image.fromarray(np.clip(pixels, 0, 255).round().astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for shape in scene.shapes:
        fill = RGB[shape.colour]
        if shape.kind == "circle":
            r = shape.radius
            draw.ellipse((shape.cx - r, shape.cy - r, shape.cx + r, shape.cy + r), fill=fill)
        else:
            draw.polygon(_outline(shape), fill=fill)
    return image


def png_bytes(scene: Scene) -> bytes:
    import io

    buf = io.BytesIO()
    render_scene(scene).save(buf, "PNG")
    return buf.getvalue()
