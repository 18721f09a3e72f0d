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
from typing import Any

from ..predictions import MAX_NEW_TOKENS, TEMPERATURE, Option
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
const optionValue = element =>
  element.type === "checkbox" ? element.checked
    : element.type === "number" ? Number(element.value) : element.value;
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
function fields(line) {
  if (!settings.fields.length) return line;
  const texts = line.split("\\t");
  const last = settings.fields.length - 1;
  return Object.fromEntries(settings.fields.map(
    (field, i) => [field, i < last ? texts[i] ?? "" : texts.slice(last).join("\\t")]));
}
async function run(text) {
  const lines = text.split("\\n").filter(Boolean);
  const body = {input: lines.map(fields)};
  for (const name of settings.options) {
    const element = document.getElementById("option-" + name);
    if (element.value !== "") body[name] = optionValue(element);
  }
  const response = await fetch(settings.path, {method: "POST", headers: headers(),
                                               body: JSON.stringify(body)});
  const answer = await response.json();
  output.textContent = response.ok ? JSON.stringify(answer.data, null, 2)
                                   : answer.error.message;
  if (!response.ok) return;
  const last = answer.data[answer.data.length - 1];
  await showAttention(lines[lines.length - 1], settings.target && last[settings.target]);
}
form.addEventListener("submit", event => {
  event.preventDefault();
  output.textContent = "...";
  (settings.decodes ? complete : run)(input.value)
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


def control(option: Option, element: str) -> str:
    """A label and an input (id ``element``) for ``option``, at its default: a number
    within the bounds of a request, a checkbox or a text."""
    attributes: dict[str, Any] = {"id": element, "title": option.help}
    if option.type is bool:
        attributes |= {"type": "checkbox"} | ({"checked": ""} if option.default else {})
    elif option.type is str:
        attributes |= {"type": "text", "value": option.default or ""}
    else:
        bounds = {"min": option.low, "max": option.most}
        attributes |= {
            "type": "number",
            "value": "" if option.default is None else option.default,
            "step": 1 if option.type is int else "any",
        } | {key: bound for key, bound in bounds.items() if bound is not None}
    shown = " ".join(f'{key}="{html.escape(str(value))}"' for key, value in attributes.items())
    return f"<label>{html.escape(option.name.replace('_', ' '))} <input {shown}></label>"


def page(name: str, task: Task) -> str:
    """The page for a run called ``name`` of ``task``: a language model's prompt goes to
    the completions, another prediction's lines to its endpoint, with its options."""
    prediction = task.predicts
    hint = prediction.hint if prediction else "This run has no endpoint to try here."
    options = [o for o in prediction.options if o.served] if prediction else []
    controls = "".join(control(option, f"option-{option.name}") for option in options)
    path = prediction and prediction.endpoint
    if task.decodes:  # OpenAI's completions, which read none of the options
        path, options = "/v1/completions", []
        controls = control(MAX_NEW_TOKENS, "max") + control(TEMPERATURE, "temperature")
    settings = {
        "path": path,
        "decodes": task.decodes,
        "fields": prediction.reads.fields if prediction else (),
        "options": [option.name for option in options],
        "target": prediction and prediction.decoder_reads,
    }
    shown = json.dumps(settings).replace("</", "<\\/")
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
<script type="application/json" id="settings">{shown}</script>
<script>{SCRIPT}</script>
</body></html>
"""
