"""The judge: evidence from a model asked, per claim, a yes/no question about the request's media (POPE-style).

For each checkable claim of an answer (grounding.checkable) and each medium of the request that can speak to it,
the judge pool is asked "Is there a red square in the image? Answer yes or no." with the request's own
conversation up to its last user turn, that turn's media kept in the client's order and its text replaced by the
question. The claim's support is the judge's probability of "yes" against "no" at the first output token (its
logprobs); it is supported at the yes/no threshold or above. A count, a colour or a place in an image is asked
openly instead ("How many shapes are there in the image?", "What colour is the square in the image?", "Where is the
red square in the image?"; grounding.open_questions), since a model tends to agree with any value it is offered;
so are a day, an hour, a count or a colour heard ("What day does the speaker mention?"). The claimed value's
probability is read against an open threshold of its own (the two forms are calibrated apart,
grounding.models.JudgeThresholds). A claim both media can speak to is supported if either does.
An answer with no checkable claim is asked about whole ("Is the following statement supported by the image: ...").

Each question goes through the lease like any request (serving.service): admitted by KV budget, its media encoded
once and then served from the embedding cache (the same content and tenant as the answered request), its usage
written as a `grounding` line of the tenant's, with a request id derived from the answered one. Its caller policy
(tenancy.quotas.TenantPolicy.judging) counts it in the monthly budgets but not in the rate limits, so a tenant at
its concurrency limit does not block the check of its own answer, and its own answer is never scored. Where the
judge pool is the pool that answered, the question shares the request's prefix (system prompt, earlier turns and
media), so the engine's prefix cache serves it.

The judge pool is a setting (`TESSERA_GROUNDING_JUDGE`); by default the strongest pool that takes every medium of
the request. Without one, or where a pool takes none of a claim's media, the judge gives no evidence for it: no
made-up score.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from grounding.checkable import CheckableClaim, Medium, checkable_claims
from grounding.models import JudgeThresholds
from grounding.open_questions import ANSWER_TOKENS, OpenQuestion, open_questions, thing_of, value_support
from serving.engines.base import GenerationParams, TokenLogprob
from serving.errors import TesseraError
from serving.policy import CallerIdentity, CallerPolicy
from serving.record import CompletionRecord

logger = logging.getLogger(__name__)

THRESHOLD = 0.5  # P(yes) at which a claim is supported; `tessera eval grounding` reports it per provider
MAX_QUESTIONS = 8  # per answer: the first claims in its order, so a long answer costs a bounded judge time
TOP_LOGPROBS = 10
YES = frozenset({"yes", "y", "true", "correct"})
NO = frozenset({"no", "n", "false", "incorrect"})
# an answer's caller -> the caller policy of each judge question about it, by the question's request id (None: the
# key is gone)
CallerFactory = Callable[[CallerIdentity], Awaitable[Callable[[str], CallerPolicy] | None]]


@dataclass(frozen=True)
class JudgedClaim:
    """One claim's judgement: the question asked per medium and the probability of yes, the best over media."""

    claim: str
    questions: tuple[str, ...]
    p_yes: float | None  # None: the judge answered neither yes nor no
    supported: bool | None  # None: no judgement
    negated: bool = False  # the claim says the thing is absent: it is supported by a no
    about: tuple[str, ...] = ()  # what the claim is about, as a label head names it (grounding.scorer.combine)
    form: str = "yes_no"  # "open" where an open question was asked: its support is read against the open threshold

    @property
    def support(self) -> float | None:
        """The probability that the media bear the claim out: P(yes), or P(no) for a claim of absence."""
        return None if self.p_yes is None else (1.0 - self.p_yes if self.negated else self.p_yes)

    def wire(self) -> dict[str, Any]:
        support = self.support
        return {
            "claim": self.claim,
            "evidence": "judge",
            "supported": self.supported,
            "p_yes": None if self.p_yes is None else round(self.p_yes, 4),
            "expected": "no" if self.negated else "yes",
            "support": None if support is None else round(support, 4),
            "questions": list(self.questions),
            "form": self.form,
        }


def yes_probability(logprob: TokenLogprob) -> float | None:
    """P(yes) / (P(yes) + P(no)) over the first output token and its alternatives, or None when neither a yes
    nor a no word is among them."""
    seen = {logprob.token: logprob.logprob, **dict(logprob.top)}
    yes = no = 0.0
    for token, value in seen.items():
        word = token.strip().strip(".,!").lower()
        if word in YES:
            yes += math.exp(value)
        elif word in NO:
            no += math.exp(value)
    return None if yes + no == 0.0 else yes / (yes + no)


