// The playground: image previews, streaming the answer from the console's run endpoint, and the breakdown.
(function () {
  const form = document.getElementById("prompt");
  const answer = document.getElementById("answer");
  const breakdown = document.getElementById("breakdown");
  const code = document.getElementById("code");
  const toast = document.getElementById("toast");

  // Drag and drop: images join the image input (after those already chosen); an audio file replaces the clip.
  const dropzone = document.getElementById("dropzone");
  const imagesInput = document.getElementById("images");
  const audioInput = document.getElementById("audio");
  for (const name of ["dragenter", "dragover"]) {
    dropzone.addEventListener(name, (event) => { event.preventDefault(); dropzone.classList.add("dragging"); });
  }
  dropzone.addEventListener("dragleave", () => dropzone.classList.remove("dragging"));
  dropzone.addEventListener("drop", (event) => {
    event.preventDefault();
    dropzone.classList.remove("dragging");
    const dropped = Array.from(event.dataTransfer.files);
    const images = dropped.filter((f) => f.type.startsWith("image/"));
    const audio = dropped.find((f) => f.type.startsWith("audio/"));
    const ignored = dropped.length - images.length - (audio ? 1 : 0);
    if (images.length) {
      const all = new DataTransfer();
      for (const f of imagesInput.files) all.items.add(f);
      for (const f of images) all.items.add(f);
      imagesInput.files = all.files;
      imagesInput.dispatchEvent(new Event("change", { bubbles: true }));
    }
    if (audio) {
      const one = new DataTransfer();
      one.items.add(audio);
      audioInput.files = one.files;
      audioInput.dispatchEvent(new Event("change", { bubbles: true }));
    }
    document.getElementById("drop-status").textContent =
      (images.length ? images.length + " image(s) added. " : "") + (audio ? "Audio: " + audio.name + ". " : "") +
      (ignored ? ignored + " file(s) ignored: only images and audio are accepted." : "");
  });

  document.getElementById("images").addEventListener("change", (event) => {
    const previews = document.getElementById("previews");
    previews.replaceChildren();
    for (const file of event.target.files) {
      const img = document.createElement("img");
      img.alt = "Preview of " + file.name;
      img.src = URL.createObjectURL(file);
      previews.appendChild(img);
    }
  });

  // Structured output and tools. The schema box is only sent with the JSON schema format (a disabled field is
  // not submitted); the tool-choice select offers each function named in the tools box, once it parses.
  const formatSelect = document.getElementById("response_format");
  const schemaBox = document.getElementById("json_schema");
  const toolsBox = document.getElementById("tools");
  const toolChoice = document.getElementById("tool_choice");
  function syncFormat() {
    const on = formatSelect.value === "json_schema";
    document.getElementById("schema-group").hidden = !on;
    schemaBox.disabled = !on;
  }
  function syncToolNames() {
    const kept = toolChoice.value;
    let names = [];
    try { names = (toolsFrom(toolsBox.value) || []).map((t) => t.function && t.function.name); } catch (_) { /* not JSON yet */ }
    names = [...new Set(names.filter((n) => typeof n === "string" && n.trim()))];
    const old = toolChoice.querySelector("optgroup");
    if (old) old.remove();
    if (names.length) {
      const group = document.createElement("optgroup");
      group.label = "Call this function";
      for (const name of names) group.appendChild(new Option(name, "function:" + name));
      toolChoice.appendChild(group);
    }
    toolChoice.value = Array.from(toolChoice.options).some((o) => o.value === kept) ? kept : "auto";
  }
  formatSelect.addEventListener("change", syncFormat);
  toolsBox.addEventListener("input", syncToolNames);
  syncFormat();
  syncToolNames();

  // The same readings of the boxes as the server's (console/controllers.py), for the copied code.
  function parseBox(text) {
    const t = (text || "").trim();
    return t ? JSON.parse(t) : null;
  }
  function toolsFrom(text) {
    let parsed = parseBox(text);
    if (parsed === null) return null;
    if (!Array.isArray(parsed)) parsed = [parsed];
    const tools = parsed.map((item) => {
      if ("function" in item) return { ...item, type: "function" };
      const fn = { ...item };
      delete fn.type;
      return { type: "function", function: fn };
    });
    return tools.length ? tools : null;
  }
  function responseFormat(fields) {
    const kind = fields.get("response_format") || "text";
    if (kind === "json_object") return { type: "json_object" };
    if (kind !== "json_schema") return null;
    const schema = parseBox(fields.get("json_schema"));
    if (schema && typeof schema.schema === "object" && schema.schema !== null && "name" in schema) return { type: "json_schema", json_schema: schema };
    return { type: "json_schema", json_schema: { name: "answer", schema, strict: true } };
  }
  function toolChoiceFrom(fields, tools) {
    const raw = (fields.get("tool_choice") || "").trim();
    if (!tools || !raw) return null;
    if (["auto", "required", "none"].includes(raw)) return raw;
    return { type: "function", function: { name: raw.replace(/^function:/, "").trim() } };
  }

  // Each message is a new element, so the toast's fade-out starts again for every one.
  function showToast(message) {
    const p = document.createElement("p");
    p.className = "toast-message";
    p.setAttribute("role", "alert");
    p.textContent = message;
    toast.replaceChildren(p);
  }

  function row(label, value) {
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    dd.textContent = value;
    dd.dataset.field = label;
    breakdown.append(dt, dd);
  }

  function snippet(fields) {
    const base = form.dataset.baseUrl;
    const content = [{ type: "text", text: fields.get("text") }];
    const images = form.querySelector("#images").files.length;
    for (let i = 0; i < images; i++) content.push({ type: "image_url", image_url: { url: "data:image/png;base64,<...>" } });
    if (form.querySelector("#audio").files.length) content.push({ type: "input_audio", input_audio: { data: "<base64>", format: "wav" } });
    const messages = [];
    if ((fields.get("system") || "").trim()) messages.push({ role: "system", content: fields.get("system").trim() });
    messages.push({ role: "user", content });
    const body = { model: fields.get("model"), messages, max_tokens: Number(fields.get("max_tokens")), temperature: Number(fields.get("temperature")), stream: true };
    const format = responseFormat(fields);
    if (format) body.response_format = format;
    const tools = toolsFrom(fields.get("tools"));
    if (tools) body.tools = tools;
    const choice = toolChoiceFrom(fields, tools);
    if (choice) body.tool_choice = choice;
    // The key goes in double quotes so the shell expands it; the body in single quotes, with any ' escaped.
    const shellBody = JSON.stringify(body).replace(/'/g, "'\\''");
    // Streamed tool calls come in pieces: the function's name first, then its arguments a bit at a time.
    const printCalls = tools
      ? "        for call in delta.tool_calls or []:\n            if call.function and call.function.name:\n                print(\"\\n\" + call.function.name, end=\" \")\n" +
        "            if call.function and call.function.arguments:\n                print(call.function.arguments, end=\"\")\n"
      : "";
    return "curl " + base + "/chat/completions \\\n  -H \"Authorization: Bearer $TESSERA_API_KEY\" -H 'Content-Type: application/json' \\\n  -d '" + shellBody + "'\n\n" +
      "import json, os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url=\"" + base + "\", api_key=os.environ[\"TESSERA_API_KEY\"])\n" +
      "request = json.loads(" + JSON.stringify(JSON.stringify(body)) + ")\n" +
      "for chunk in client.chat.completions.create(**request):\n    if chunk.choices:\n        delta = chunk.choices[0].delta\n        print(delta.content or \"\", end=\"\")\n" +
      printCalls;
  }

  // Tool calls as they stream: pieces keyed by index, the first with the id and name, the rest adding arguments.
  function showCalls(calls) {
    const list = document.getElementById("tool-calls");
    document.getElementById("tool-calls-box").hidden = calls.length === 0;
    calls.forEach((call, index) => {
      if (!call) return;
      let block = list.querySelector("pre[data-index='" + index + "']");
      if (!block) {
        block = document.createElement("pre");
        block.className = "tool-call";
        block.dataset.index = String(index);
        list.appendChild(block);
      }
      let args = call.arguments;
      try { args = JSON.stringify(JSON.parse(call.arguments), null, 2); } catch (_) { /* still streaming, or not JSON */ }
      block.dataset.name = call.name;
      block.textContent = call.name + "(" + args + ")";
    });
  }

  // Modes: chat, transcribe a clip, embed texts. Each shows only its own fields and models; hidden fields are
  // disabled, so they are neither required nor sent.
  const taskSlot = document.getElementById("task-slot");
  const modelSelect = document.getElementById("model");
  const mode = () => (form.querySelector('input[name="mode"]:checked') || { value: "chat" }).value;
  function syncMode() {
    const current = mode();
    for (const group of form.querySelectorAll("[data-modes]")) {  // document order: a nested group decides last
      const on = group.dataset.modes.split(" ").includes(current);
      group.hidden = !on;
      for (const input of group.querySelectorAll("input, textarea, select")) input.disabled = !on;
    }
    for (const option of modelSelect.options) {
      const on = option.dataset.mode === current;
      option.hidden = !on;
      option.disabled = !on;
    }
    if (modelSelect.selectedOptions.length === 0 || modelSelect.selectedOptions[0].disabled) {
      const first = Array.from(modelSelect.options).find((o) => !o.disabled);
      if (first) modelSelect.value = first.value;
    }
    document.getElementById("run").textContent = { chat: "Run", transcribe: "Transcribe", embed: "Embed" }[current];
  }
  for (const radio of form.querySelectorAll('input[name="mode"]')) radio.addEventListener("change", syncMode);
  syncMode();

  function taskSnippet(fields) {
    const head = "from openai import OpenAI\n\nclient = OpenAI(base_url=" + JSON.stringify(form.dataset.baseUrl) + ", api_key=\"YOUR_KEY\")\n";
    if (mode() === "embed") {
      const texts = String(fields.get("texts") || "").split("\n").map((t) => t.trim()).filter(Boolean);
      return head + "resp = client.embeddings.create(model=" + JSON.stringify(fields.get("model")) + ", input=" + JSON.stringify(texts) + ")\nprint([len(d.embedding) for d in resp.data])\n";
    }
    return head + "with open(\"clip.wav\", \"rb\") as f:\n    print(client.audio.transcriptions.create(model=" + JSON.stringify(fields.get("model")) + ", file=f).text)\n";
  }

  async function runTask(fields) {
    code.textContent = taskSnippet(fields);
    answer.setAttribute("aria-busy", "true");
    const path = mode() === "embed" ? "/console/playground/embed" : "/console/playground/transcribe";
    const response = await fetch(path, { method: "POST", body: fields, headers: { "x-csrftoken": fields.get("_csrf_token") } });
    answer.setAttribute("aria-busy", "false");
    if (!response.ok) {
      const err = await response.json().catch(() => ({ error: { message: response.status + " " + response.statusText } }));
      showToast(err.error.message);
      return;
    }
    taskSlot.innerHTML = await response.text();  // the server's own escaped fragment
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const fields = new FormData(form);
    taskSlot.replaceChildren();
    if (mode() !== "chat") {
      answer.textContent = "";
      breakdown.replaceChildren();
      document.getElementById("summary-slot").replaceChildren();
      document.getElementById("tool-calls-box").hidden = true;
      await runTask(fields);
      return;
    }
    answer.textContent = "";
    document.getElementById("tool-calls").replaceChildren();
    document.getElementById("tool-calls-box").hidden = true;
    breakdown.replaceChildren();
    document.getElementById("summary-slot").replaceChildren();
    answer.setAttribute("aria-busy", "true");
    // A box that does not parse leaves no code to copy; the server's refusal says what is wrong.
    try { code.textContent = snippet(fields); } catch (_) { code.textContent = ""; }
    const started = performance.now();
    let firstToken = null;
    const response = await fetch("/console/playground/run", {
      method: "POST", body: fields, headers: { "x-csrftoken": fields.get("_csrf_token") },
    });
    const type = response.headers.get("content-type") || "";
    if (response.redirected || (response.ok && !type.startsWith("text/event-stream"))) {
      // The session ended: the server sent the sign-in page instead of a stream.
      showToast("Your session has ended; sign in again.");
      answer.setAttribute("aria-busy", "false");
      setTimeout(() => { window.location.assign("/console/signin"); }, 2000);
      return;
    }
    if (!response.ok) {
      const err = await response.json().catch(() => ({ error: { message: response.status + " " + response.statusText } }));
      showToast(err.error.message);
      answer.setAttribute("aria-busy", "false");
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", usage = null, id = null, tokens = 0, finish = null;
    const calls = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const line = buffer.slice(0, cut).replace(/^data: /, "");
        buffer = buffer.slice(cut + 2);
        if (line === "[DONE]") continue;
        let chunk;
        try { chunk = JSON.parse(line); } catch (_) { continue; }
        if (chunk.error) { showToast(chunk.error.message); continue; }
        id = chunk.id;
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices && chunk.choices[0];
        if (!choice) continue;
        if (choice.finish_reason) finish = choice.finish_reason;
        const delta = choice.delta || {};
        if (delta.content || delta.tool_calls) {
          if (firstToken === null) firstToken = performance.now();
          tokens += 1;
        }
        if (delta.content) answer.textContent += delta.content;
        for (const piece of delta.tool_calls || []) {
          const index = piece.index || 0;
          const call = calls[index] || (calls[index] = { id: "", name: "", arguments: "" });
          if (piece.id) call.id = piece.id;
          if (piece.function && piece.function.name) call.name += piece.function.name;
          if (piece.function && piece.function.arguments) call.arguments += piece.function.arguments;
        }
        if (delta.tool_calls) showCalls(calls);
      }
    }
    const total = performance.now() - started;
    answer.setAttribute("aria-busy", "false");
    if (!usage) return; // the stream ended with an error, shown above; there is no breakdown to show
    const d = usage.prompt_tokens_details;
    row("model", response.headers.get("x-tessera-model") + " (" + response.headers.get("x-tessera-route") + ")");
    row("text tokens", d.text_tokens);
    row("image tokens", d.image_tokens + (d.cached_image_tokens ? " (" + d.cached_image_tokens + " cached)" : ""));
    row("audio tokens", d.audio_tokens + (d.cached_audio_tokens ? " (" + d.cached_audio_tokens + " cached)" : ""));
    row("prefix-cached tokens", d.cached_tokens);
    row("output tokens", usage.completion_tokens);
    row("finish reason", finish || "n/a");
    row("TTFT", firstToken === null ? "n/a" : Math.round(firstToken - started) + " ms");
    row("TPOT", firstToken === null || usage.completion_tokens < 2 ? "n/a" : Math.round((total - (firstToken - started)) / (usage.completion_tokens - 1)) + " ms");
    row("total latency", Math.round(total) + " ms");
    row("request id", id);
    // Cost and grounding come from the usage record, written just after the stream ends: HTMX fetches
    // them and keeps polling (a bounded number of times) while they are still pending.
    const slot = document.getElementById("summary-slot");
    const summary = document.createElement("div");
    summary.setAttribute("hx-get", "/console/requests/" + encodeURIComponent(id) + "/summary");
    summary.setAttribute("hx-trigger", "load delay:200ms");
    summary.setAttribute("hx-swap", "outerHTML");
    slot.replaceChildren(summary);
    if (window.htmx) window.htmx.process(summary);
  });
  // Every handler is attached: from here a click on Run works. The console's time-to-interactive mark.
  performance.mark("tessera:interactive");
})();
