"""The OpenAI Agents SDK against Tessera's Responses API, unchanged but for `base_url`: a Runner with a function
tool, then a second run that continues the first with `previous_response_id`, which Tessera serves from the
stored conversation; and a session kept in a named conversation (`OpenAIConversationsSession`)."""

from __future__ import annotations

import asyncio

from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
from agents.memory import OpenAIConversationsSession
from agents.models.openai_responses import OpenAIResponsesModel
from openai import AsyncOpenAI

from tests.conftest import API_KEY
from tests.openai_wire import openai_client


def test_a_runner_with_a_tool_then_a_run_that_continues_it(server):
    set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        asked.append(city)
        return f"It is sunny in {city}."

    async def runs():
        client = AsyncOpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=120)
        model = OpenAIResponsesModel(model="large", openai_client=client)
        settings = ModelSettings(temperature=0, max_tokens=48, tool_choice="required", parallel_tool_calls=False)
        weather = Agent(
            name="weather",
            instructions="Answer questions about the weather with the get_weather tool.",
            model=model,
            tools=[get_weather],
            model_settings=settings,
            tool_use_behavior="stop_on_first_tool",
        )
        first = await Runner.run(weather, "What is the weather in Rome?", max_turns=2)
        chat = Agent(name="chat", model=model, model_settings=ModelSettings(temperature=0, max_tokens=16))
        second = await Runner.run(chat, "Thank you. Say goodbye.", previous_response_id=first.last_response_id)
        await client.close()
        return first, second

    first, second = asyncio.run(runs())
    assert len(asked) == 1
    assert first.final_output == f"It is sunny in {asked[0]}."
    assert isinstance(second.final_output, str)
    assert second.final_output
    stored = openai_client(server.v1, API_KEY, timeout=60).responses.retrieve(second.last_response_id)
    assert stored.previous_response_id == first.last_response_id
    assert stored.output_text == second.final_output


def test_a_session_in_a_conversation_replays_the_first_turn_into_the_second(server):
    set_tracing_disabled(True)
    first_question, second_question = "Say hello to Emma.", "Now say goodbye to her."

    async def runs():
        client = AsyncOpenAI(base_url=server.v1, api_key=API_KEY, max_retries=0, timeout=120)
        model = OpenAIResponsesModel(model="large", openai_client=client)
        agent = Agent(name="chat", model=model, model_settings=ModelSettings(temperature=0, max_tokens=48))
        session = OpenAIConversationsSession(openai_client=client)
        first = await Runner.run(agent, first_question, session=session)
        second = await Runner.run(agent, second_question, session=session)
        history = await session.get_items()
        sent = [item async for item in client.responses.input_items.list(second.last_response_id, order="asc")]
        await client.close()
        return session.session_id, first, second, history, sent

    conversation_id, first, second, history, sent = asyncio.run(runs())
    assert conversation_id.startswith("conv_")
    assert [item["role"] for item in history] == ["user", "assistant", "user", "assistant"]
    assert [item["content"][0]["text"] for item in history] == [
        first_question,
        first.final_output,
        second_question,
        second.final_output,
    ]
    replayed = [(item.role, _text(item.content)) for item in sent]  # what the second run sent: the first turn too
    assert replayed == [("user", first_question), ("assistant", first.final_output), ("user", second_question)]
    listed = openai_client(server.v1, API_KEY, timeout=60).conversations.items.list(conversation_id, order="asc")
    assert [item.role for item in listed] == ["user", "assistant", "user", "assistant"]


def _text(content) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)
