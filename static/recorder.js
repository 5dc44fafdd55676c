// The playground's microphone recorder: records in the browser and attaches a 16 kHz mono 16-bit PCM WAV
// to the audio file input, so the playground form submits it like a chosen file.
//
// Contract with the page (templates/console/playground.html.jinja2):
//   <button type="button" id="record" aria-pressed="false">Record</button>
//       Toggles recording. While recording its text is "Stop" and aria-pressed is "true".
//       Hidden and disabled when the browser can't record (no getUserMedia / AudioContext, or not a
//       secure context: the console must be served over HTTPS or from localhost).
//   <span id="record-status" aria-live="polite"></span>
//   <span id="record-timer"></span>   (optional) the elapsed seconds, kept out of the live region
//       "Recording…", "Recorded 4.2 s", or an error (permission denied, no microphone, unsupported).
//   <input id="audio" name="audio" type="file">
//       When recording stops, its files are replaced by one File "recording.wav" (audio/wav) via a
//       DataTransfer, and "input" and "change" events are dispatched on it. FormData(form) then carries
//       it unchanged. Choosing a file by hand afterwards clears the recording's preview.
//   <div id="audio-preview"></div>
//       Receives an <audio controls> preview of the recording.
//   <script src="/static/recorder.js" defer></script>
// Recordings stop by themselves after 30 s. If #record is absent, the script only defines the encoder.
//
// window.tesseraEncodeWav(float32Array, sampleRate) -> Blob
//   Resamples mono float samples (nominally -1..1) to 16000 Hz, clamps, and returns a WAV Blob:
//   44-byte RIFF/WAVE header (PCM, 1 channel, 16000 Hz, 16 bits) followed by little-endian Int16 data.
(function () {
  const TARGET_RATE = 16000;
  const MAX_SECONDS = 30;
  const WORKLET_URL = "/static/recorder-worklet.js"; // the capture processor (see connectCapture)

  // Downsampling averages each output sample's span of input (a box filter, which keeps most aliasing
  // out of speech); upsampling interpolates linearly.
  function resample(samples, rate) {
    const n = samples.length;
    if (rate === TARGET_RATE) return Float32Array.from(samples);
    const ratio = rate / TARGET_RATE;
    const length = Math.round(n / ratio);
    const out = new Float32Array(length);
    if (n === 0) return out;
    if (ratio > 1) {
      for (let i = 0; i < length; i++) {
        const start = i * ratio;
        const end = Math.min((i + 1) * ratio, n);
        if (end <= start) { out[i] = samples[n - 1]; continue; }
        let acc = 0;
        for (let k = Math.floor(start); k < end; k++) acc += samples[k] * (Math.min(k + 1, end) - Math.max(k, start));
        out[i] = acc / (end - start);
      }
    } else {
      for (let i = 0; i < length; i++) {
        const pos = i * ratio;
        const k = Math.floor(pos);
        const frac = pos - k;
        const a = samples[Math.min(k, n - 1)];
        const b = samples[Math.min(k + 1, n - 1)];
        out[i] = a + (b - a) * frac;
      }
    }
    return out;
  }

  function encodeWav(samples, sampleRate) {
    if (!samples || typeof samples.length !== "number") throw new TypeError("tesseraEncodeWav: samples must be an array of numbers");
    if (!(sampleRate > 0) || !Number.isFinite(sampleRate)) throw new RangeError("tesseraEncodeWav: sampleRate must be a positive number");
    const pcm = resample(samples, sampleRate);
    const dataBytes = pcm.length * 2;
    const view = new DataView(new ArrayBuffer(44 + dataBytes));
    const ascii = (offset, text) => { for (let i = 0; i < text.length; i++) view.setUint8(offset + i, text.charCodeAt(i)); };
    ascii(0, "RIFF");
    view.setUint32(4, 36 + dataBytes, true);
    ascii(8, "WAVE");
    ascii(12, "fmt ");
    view.setUint32(16, 16, true);              // fmt chunk size
    view.setUint16(20, 1, true);               // PCM
    view.setUint16(22, 1, true);               // mono
    view.setUint32(24, TARGET_RATE, true);
    view.setUint32(28, TARGET_RATE * 2, true); // byte rate
    view.setUint16(32, 2, true);               // block align
    view.setUint16(34, 16, true);              // bits per sample
    ascii(36, "data");
    view.setUint32(40, dataBytes, true);
    for (let i = 0; i < pcm.length; i++) {
      let s = pcm[i];
      s = s > 1 ? 1 : s < -1 ? -1 : s || 0; // clamp; NaN becomes silence
      view.setInt16(44 + i * 2, Math.round(s < 0 ? s * 0x8000 : s * 0x7fff), true);
    }
    return new Blob([view.buffer], { type: "audio/wav" });
  }

  window.tesseraEncodeWav = encodeWav;

  const button = document.getElementById("record");
  const status = document.getElementById("record-status");
  const timer = document.getElementById("record-timer"); // elapsed seconds: shown, not announced every tick
  const input = document.getElementById("audio");
  const preview = document.getElementById("audio-preview");
  if (!button || !input) return;

  const AudioContextClass = window.AudioContext || window.webkitAudioContext;
  function say(text) { if (status) status.textContent = text; }

  if (!window.isSecureContext || !navigator.mediaDevices || !navigator.mediaDevices.getUserMedia || !AudioContextClass) {
    button.disabled = true;
    button.hidden = true;
    say(window.isSecureContext === false
      ? "Recording needs a secure (HTTPS) connection; you can still choose an audio file."
      : "This browser can't record audio; you can still choose an audio file.");
    return;
  }

  let session = null;     // the recording in progress
  let busy = false;       // starting or stopping
  let previewUrl = null;
  let settingFiles = false;

  function setRecording(on) {
    button.textContent = on ? "Stop" : "Record";
    button.setAttribute("aria-pressed", on ? "true" : "false");
  }

  function clearPreview() {
    if (previewUrl) URL.revokeObjectURL(previewUrl);
    previewUrl = null;
    if (preview) preview.replaceChildren();
  }

  function describe(error) {
    const name = error && error.name;
    if (name === "NotAllowedError" || name === "PermissionDeniedError" || name === "SecurityError") return "Microphone permission was denied. Allow it in the browser's site settings to record.";
    if (name === "NotFoundError" || name === "DevicesNotFoundError" || name === "OverconstrainedError") return "No microphone was found.";
    if (name === "NotReadableError" || name === "TrackStartError") return "The microphone is in use by another application or can't be opened.";
    return "Couldn't start recording: " + ((error && error.message) || String(error));
  }

  async function connectCapture(context, source, chunks) {
    const sink = context.createGain();
    sink.gain.value = 0; // keep the graph pulled without playing the microphone back
    sink.connect(context.destination);
    if (context.audioWorklet && window.AudioWorkletNode) {
      try {
        await context.audioWorklet.addModule(WORKLET_URL);
        const node = new AudioWorkletNode(context, "tessera-recorder", { numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1] });
        let finish = null;
        node.port.onmessage = (event) => {
          if (event.data.samples.length) chunks.push(event.data.samples);
          if (event.data.done && finish) finish();
        };
        source.connect(node);
        node.connect(sink);
        return {
          async stop() {
            await new Promise((resolve) => {
              finish = resolve;
              node.port.postMessage("flush");
              setTimeout(resolve, 500); // don't hang if the processor never answers
            });
            node.port.onmessage = null;
            source.disconnect();
            node.disconnect();
            sink.disconnect();
          },
        };
      } catch (error) {
        // The worklet could not load (an old browser, or the file is unreachable): fall back below.
      }
    }
    const processor = context.createScriptProcessor(4096, Math.max(1, Math.min(2, source.channelCount || 1)), 1);
    processor.onaudioprocess = (event) => {
      const buffer = event.inputBuffer;
      const mono = new Float32Array(buffer.length);
      for (let c = 0; c < buffer.numberOfChannels; c++) {
        const data = buffer.getChannelData(c);
        for (let i = 0; i < mono.length; i++) mono[i] += data[i] / buffer.numberOfChannels;
      }
      chunks.push(mono);
    };
    source.connect(processor);
    processor.connect(sink);
    return {
      async stop() {
        processor.onaudioprocess = null;
        source.disconnect();
        processor.disconnect();
        sink.disconnect();
      },
    };
  }

  async function start() {
    busy = true;
    button.disabled = true;
    say("Waiting for the microphone\u2026");
    let stream = null, context = null;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      context = new AudioContextClass();
      if (context.state === "suspended") await context.resume();
      const chunks = [];
      const source = context.createMediaStreamSource(stream);
      const capture = await connectCapture(context, source, chunks);
      const started = performance.now();
      session = { stream, context, chunks, capture, started, ticker: null, limit: null };
      session.ticker = setInterval(() => {
        if (timer) timer.textContent = Math.floor((performance.now() - started) / 1000) + " s";
      }, 250);
      session.limit = setTimeout(() => { stop(); }, MAX_SECONDS * 1000);
      for (const track of stream.getAudioTracks()) track.addEventListener("ended", () => { if (session && session.stream === stream) stop(); });
      setRecording(true);
      if (timer) timer.textContent = "0 s";
      say("Recording\u2026");
    } catch (error) {
      if (stream) for (const track of stream.getTracks()) track.stop();
      if (context) context.close().catch(() => {});
      session = null;
      say(describe(error));
    } finally {
      busy = false;
      button.disabled = false;
    }
  }

  async function stop() {
    if (!session || busy) return;
    const current = session;
    busy = true;
    button.disabled = true;
    clearInterval(current.ticker);
    if (timer) timer.textContent = "";
    clearTimeout(current.limit);
    try {
      await current.capture.stop();
    } catch (error) {
      // Tear down regardless.
    }
    for (const track of current.stream.getTracks()) track.stop();
    const rate = current.context.sampleRate;
    try { await current.context.close(); } catch (error) { /* already closed */ }
    session = null;
    setRecording(false);
    busy = false;
    button.disabled = false;

    const limit = Math.round(MAX_SECONDS * rate);
    let total = 0;
    for (const chunk of current.chunks) total += chunk.length;
    const samples = new Float32Array(Math.min(total, limit));
    let offset = 0;
    for (const chunk of current.chunks) {
      if (offset >= samples.length) break;
      const part = chunk.subarray(0, samples.length - offset);
      samples.set(part, offset);
      offset += part.length;
    }
    if (samples.length === 0) { say("No audio was captured. Check the microphone and try again."); return; }

    const blob = encodeWav(samples, rate);
    const seconds = (blob.size - 44) / 2 / TARGET_RATE;
    try {
      const file = new File([blob], "recording.wav", { type: "audio/wav" });
      const dt = new DataTransfer();
      dt.items.add(file);
      settingFiles = true;
      input.files = dt.files;
      input.dispatchEvent(new Event("input", { bubbles: true }));
      input.dispatchEvent(new Event("change", { bubbles: true }));
    } catch (error) {
      say("Recorded " + seconds.toFixed(1) + " s, but this browser can't attach it to the form.");
      return;
    } finally {
      settingFiles = false;
    }
    clearPreview();
    if (preview) {
      const audio = document.createElement("audio");
      audio.controls = true;
      previewUrl = URL.createObjectURL(blob);
      audio.src = previewUrl;
      audio.setAttribute("aria-label", "Recorded audio preview");
      preview.appendChild(audio);
    }
    say("Recorded " + seconds.toFixed(1) + " s");
  }

  button.addEventListener("click", () => {
    if (busy) return;
    if (session) stop(); else start();
  });

  input.addEventListener("change", () => {
    if (settingFiles) return;
    clearPreview(); // a file chosen by hand replaces the recording
    say("");
  });

  if (input.form) input.form.addEventListener("reset", () => { clearPreview(); say(""); });

  window.addEventListener("pagehide", () => {
    if (!session) return;
    for (const track of session.stream.getTracks()) track.stop();
    session.context.close().catch(() => {});
  });
})();
