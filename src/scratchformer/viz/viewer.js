/* The attention viewer: draws the weights held in #attention-data as lines between tokens
   (like bertviz's head view) or as a heatmap. Plain DOM, no libraries; tokens are only ever
   inserted as text (textContent), never parsed as HTML. */
(function () {
  "use strict";

  const data = JSON.parse(document.getElementById("attention-data").textContent);
  const MIN_WEIGHT = data.minLineWeight; // lighter lines are not drawn (the one threshold)
  const LINES_WIDTH = 260; // width of the lines' SVG, in pixels
  const LABELS = {
    encoder: "encoder self-attention",
    decoder: "decoder self-attention",
    cross: "cross-attention",
  };

  const byId = (id) => document.getElementById(id);
  const controls = {
    kind: byId("kind"), layer: byId("layer"), head: byId("head"), view: byId("view"),
  };
  const svg = byId("lines");
  const SVG_NS = svg.namespaceURI; // taken from the inline <svg>, so no URL in this page
  const readout = byId("readout");

  let shown = null; // what is drawn: {attention, heads, headCount, matrices, tokens, linesBy}
  let hover = null; // the hovered token's lines and tokens, to restore on leave

  /** An element with a class and text (text, never HTML). */
  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /** Replace the options of `select`, keeping its value when it is still offered. */
  function setOptions(select, values, label) {
    const previous = select.value;
    select.replaceChildren(...values.map((value) => {
      const option = element("option", "", label(value));
      option.value = String(value);
      return option;
    }));
    if (values.map(String).includes(previous)) select.value = previous;
  }

  const range = (n) => Array.from({ length: n }, (_, i) => i);
  const round4 = (x) => Math.round(x * 1e4) / 1e4;

  /** Head `head` of `count` keeps its colour whether drawn alone or with all heads. */
  function headColour(head, count, alpha = 1) {
    return `hsla(${Math.round((360 * head) / count)}, 70%, 45%, ${alpha})`;
  }

  /** The colour of the shown head, or a neutral blue for all heads, at `alpha`. */
  function shownColour(alpha) {
    const { heads, headCount } = shown;
    if (heads.length === 1) return headColour(heads[0], headCount, alpha);
    return `hsla(215, 75%, 45%, ${alpha})`;
  }

  /** The layer and head choices for the chosen kind of attention. */
  function fillLayersAndHeads() {
    const weights = data.attention[controls.kind.value].weights;
    setOptions(controls.layer, range(weights.length), (layer) => `layer ${layer}`);
    const heads = ["all", ...range(weights[0].length)];
    setOptions(controls.head, heads, (head) => (head === "all" ? "all heads" : `head ${head}`));
  }

  /** Draw the chosen kind, layer, head(s) and view. */
  function render() {
    unfocus();
    const attention = data.attention[controls.kind.value];
    const layerWeights = attention.weights[Number(controls.layer.value)];
    const headCount = layerWeights.length;
    const heads = controls.head.value === "all" ? range(headCount) : [Number(controls.head.value)];
    shown = { attention, heads, headCount, matrices: heads.map((head) => layerWeights[head]) };
    const lines = controls.view.value === "lines";
    byId("lines-view").hidden = !lines;
    byId("heatmap-view").hidden = lines;
    readout.textContent = "";
    if (lines) {
      byId("heatmap").replaceChildren();
      drawLines();
    } else {
      for (const id of ["query-column", "lines", "key-column"]) byId(id).replaceChildren();
      drawHeatmap();
    }
    drawLegend(lines && heads.length > 1);
  }

  /** One column of tokens; hovering a token isolates its lines. */
  function fillColumn(column, words, side) {
    const tokens = words.map((word, index) => {
      const token = element("div", "token", word);
      token.dataset.side = side;
      token.dataset.index = String(index);
      token.title = `${side} ${index}: ${word}`;
      token.addEventListener("mouseenter", () => focus(side, index));
      token.addEventListener("mouseleave", unfocus);
      return token;
    });
    const heading = element("div", "column-head", side === "query" ? "queries" : "keys");
    column.replaceChildren(heading, ...tokens);
    return tokens;
  }

  /** The lines view: query tokens left, key tokens right, a line per weight drawn. */
  function drawLines() {
    const { attention, heads, headCount, matrices } = shown;
    const tokens = {
      query: fillColumn(byId("query-column"), attention.queries, "query"),
      key: fillColumn(byId("key-column"), attention.keys, "key"),
    };
    const height = Math.max(byId("query-column").scrollHeight, byId("key-column").scrollHeight);
    svg.setAttribute("width", String(LINES_WIDTH));
    svg.setAttribute("height", String(height));
    svg.classList.remove("focused");
    const top = svg.getBoundingClientRect().top;
    const middle = (token) => {
      const box = token.getBoundingClientRect();
      return box.top + box.height / 2 - top;
    };
    const y = { query: tokens.query.map(middle), key: tokens.key.map(middle) };
    const linesBy = { query: tokens.query.map(() => []), key: tokens.key.map(() => []) };
    const fragment = document.createDocumentFragment();
    heads.forEach((head, n) => {
      const colour = headColour(head, headCount);
      matrices[n].forEach((row, q) => row.forEach((weight, k) => {
        if (weight < MIN_WEIGHT) return;
        const line = document.createElementNS(SVG_NS, "line");
        const attributes = {
          x1: 0, y1: y.query[q], x2: LINES_WIDTH, y2: y.key[k],
          stroke: colour, "stroke-opacity": weight,
          "data-head": head, "data-query": q, "data-key": k, "data-weight": weight,
        };
        for (const [name, value] of Object.entries(attributes)) {
          line.setAttribute(name, String(value));
        }
        fragment.append(line);
        linesBy.query[q].push(line);
        linesBy.key[k].push(line);
      }));
    });
    svg.replaceChildren(fragment);
    Object.assign(shown, { tokens, linesBy });
  }

  /** Hovering token `index` of `side`: show only its lines and highlight the tokens they
      join, each with its weight summed over the shown heads. */
  function focus(side, index) {
    unfocus();
    const other = side === "query" ? "key" : "query";
    const lines = shown.linesBy[side][index];
    const linked = new Set(lines.map((line) => Number(line.dataset[other])));
    const weight = (matrix, j) => (side === "query" ? matrix[index][j] : matrix[j][index]);
    const strength = (j) => shown.matrices.reduce((sum, matrix) => sum + weight(matrix, j), 0);
    svg.classList.add("focused");
    for (const line of lines) line.classList.add("active");
    const hovered = shown.tokens[side][index];
    hovered.classList.add("hovered");
    const highlighted = [...linked].map((j) => {
      const token = shown.tokens[other][j];
      const total = strength(j);
      token.classList.add("highlighted");
      token.dataset.strength = total.toFixed(4);
      const mean = Math.min(1, total / shown.heads.length);
      token.style.backgroundColor = shownColour(0.12 + 0.88 * mean);
      return token;
    });
    hover = { lines, tokens: [hovered, ...highlighted] };
    const verb = side === "query" ? "attends to" : "is attended to by";
    const word = hovered.textContent;
    readout.textContent = `${side} ${index} “${word}” ${verb} ${linked.size} ${other} token(s)`;
  }

  /** Leaving a token: all lines again, no highlight. */
  function unfocus() {
    if (!hover) return;
    svg.classList.remove("focused");
    for (const line of hover.lines) line.classList.remove("active");
    for (const token of hover.tokens) {
      token.classList.remove("hovered", "highlighted");
      delete token.dataset.strength;
      token.style.backgroundColor = "";
    }
    hover = null;
    readout.textContent = "";
  }

  /** The heatmap view: a cell per (query, key), the shown head's weight (all heads: the mean). */
  function drawHeatmap() {
    const { attention, matrices } = shown;
    const { queries, keys } = attention;
    const grid = byId("heatmap");
    grid.style.gridTemplateColumns = `max-content repeat(${keys.length}, var(--cell))`;
    const label = (word, side, index) => {
      const node = element("div", `axis-label ${side}`, word);
      node.dataset.side = side;
      node.dataset.index = String(index);
      node.title = `${side} ${index}: ${word}`;
      return node;
    };
    const fragment = document.createDocumentFragment();
    fragment.append(element("div", "corner"), ...keys.map((word, k) => label(word, "key", k)));
    queries.forEach((query, q) => {
      fragment.append(label(query, "query", q));
      keys.forEach((key, k) => {
        const total = matrices.reduce((sum, matrix) => sum + matrix[q][k], 0);
        const weight = round4(total / matrices.length);
        const cell = element("div", "cell");
        Object.assign(cell.dataset, { query: String(q), key: String(k), weight: String(weight) });
        cell.title = `${query} → ${key}: ${weight}`;
        cell.style.backgroundColor = shownColour(weight);
        fragment.append(cell);
      });
    });
    grid.replaceChildren(fragment);
  }

  /** With all heads drawn as lines: which colour is which head. */
  function drawLegend(visible) {
    const legend = byId("legend");
    legend.hidden = !visible;
    legend.replaceChildren();
    if (!visible) return;
    for (const head of shown.heads) {
      const item = element("span", "legend-item", `head ${head}`);
      const swatch = element("span", "swatch");
      swatch.style.backgroundColor = headColour(head, shown.headCount);
      item.prepend(swatch);
      legend.append(item);
    }
  }

  byId("heatmap").addEventListener("mouseover", (event) => {
    const cell = event.target.closest(".cell");
    if (!cell) return;
    const { queries, keys } = shown.attention;
    const { query, key, weight } = cell.dataset;
    const pair = `query ${query} “${queries[query]}” → key ${key} “${keys[key]}”`;
    readout.textContent = `${pair}: ${weight}`;
  });

  setOptions(controls.kind, data.kinds, (kind) => LABELS[kind] || kind);
  fillLayersAndHeads();
  controls.kind.addEventListener("change", () => {
    fillLayersAndHeads();
    render();
  });
  for (const name of ["layer", "head", "view"]) controls[name].addEventListener("change", render);
  render();

  /** For tests and users: what is shown. */
  window.attentionViewer = Object.freeze({
    state: () => ({
      kind: controls.kind.value,
      layer: Number(controls.layer.value),
      head: controls.head.value === "all" ? "all" : Number(controls.head.value),
      view: controls.view.value,
    }),
  });
})();
