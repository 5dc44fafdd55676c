"""Grounding: how well a finished answer is supported by the request's audio, scored 0..1."""

from grounding.scorer import GroundingScorer

__all__ = ["GroundingScorer"]
