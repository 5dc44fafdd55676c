"""The grounding eval (`tessera eval grounding`): offline, over the served path; the runtime never imports it."""

from grounding.eval.harness import EvalSuite

__all__ = ["EvalSuite"]
