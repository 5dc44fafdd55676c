// The playground recorder's audio worklet (loaded by recorder.js): mixes its input down to mono and posts it
// in batches; on "flush" posts what is left and a final message. A file of its own, not a blob: URL, so the
// console's content security policy (script-src 'self') lets it load.
class TesseraRecorder extends AudioWorkletProcessor {
  constructor() {
    super();
    this.buffer = new Float32Array(4096);
    this.used = 0;
    this.port.onmessage = () => {
      this.port.postMessage({ samples: this.buffer.slice(0, this.used), done: true });
      this.used = 0;
    };
  }
  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    const frames = channels[0].length;
    for (let i = 0; i < frames; i++) {
      let sum = 0;
      for (let c = 0; c < channels.length; c++) sum += channels[c][i];
      this.buffer[this.used++] = sum / channels.length;
      if (this.used === this.buffer.length) {
        this.port.postMessage({ samples: this.buffer, done: false });
        this.buffer = new Float32Array(4096);
        this.used = 0;
      }
    }
    return true;
  }
}
registerProcessor("tessera-recorder", TesseraRecorder);
  
