// Data overlays: the fill: menu colours the boxes by a number the graph carries
// (FLOPs, params, time…) and the size box scales them by it too; the scale bar
// in the dock says what colour and size mean.

import { h } from "./dom.js";

const SIZE_MAX = 2.5; // the box with the largest number is this many times as wide and as tall as its text needs

export class Overlay {
  /**
   * `onFill()` runs when only the colours change; `onSize()` when box sizes
   * change too (the graph must be laid out again).
   */
  constructor(model, describer, onFill, onSize) {
    this.model = model;
    this.describer = describer;
    // Only the numbers this graph carries are offered (time needs trace(profile=True), NaN/Inf trace(stats=True)).
    this.select = h("select", { "aria-label": "Colour boxes by", title: "Colour the boxes by category, or by a number the graph carries" }, [
      h("option", { value: "", text: "fill: category" }),
      ...model.doc.metrics.map(([value, text]) => h("option", { value, text: `fill: ${text}` })),
    ]);
    this.sizeToggle = h("input", { type: "checkbox", "aria-label": "Size boxes by the fill's number", disabled: "" });
    this.sizeControl = h("label", { class: "check size", title: "Also size the boxes by the number they are filled by" }, [this.sizeToggle, h("span", { text: "size" })]);
    this.select.addEventListener("change", () => {
      this.sizeToggle.disabled = !this.metric;
      if (this.sizeToggle.checked) onSize();
      else onFill();
    });
    this.sizeToggle.addEventListener("change", () => onSize());
    // the page's first fill (HtmlOptions.fill: compare's error), where the menu offers it
    const start = model.doc.view.fill;
    if (start && model.doc.metrics.some(([value]) => value === start)) {
      this.select.value = start;
      this.sizeToggle.disabled = false;
    }
    this.bar = h("div", { class: "scale hidden" });
  }

  /** The number the boxes are filled by (a key of the page's `metrics`), or "" for the category colours. */
  get metric() {
    return this.select.value;
  }

  get sized() {
    return !!this.metric && this.sizeToggle.checked;
  }

  /** Each leaf box of `graph` that has the chosen number: id -> number. */
  values(graph) {
    const values = new Map();
    if (!this.metric) return values;
    for (const id of graph.leaves.keys()) {
      const v = this.describer.metric(id, this.metric);
      if (v != null) values.set(id, v);
    }
    return values;
  }

  /**
   * How much larger than its text needs each box of `graph` is drawn: 1× to
   * SIZE_MAX×, with the square root of its number over the largest on screen
   * (so area grows about linearly); none while size is off.
   */
  scales(graph) {
    const scales = new Map();
    if (!this.sized) return scales;
    const values = this.values(graph);
    const max = Math.max(0, ...values.values());
    if (max > 0) for (const [id, v] of values) scales.set(id, 1 + (SIZE_MAX - 1) * Math.sqrt(Math.max(0, v) / max));
    return scales;
  }

  /** Fill the drawn boxes of `graph` and write the scale bar. */
  apply(graph, renderer) {
    const metric = this.metric;
    const values = this.values(graph);
    const numbers = [...values.values()];
    const min = numbers.length ? Math.min(...numbers) : 0;
    const max = numbers.length ? Math.max(...numbers) : 0;
    // the ends of the scale are two boxes' own numbers, in the words the page document carries
    const wordOf = (v) => {
      for (const [id, value] of values) if (value === v) return this.describer.metricWord(id, metric);
      return "—";
    };
    const steps = this.model.doc.overlaySteps;
    renderer.overlay(metric ? values : null, min, max, steps);
    this.bar.classList.toggle("hidden", !metric);
    if (!metric) return;
    const [, name] = this.model.doc.metrics.find(([value]) => value === metric);
    const swatches = Array.from({ length: steps }, (_, i) => h("span", { class: `swatch overlay-${i}` }));
    this.bar.replaceChildren(
      h("span", { class: "scale-name", text: `${name}:` }),
      h("span", { class: "scale-min", text: wordOf(min) }),
      ...swatches,
      h("span", { class: "scale-max", text: wordOf(max) }),
      h("span", { text: this.describer.say("scaleNote", { n: numbers.length }) }),
      ...(this.sized ? [h("span", { class: "scale-size", text: this.describer.say("sizeNote", { name, most: SIZE_MAX, word: wordOf(max) }) })] : []),
      // torchatlas.compare's page: what the outlines and the faded boxes mean
      ...(this.model.doc.compared ? [h("span", { class: "scale-marks", text: this.describer.say("comparedMarks") })] : []),
    );
  }
}