@dataclass(frozen=True)
class TextPart:
    text: str
    type: str = "text"


@dataclass(frozen=True)
class Turn:
    """A message as serving takes them (serving.ingest.MessageLike)."""

    role: str
    content: Any


def judge_messages(messages: Sequence[Any], question: str) -> list[Any]:
    """The request's conversation (its messages as the client sent them) up to its last user turn, with that
    turn's media parts kept in order and its text replaced by `question`: a prompt that shares the request's
    prefix up to the media."""
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last is None:
        return [Turn("user", question)]
    content = messages[last].content
    media = [p for p in content if getattr(p, "type", "text") != "text"] if isinstance(content, list) else []
    return [*messages[:last], Turn("user", [*media, TextPart(question)] if media else question)]


def judge_request_id(request_id: str, n: int) -> str:
    """The request id of an answer's `n`th judge question: fixed by the answered request, so a receipt names it."""
    return f"grnd-{hashlib.sha256(request_id.encode()).hexdigest()[:20]}-{n}"


def whole_answer(answer: str) -> CheckableClaim:
    """The claim an answer with no checkable claim is judged as: the whole answer."""
    text = " ".join(answer.split())[:400]
    return CheckableClaim("object", text, text)


def question_for(claim: CheckableClaim, medium: Medium, whole: bool) -> str:
    noun = "image" if medium == "image" else "audio clip"
    asked = f'Is the following supported by the {noun}: "{claim.text}"?' if whole else claim.question(medium)
    return f"{asked} Answer yes or no."


class Judge:
    """Asks the judge pool about each claim of an answer (see the module's docstring)."""

    def __init__(
        self,
        service: Any,  # serving.service.InferenceService
        callers: CallerFactory,
        *,
        model: str | None = None,
        threshold: float | None = None,
        open_threshold: float | None = None,
        max_questions: int = MAX_QUESTIONS,
    ) -> None:
        self._service = service
        self._callers = callers
        self._model = model
        self._threshold = threshold  # None: the judge pool's calibrated threshold, else THRESHOLD
        self._open_threshold = open_threshold  # None: `threshold` if set, else the pool's calibrated one
        self._max_questions = max_questions

    def thresholds_for(self, pool: Any) -> JudgeThresholds:
        """The support at which `pool`'s judgements hold, per form of question: each setting, else the pool
        checkpoint's calibrated thresholds, else THRESHOLD. A yes/no threshold set alone serves both forms."""
        calibrated = getattr(pool, "judge_thresholds", None) or JudgeThresholds(THRESHOLD, THRESHOLD)
        yes_no = calibrated.yes_no if self._threshold is None else self._threshold
        if self._open_threshold is not None:
            return JudgeThresholds(yes_no, self._open_threshold)
        return JudgeThresholds(yes_no, calibrated.open if self._threshold is None else self._threshold)

    def pool_for(self, media: frozenset[str]) -> str | None:
        """The judge pool for a request with `media`: the setting, else the strongest pool that takes them all."""
        pools = self._service.pipeline.pools.pools
        if self._model is not None:
            return self._model if any(p.name == self._model for p in pools) else None
        able = [p for p in pools if media <= set(p.modalities)]
        return max(able, key=lambda p: p.strength).name if able else None

    async def check(self, record: CompletionRecord) -> list[JudgedClaim] | None:
        """Each checkable claim of the record's answer, judged against the request's media; None when there is no
        judge for them (no pool takes the media, or the tenant is gone)."""
        media = frozenset(record.modalities) - {"text"}
        model = self.pool_for(media)
        if not media or model is None or not record.messages:
            return None
        judge_pool = next(p for p in self._service.pipeline.pools.pools if p.name == model)
        thresholds = self.thresholds_for(judge_pool)
        claims, asks = planned_questions(record.answer, media & set(judge_pool.modalities), self._max_questions)
        if not asks:
            return []
        policy_of = await self._callers(record.caller)  # the key's principal, read once per answer
        if policy_of is None:
            return None
        ids = [judge_request_id(record.request_id, n) for n in range(len(asks))]
        answers = await asyncio.gather(
            *(self._ask(record, model, q, o, rid, policy_of(rid)) for (_, _, q, o), rid in zip(asks, ids, strict=True))
        )
        judged = []
        for i, claim in enumerate(claims):
            mine = [(m, q, o, p) for (at, m, q, o), p in zip(asks, answers, strict=True) if at == i]
            if not mine:
                continue  # no medium of this request can speak to it
            best, form = _best_medium(mine, claim.negated, thresholds)
            verdict = JudgedClaim(
                claim.text, tuple(q for _, q, _, _ in mine), best, None, claim.negated, claim.about(), form
            )
            support = verdict.support
            supported = None if support is None else support >= thresholds.of(form)
            judged.append(dataclasses.replace(verdict, supported=supported))
        return judged

    async def _ask(
        self,
        record: CompletionRecord,
        model: str,
        question: str,
        asked: OpenQuestion | None,
        request_id: str,
        caller: CallerPolicy,
    ) -> float | None:
        """P(yes) to a yes/no question; for an open one (`asked`), the probability of the claimed value."""
        from serving.service import GenerationRequest

        request = GenerationRequest(
            model=model,
            messages=judge_messages(record.messages, question),
            params=GenerationParams(
                max_tokens=1 if asked is None else ANSWER_TOKENS, temperature=0.0, logprobs=TOP_LOGPROBS
            ),
            endpoint="grounding",
        )
        started = time.monotonic()
        tokens: list[TokenLogprob] = []
        try:
            completion = await self._service.start(request, caller)
            async with completion:
                async for delta in completion:
                    tokens += delta.logprobs or ()
            await completion.recorded()
        except TesseraError as exc:
            logger.warning("judge question %s about %s refused: %s", request_id, record.request_id, exc)
            return None
        if not tokens:
            return None
        p = yes_probability(tokens[0]) if asked is None else value_support(tokens, asked)
        logger.debug("judge %s: %r -> %s in %.2fs", request_id, question, p, time.monotonic() - started)
        return p


