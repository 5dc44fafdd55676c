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
    // The key goes in double quotes so the shell expands it; the body in single quotes, with any ' escaped.
    const shellBody = JSON.stringify(body).replace(/'/g, "'\\''");
    return "curl " + base + "/chat/completions \\\n  -H \"Authorization: Bearer $TESSERA_API_KEY\" -H 'Content-Type: application/json' \\\n  -d '" + shellBody + "'\n\n" +
      "import json, os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url=\"" + base + "\", api_key=os.environ[\"TESSERA_API_KEY\"])\n" +
      "request = json.loads(" + JSON.stringify(JSON.stringify(body)) + ")\n" +
      "for chunk in client.chat.completions.create(**request):\n    if chunk.choices:\n        print(chunk.choices[0].delta.content or \"\", end=\"\")\n";
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const fields = new FormData(form);
    answer.textContent = "";
    breakdown.replaceChildren();
    document.getElementById("summary-slot").replaceChildren();
    answer.setAttribute("aria-busy", "true");
    code.textContent = snippet(fields);
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
    let buffer = "", usage = null, id = null, tokens = 0;
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
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta.content;
        if (delta) {
          if (firstToken === null) firstToken = performance.now();
          tokens += 1;
          answer.textContent += delta;
        }
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
