// Off-screen culling: boxes, frames, edges and labels that lie outside the view
// (plus a margin) are not drawn (class "culled": display none). Chromium repaints
// the whole SVG on every pan frame, so on a fully opened 70B model painting
// what is off screen was most of a frame's time. The margin lets a pan run
// without touching the DOM: the culled set is worked out again only when the
// view leaves it, on a zoom step, or after a re-layout.

const MARGIN = 0.5; // of the view's width and height, on each side

const intersects = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
const contains = (outer, inner) =>
  inner.x >= outer.x && inner.y >= outer.y && inner.x + inner.width <= outer.x + outer.width && inner.y + inner.height <= outer.y + outer.height;

export class Culler {
  constructor() {
    this.items = []; // {el, rect (graph coordinates), shown}
    this.region = null; // what is drawn: the view when last culled, plus the margin
    this.k = null;
  }

  /** What may be culled: [element, rect in graph coordinates]; the next update() culls again. */
  set(items) {
    this.items = items.map(([el, rect]) => ({ el, rect, shown: !el.classList.contains("culled") }));
    this.region = null;
  }

  /** Cull for the view `view` (graph coordinates) at scale `k`, unless nothing outside the drawn region can show. */
  update(view, k) {
    if (this.region && k === this.k && contains(this.region, view)) return;
    this.k = k;
    this.region = {
      x: view.x - view.width * MARGIN,
      y: view.y - view.height * MARGIN,
      width: view.width * (1 + 2 * MARGIN),
      height: view.height * (1 + 2 * MARGIN),
    };
    for (const item of this.items) {
      const shown = intersects(item.rect, this.region);
      if (shown === item.shown) continue;
      item.shown = shown;
      item.el.classList.toggle("culled", !shown);
    }
  }
}