Asked = tuple[int, Medium, str, OpenQuestion | None]  # claim index, medium, question, the open question's slot


def planned_questions(
    answer: str, media: Iterable[str], max_questions: int = MAX_QUESTIONS
) -> tuple[list[CheckableClaim], list[Asked]]:
    """The claims the judge checks in `answer` (its first `max_questions` checkable claims, or the whole answer when
    it has none) and every question it asks about them, one engine call each: each claim in each of its media that
    the request carried and the judge pool takes (`media`). What the judge costs an answer is `len` of the second."""
    claims = checkable_claims(answer)
    whole = not claims
    claims = (claims or [whole_answer(answer)])[:max_questions]
    asks: list[Asked] = []
    for i, claim in enumerate(claims):
        for m in claim.media():
            if m in media:
                asks += [(i, m, q, o) for q, o in questions_for(claim, m, whole)]
    return claims, asks


def questions_for(claim: CheckableClaim, medium: Medium, whole: bool) -> list[tuple[str, OpenQuestion | None]]:
    """The questions that check a claim in one medium: its yes/no question; for a count in an image, or a day, an
    hour or a colour heard, the open question alone (grounding.open_questions); for a count heard, and for a colour
    or a place in an image, whether the thing is there (without its count, colour and place) and the open question
    for each."""
    asked = [] if whole else open_questions(claim, medium)
    if not asked:
        return [(question_for(claim, medium, whole), None)]
    if asked[0].slot == "count" and medium == "audio":  # the number heard, and of these things, not others
        mentioned = dataclasses.replace(thing_of(claim), count=None)
        return [(question_for(mentioned, medium, whole), None), (asked[0].text, asked[0])]
    if medium == "audio" or asked[0].slot == "count":
        return [(a.text, a) for a in asked]
    return [(question_for(thing_of(claim), medium, whole), None), *((a.text, a) for a in asked)]


def _best_medium(
    asked: list[tuple[Medium, str, OpenQuestion | None, float | None]], negated: bool, thresholds: JudgeThresholds
) -> tuple[float | None, str]:
    """A claim's support over the media it was asked of, and the form of question that support is read on.

    Per medium, the claim holds if every question about it does (the thing is there, and where it says), and its
    form is "open" where an open question was among them. A thing is there if any medium shows it: a claim speaks
    from the medium that clears its own form's threshold by the most, and a claim of absence is answered by the
    highest P(yes) (always yes/no questions)."""
    per_medium = []
    for medium in dict.fromkeys(m for m, *_ in asked):
        mine = [(o, p) for m, _, o, p in asked if m == medium]
        p = _all_of([p for _, p in mine])
        if p is not None:
            per_medium.append((p, "open" if any(o is not None for o, _ in mine) else "yes_no"))
    if not per_medium:
        return None, "yes_no"
    if negated:
        return max(p for p, _ in per_medium), "yes_no"
    return max(per_medium, key=lambda pf: pf[0] - thresholds.of(pf[1]))


def _all_of(supports: list[float | None]) -> float | None:
    """The probability that every question's answer bears the claim out (independent answers), over those the
    judge answered; None when it answered none."""
    known = [p for p in supports if p is not None]
    return math.prod(known) if known else None
