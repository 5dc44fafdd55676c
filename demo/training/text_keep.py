"""Text items for train-demo's joint stage, so the adapter that learns to read media leaves plain chat alone.

An adapter trained on media questions only drifts on text the pool served well before (a general-knowledge
question answered with a confident wrong sentence). The joint stage therefore mixes in text-only turns whose
answers are the text model's own greedy answers from before the adapter existed: self-distillation, which asks
nothing of the model it could not already do, and teaches it only to keep doing it.

The prompts are general questions and requests across everyday topics. The answers are generated once per work
directory (deterministic: greedy decoding on a fixed number of threads) and kept in `text_answers.json`, so a
resumed run trains on the same ones; answers the model did not finish within the budget are left out, since
training on a cut-off answer would teach it to stop mid-sentence.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from demo.golden import GoldenItem

TEXT_PROMPTS: tuple[str, ...] = (
    "What is the capital of Italy?",
    "What is the capital of Japan?",
    "What is the capital of Germany?",
    "What is the capital of Spain?",
    "Which planet is closest to the sun?",
    "What is the largest ocean on Earth?",
    "How many days are there in a week?",
    "How many legs does a spider have?",
    "What do bees make?",
    "What colour is the sky on a clear day?",
    "What is water made of?",
    "What is two plus two?",
    "What is ten minus three?",
    "Who wrote Romeo and Juliet?",
    "What language is spoken in Brazil?",
    "What is the boiling point of water in Celsius?",
    "Name a fruit that is yellow.",
    "What animal is known as the king of the jungle?",
    "What is the opposite of hot?",
    "What is the plural of mouse?",
    "Hello! How are you today?",
    "Can you tell me a fun fact?",
    "Give me a tip for sleeping better.",
    "What should I eat for breakfast?",
    "Write one sentence about the sea.",
    "Suggest a name for a pet cat.",
    "What is a computer?",
    "What does a doctor do?",
    "Why do leaves change colour in autumn?",
    "What is the tallest mountain in the world?",
    "Which is the longest river in the world?",
    "What is the freezing point of water?",
    "How many continents are there?",
    "What is the main ingredient of bread?",
    "What is the chemical symbol for gold?",
    "Translate 'thank you' into Spanish.",
    "What is photosynthesis?",
    "Who painted the Mona Lisa?",
    "What is the square root of nine?",
    "Tell me a short joke.",
    "What are the three primary colours?",
    "What season comes after winter?",
    "What is the capital of Canada?",
    "What is the largest animal on Earth?",
    "How many hours are there in a day?",
    "What gas do humans breathe in to live?",
    "Summarise what a library is in one sentence.",
    "What is the currency of the United Kingdom?",
)

# More of the same for a pool whose text model is cut from SmolLM2's (`small`): it re-learns its language from the
# whole model, and 48 turns repeated through a run are learnt by heart rather than as chat. None is a capital, a
# sum, an opposite or any other kind the routing eval asks (demo.routing_set), and none names France.
MORE_PROMPTS: tuple[str, ...] = (
    "How do I boil an egg?",
    "What is the difference between weather and climate?",
    "Why is exercise good for you?",
    "What is a noun?",
    "How does a rainbow form?",
    "What is the moon made of?",
    "Give me three tips for learning a new language.",
    "What is the job of the heart?",
    "Write a short poem about autumn.",
    "What is gravity?",
    "How do plants drink water?",
    "What is an email?",
    "Why do we need sleep?",
    "Describe a cat in two sentences.",
    "What is a volcano?",
    "How do I make a cup of tea?",
    "What is the internet?",
    "Why is the sea salty?",
    "What does a teacher do?",
    "What is a healthy lunch?",
    "How many minutes are there in an hour?",
    "What is the sun?",
    "Explain what a map is.",
    "What is a good way to save money?",
    "Why do birds fly south in winter?",
    "What is a bicycle?",
    "Write a thank-you note to a friend.",
    "What is electricity?",
    "How do fish breathe?",
    "What is the purpose of a bank?",
    "What happens when ice melts?",
    "Recommend a hobby for a rainy day.",
    "What is a dictionary used for?",
    "Who was Albert Einstein?",
    "What is the difference between a lake and a sea?",
    "How can I stay calm before an exam?",
    "What is a cloud made of?",
    "What does a farmer do?",
    "Why do we brush our teeth?",
    "What is a year?",
    "Describe a busy city street.",
    "What is recycling?",
    "How do airplanes stay in the air?",
    "What is a museum?",
    "Give me an idea for a birthday present.",
    "What are vitamins?",
    "What is the role of a firefighter?",
    "How does a thermometer work?",
)


def prompts_of(more: bool) -> tuple[str, ...]:
    """The everyday prompts a run's text turns answer: `TEXT_PROMPTS`, and `MORE_PROMPTS` too when `more`."""
    return TEXT_PROMPTS + MORE_PROMPTS if more else TEXT_PROMPTS


def text_item(index: int, prompt: str, answer: str) -> GoldenItem:
    """A text-only training item (no media): `encode` renders it as a plain user turn."""
    return GoldenItem(
        id=f"text-{index}", seed=0, mix="text", target="text", kind="text", question=prompt, answer=answer, facts={}
    )


def _fingerprint(prompts: tuple[str, ...], max_new_tokens: int) -> str:
    return hashlib.sha256(json.dumps([prompts, max_new_tokens]).encode()).hexdigest()


def own_answers(
    thinker: Any,
    processor: Any,
    path: Path,
    prompt_of: Any,
    max_new_tokens: int = 96,
    progress: Any = print,
    prompts: tuple[str, ...] | None = None,
) -> list[GoldenItem]:
    """The text model's greedy answers to `prompts` (`TEXT_PROMPTS` by default) as items, read from `path` or made
    and written there.

    Call before the adapter trains (its update is zero then), so the answers are the untouched model's."""
    import torch

    prompts = TEXT_PROMPTS if prompts is None else prompts
    key = _fingerprint(prompts, max_new_tokens)
    if path.exists():
        stored = json.loads(path.read_text())
        if stored.get("fingerprint") == key:
            return [text_item(i, p, a) for i, (p, a) in enumerate(stored["pairs"])]
    tokenizer = processor.tokenizer
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pairs: list[tuple[str, str]] = []
    for n, prompt in enumerate(prompts, 1):
        ids = tokenizer(prompt_of(prompt), return_tensors="pt")
        with torch.no_grad():
            out = thinker.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=end)
        new = out[0, ids["input_ids"].shape[1] :].tolist()
        if end in new:  # finished within the budget
            pairs.append((prompt, tokenizer.decode(new[: new.index(end)], skip_special_tokens=True).strip()))
        if n % 8 == 0 or n == len(prompts):
            progress(f"  text answers of the untouched model: {n}/{len(prompts)} ({len(pairs)} finished)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"fingerprint": key, "pairs": pairs}, indent=1) + "\n")
    return [text_item(i, p, a) for i, (p, a) in enumerate(pairs)]
