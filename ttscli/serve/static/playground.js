// The playground: speaks through this server's own API (/v1/models, /v1/audio/speech).
// The API key, when the server asks for one, lives in this page's memory only and travels in the
// Authorization header. What was played is written on #status's data-* attributes as well, so
// a script driving the page can read it.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { key: null, models: [], download: null, stream: null };

function headers(extra) {
  const out = Object.assign({}, extra);
  if (state.key) out.Authorization = "Bearer " + state.key;
  return out;
}

function setStatus(text, error) {
  $("status").textContent = text;
  $("status").classList.toggle("error", Boolean(error));
}

function record(values) {
  Object.assign($("status").dataset, values);
}

async function errorText(response) {
  try {
    return (await response.json()).error.message;
  } catch (e) {
    return response.status + " " + response.statusText;
  }
}

function fill(select, values) {
  select.replaceChildren(...values.map((v) => new Option(v, v)));
}

function currentModel() {
  return state.models.find((m) => m.id === $("model").value);
}

async function loadModels() {
  const response = await fetch("/v1/models", { headers: headers() });
  if (response.status === 401) {
    $("key-form").hidden = false;
    setStatus(state.key ? "That key was refused." : "This server needs its API key.", Boolean(state.key));
    return;
  }
  if (!response.ok) {
    setStatus(await errorText(response), true);
    return;
  }
  $("key-form").hidden = true;
  state.models = (await response.json()).data;
  fill($("model"), state.models.map((m) => m.id));
  showModel();
  setStatus("Ready.");
  record({ state: "ready" });
}

function showModel() {
  const model = currentModel();
  if (!model) return;
  fill($("voice"), model.voices || []);
  // pcm has no header an <audio> element could play: it is what Stream plays
  fill($("format"), (model.response_formats || ["wav"]).filter((f) => f !== "pcm"));
  $("format").value = $("format").querySelector('option[value="wav"]') ? "wav" : $("format").value;
  $("clone-controls").hidden = !model.clone;
  $("clone-note").hidden = Boolean(model.clone);
  $("clone-note").textContent = model.clone ? "" : model.id + " cannot clone voices: it speaks its own voices only.";
}

function readBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function requestBody(overrides) {
  const body = {
    model: $("model").value,
    input: $("text").value,
    voice: $("voice").value || undefined,
    response_format: $("format").value,
    speed: Number($("speed").value) || 1,
  };
  const file = currentModel() && currentModel().clone ? $("ref-audio").files[0] : undefined;
  if (file) {
    body.ref_audio = await readBase64(file);
    body.ref_text = $("ref-text").value || undefined;
  }
  return JSON.stringify(Object.assign(body, overrides));
}

async function post(overrides) {
  return fetch("/v1/audio/speech", {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: await requestBody(overrides),
  });
}

function busy(on) {
  $("speak").disabled = on;
  $("stream").disabled = on;
}

async function speak(event) {
  event.preventDefault();
  busy(true);
  record({ state: "speaking" });
  setStatus("Speaking\u2026");
  try {
    const response = await post({});
    if (!response.ok) {
      setStatus(await errorText(response), true);
      record({ state: "error" });
      return;
    }
    const blob = await response.blob();
    if (state.download) URL.revokeObjectURL(state.download);
    state.download = URL.createObjectURL(blob);
    const link = $("download");
    link.href = state.download;
    link.download = "speech." + $("format").value;
    link.hidden = false;
    play(state.download);
  } catch (e) {
    setStatus(String(e), true);
    record({ state: "error" });
  } finally {
    busy(false);
  }
}

function play(url) {
  const audio = $("audio");
  let started = 0;
  audio.hidden = false;
  audio.onplaying = () => {
    started = started || performance.now();
    record({ state: "playing" });
  };
  audio.onended = () => {
    let played = 0;
    for (let i = 0; i < audio.played.length; i++) played += audio.played.end(i) - audio.played.start(i);
    const elapsed = (performance.now() - started) / 1000;
    record({ state: "ended", duration: audio.duration, played: played, elapsed: elapsed });
    setStatus("Played " + played.toFixed(2) + " s of " + audio.duration.toFixed(2) + " s.");
  };
  audio.onerror = () => {
    setStatus("This browser cannot play " + $("format").value + "; download it instead.", true);
    record({ state: "error" });
  };
  audio.src = url;
  audio.play().catch((e) => setStatus(String(e), true));
}

// Streaming: 16-bit little-endian mono pcm as it is made, each piece played through Web Audio
// right after the one before, so speech starts before the text is finished.
async function stream() {
  busy(true);
  record({ state: "streaming" });
  setStatus("Streaming\u2026");
  const context = state.stream || new AudioContext();
  state.stream = context;
  try {
    await context.resume();
    const response = await post({ response_format: "pcm", stream: true });
    if (!response.ok) {
      setStatus(await errorText(response), true);
      record({ state: "error" });
      return;
    }
    const rate = Number(response.headers.get("X-Sample-Rate"));
    const reader = response.body.getReader();
    let carry = new Uint8Array(0);
    let next = 0;
    let first = 0;
    let samples = 0;
    let last = null;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const bytes = new Uint8Array(carry.length + value.length);
      bytes.set(carry);
      bytes.set(value, carry.length);
      const whole = bytes.length - (bytes.length % 2);
      carry = bytes.slice(whole);
      if (whole === 0) continue;
      const pcm = new Int16Array(bytes.buffer, 0, whole / 2);
      const buffer = context.createBuffer(1, pcm.length, rate);
      const channel = buffer.getChannelData(0);
      for (let i = 0; i < pcm.length; i++) channel[i] = pcm[i] / 32768;
      const source = context.createBufferSource();
      source.buffer = buffer;
      source.connect(context.destination);
      const at = Math.max(next, context.currentTime + 0.05);
      if (!first) {
        first = at;
        record({ state: "playing" });
      }
      source.start(at);
      next = at + buffer.duration;
      samples += pcm.length;
      last = source;
    }
    if (!last) {
      setStatus("The stream held no audio.", true);
      record({ state: "error" });
      return;
    }
    const seconds = samples / rate;
    setStatus("Streamed " + seconds.toFixed(2) + " s; playing\u2026");
    await new Promise((resolve) => { last.onended = resolve; });
    const played = context.currentTime - first;
    record({ state: "stream-ended", streamSeconds: seconds, streamPlayed: played, streamRate: rate });
    setStatus("Streamed and played " + seconds.toFixed(2) + " s.");
  } catch (e) {
    setStatus(String(e), true);
    record({ state: "error" });
  } finally {
    busy(false);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("model").addEventListener("change", showModel);
  $("speak-form").addEventListener("submit", speak);
  $("stream").addEventListener("click", stream);
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.key = $("key").value.trim() || null;
    $("key").value = "";
    loadModels();
  });
  loadModels().catch((e) => setStatus(String(e), true));
});
