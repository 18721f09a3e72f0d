"""``GET /``: a page to try the run in a browser, self-contained (no file or script from
elsewhere). A language model's prompt streams its continuation from ``/v1/completions``;
any other run's text goes to its task endpoint, whose JSON is shown. Below, the attention
viewer (``/v1/attention``) shows the model's attention on the last input: the prompt and
its continuation, the last line (for a translation, with its translation as the decoder's
input). Everything the page shows from a request or a response is set as text, never
parsed as markup; the run's name is escaped into the page; the viewer, a page of its own,
runs in a sandboxed frame, without the page's origin and with no network."""

from __future__ import annotations

import html
import json

from ..tasks.base import Task

SCRIPT = """
const form = document.getElementById("form");
const input = document.getElementById("input");
const output = document.getElementById("output");
const settings = JSON.parse(document.getElementById("settings").textContent);
const headers = () => {
  const key = document.getElementById("key").value;
  const all = {"Content-Type": "application/json"};
  if (key) all["Authorization"] = "Bearer " + key;
  return all;
};
async function showAttention(text, target) {
  const frame = document.getElementById("attention");
  const note = document.getElementById("attention-note");
  const body = target === undefined ? {input: text} : {input: text, target};
  const response = await fetch("/v1/attention", {method: "POST", headers: headers(),
                                                 body: JSON.stringify(body)});
  const answer = await response.json();
  frame.hidden = !response.ok;
  note.textContent = response.ok ? "" : "No attention to show: " + answer.error.message;
  if (response.ok) frame.srcdoc = answer.html;
}
async function complete(prompt) {
  const body = {prompt, max_tokens: Number(document.getElementById("max").value),
                temperature: Number(document.getElementById("temperature").value), stream: true};
  const response = await fetch("/v1/completions", {method: "POST", headers: headers(),
                                                   body: JSON.stringify(body)});
  if (!response.ok) { output.textContent = (await response.json()).error.message; return; }
  output.textContent = prompt;
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += value;
    const events = buffer.split("\\n\\n");
    buffer = events.pop();
    for (const event of events) {
      const data = event.replace(/^data: /, "");
      if (data === "[DONE]") return showAttention(output.textContent);
      const chunk = JSON.parse(data);
      if (chunk.error) { output.textContent += "\\n[" + chunk.error.message + "]"; return; }
      output.textContent += chunk.choices[0].text;
    }
  }
}
async function run(text) {
  const lines = text.split("\\n").filter(Boolean);
  const input = settings.path === "/v1/answer"
    ? lines.map(line => {
        const [question, ...context] = line.split("\\t");
        return {question, context: context.join("\\t")};
      })
    : lines;
  const response = await fetch(settings.path, {method: "POST", headers: headers(),
                                               body: JSON.stringify({input})});
  const answer = await response.json();
  output.textContent = response.ok ? JSON.stringify(answer.data, null, 2)
                                   : answer.error.message;
  if (!response.ok) return;
  const last = answer.data[answer.data.length - 1];
  await showAttention(lines[lines.length - 1], last.translation);
}
form.addEventListener("submit", event => {
  event.preventDefault();
  output.textContent = "...";
  (settings.path === "/v1/completions" ? complete : run)(input.value)
    .catch(error => { output.textContent = String(error); });
});
"""

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; }
textarea { width: 100%; font: inherit; }
pre { white-space: pre-wrap; background: #f4f4f4; padding: 1rem; min-height: 4rem; }
label { margin-right: 1rem; }
iframe { width: 100%; height: 44rem; border: 1px solid #ddd; }
"""

HINTS = {
    "/v1/completions": "A prompt; the continuation streams below.",
    "/v1/classify": "A sentence a line (two, tab-separated, for pair tasks).",
    "/v1/tag": "A sentence a line; words are split on whitespace.",
    "/v1/answer": "question<TAB>context, a line each.",
    "/v1/translate": "A sentence a line.",
    "/v1/fill-mask": "A text with [MASK] a line.",
    "/v1/fill-spans": "A text with <extra_id_0>, <extra_id_1>, ... a line.",
}


def page(name: str, task: Task, path: str | None) -> str:
    """The page for a run called ``name`` of ``task``, whose inputs go to ``path`` (the
    completions for a language model)."""
    path = "/v1/completions" if task.command == "generate" else path
    settings = json.dumps({"path": path}).replace("</", "<\\/")
    decoding = task.command == "generate"
    controls = (
        '<label>max tokens <input id="max" type="number" value="100" min="1"></label>'
        '<label>temperature <input id="temperature" type="number" value="0.8" min="0" '
        'max="2" step="0.1"></label>'
        if decoding
        else ""
    )
    hint = HINTS.get(path or "", "This run has no endpoint to try here.")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(name)}</title>
<style>{STYLE}</style></head>
<body>
<h1>{html.escape(name)}</h1>
<p>A {html.escape(task.name)} run. {html.escape(hint)}</p>
<form id="form">
<textarea id="input" rows="6"></textarea>
<p>{controls}<label>API key <input id="key" type="password"></label>
<button type="submit">Run</button></p>
</form>
<pre id="output"></pre>
<p id="attention-note"></p>
<iframe id="attention" title="attention on the last input" sandbox="allow-scripts" hidden>
</iframe>
<script type="application/json" id="settings">{settings}</script>
<script>{SCRIPT}</script>
</body></html>
"""
