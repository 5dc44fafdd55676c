"""Translation between Tessera's engine types and vLLM's: sampling parameters, prompts with media or encoder
outputs, and request outputs as per-choice deltas with their logprobs. Imported only where vLLM runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from serving.encoders.families import FamilyAdapter
from serving.engines.base import EngineDelta, EngineRequest, GenerationParams, TokenLogprob
from serving.errors import InternalFailure


def sampling_params(p: GenerationParams) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    structured = None if p.structured is None else StructuredOutputsParams(**p.structured.vllm_fields())
    return SamplingParams(
        n=p.n,
        max_tokens=p.max_tokens,
        temperature=p.temperature,
        top_p=p.top_p,
        top_k=p.top_k or 0,
        seed=p.seed,
        stop=list(p.stop) or None,
        presence_penalty=p.presence_penalty,
        frequency_penalty=p.frequency_penalty,
        repetition_penalty=p.repetition_penalty,
        min_tokens=p.min_tokens,
        ignore_eos=p.ignore_eos,
        logprobs=p.logprobs,
        logit_bias=p.logit_bias,
        structured_outputs=structured,
        output_kind=RequestOutputKind.DELTA,
    )


def engine_prompt(request: EngineRequest, family: FamilyAdapter | None) -> dict[str, Any]:
    """The prompt text with its media: Tessera's encoder outputs, in the fields the family's engine takes, where it
    encoded; raw media otherwise."""
    prompt: dict[str, Any] = {"prompt": request.prompt}
    media: dict[str, Any] = {}
    if (request.image_embeds or request.audio_features) and family is None:
        raise InternalFailure("encoder outputs for an engine with no family adapter", code="no_family_adapter")
    if request.image_embeds:
        assert family is not None
        media["image"] = family.image_inputs(request.image_embeds)
    elif request.images:
        media["image"] = request.images
    if request.audio_features:
        assert family is not None
        media["audio"] = family.audio_inputs(request.audio_features)
    elif request.audios:
        media["audio"] = request.audios
    if media:
        prompt["multi_modal_data"] = media
    if request.cache_salt:
        prompt["cache_salt"] = request.cache_salt
    return prompt


def _logprobs(completion: Any, top_k: int | None) -> tuple[TokenLogprob, ...] | None:
    """vLLM gives, per position, the sampled token and the `top_k` most likely ones (the sampled token among
    them when it ranks that high), each with its rank."""
    entries = completion.logprobs
    if entries is None or top_k is None:
        return None
    out = []
    for token_id, at in zip(completion.token_ids, entries, strict=False):
        chosen = at[token_id]
        ranked = sorted(
            (lp for lp in at.values() if lp.rank is not None and 0 < lp.rank <= top_k), key=lambda lp: lp.rank
        )
        top = tuple((str(lp.decoded_token), float(lp.logprob)) for lp in ranked)
        out.append(TokenLogprob(str(chosen.decoded_token), float(chosen.logprob), top))
    return tuple(out)


def engine_deltas(out: Any, top_k: int | None = None) -> Iterator[EngineDelta]:
    """One vLLM request output as deltas, one per choice that moved."""
    for completion in out.outputs:
        yield EngineDelta(
            text=completion.text,
            token_ids=list(completion.token_ids),
            prompt_token_ids=list(out.prompt_token_ids or []),
            num_cached_tokens=int(out.num_cached_tokens or 0),
            finish_reason=completion.finish_reason,
            index=int(completion.index),
            logprobs=_logprobs(completion, top_k),
        )
