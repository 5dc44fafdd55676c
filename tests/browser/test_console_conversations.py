"""A named conversation in the console: a response's receipt links to the conversation it answered in, whose page
lists its items oldest first and the responses in it; another tenant's is not found."""

from __future__ import annotations

from bench.common import png_data_url
from tests.browser.pages import new_tenant, shoot, sign_in
from tests.openai_wire import openai_client


def test_a_receipt_links_to_its_conversation(server, browser):
    _, key = new_tenant(server, "conversations")
    client = openai_client(server.v1, key, timeout=120)
    image = {"type": "input_image", "image_url": png_data_url(3131)}
    conversation = client.conversations.create(
        items=[{"role": "user", "content": [image, {"type": "input_text", "text": "Remember this picture."}]}]
    )
    answered = client.responses.create(
        model="small", input="What was in it?", conversation=conversation.id, max_output_tokens=4, temperature=0
    )
    request_id = answered.id.replace("resp_", "chatcmpl-", 1)

    page = browser.new_page()
    sign_in(page, server, key)
    page.goto(f"{server.base_url}/console/requests/{request_id}")
    page.get_by_role("link", name=conversation.id).click()
    page.wait_for_url(f"**/console/conversations/{conversation.id}")
    items = page.locator("#items li").all_inner_texts()
    assert items[0] == "user: [image] Remember this picture."
    assert items[1] == "user: What was in it?"
    assert items[2].startswith("assistant: ")
    assert len(items) == 3
    assert page.locator("#responses a").inner_text() == answered.id
    shoot(page, "conversation")

    _, other = new_tenant(server, "conversations-other")
    stranger = browser.new_page()
    sign_in(stranger, server, other)
    assert stranger.goto(f"{server.base_url}/console/conversations/{conversation.id}").status == 404
