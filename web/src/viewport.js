// Pan, zoom, fit and the minimap. The transform is applied to one <g>, so a
// pan or zoom never touches the boxes themselves; `onChange` hears of every move
// (the renderer culls what is off screen).

const MIN_SCALE = 0.02;
const MAX_SCALE = 4;
// Below these scales text is dropped (see viewer.css): it could not be read, and painting it costs frames.
const LOD_FAR = 0.55; // edge labels, subtitles, "↪" notes
const LOD_OPS = 0.45; // op names
const LOD_TINY = 0.22; // module names in boxes, badges

export class Viewport {
  constructor(svg, group, minimap, minimapBox, onChange) {
    this.svg = svg;
    this.group = group;
    this.minimap = minimap;
    this.minimapBox = minimapBox;
    this.onChange = onChange;
    this.k = 1;
    this.x = 0;
    this.y = 0;
    this.bounds = { width: 1, height: 1 };
    this.boxes = new Map();
    this.minimapBase = document.createElement("canvas"); // the boxes, drawn once per layout; a move only redraws the view's frame
    this.minimapBase.width = minimap.width;
    this.minimapBase.height = minimap.height;
    this.animation = 0;
    svg.addEventListener("wheel", (ev) => this.onWheel(ev), { passive: false });
    svg.addEventListener("pointerdown", (ev) => this.onPointerDown(ev));
    minimap.addEventListener("pointerdown", (ev) => this.onMinimap(ev));
    this.fitted = null; // the maximum scale of the last fit, while the user has not moved the view since
    // A fitted view stays fitted when the window (or the notebook frame, or the panel beside it) changes size.
    new ResizeObserver(() => (this.fitted ? this.fit(false, this.fitted) : this.apply())).observe(svg);
  }

  size() {
    const r = this.svg.getBoundingClientRect();
    return { width: r.width || 1, height: r.height || 1 };
  }

  apply() {
    this.group.setAttribute("transform", `translate(${this.x},${this.y}) scale(${this.k})`);
    if (this.k !== this.styledK) {
      // Only a zoom restyles the text; a pan moves one group and nothing else.
      this.styledK = this.k;
      this.svg.classList.toggle("lod-far", this.k < LOD_FAR);
      this.svg.classList.toggle("lod-ops", this.k < LOD_OPS);
      this.svg.classList.toggle("lod-tiny", this.k < LOD_TINY);
      this.svg.style.setProperty("--zoom", String(this.k));
    }
    this.drawMinimap();
    this.onChange?.();
  }

  /** The part of the graph in view, in graph coordinates. */
  view() {
    const { width, height } = this.size();
    return { x: -this.x / this.k, y: -this.y / this.k, width: width / this.k, height: height / this.k };
  }

  setContent(bounds, boxes) {
    this.bounds = bounds;
    this.paintMinimap(boxes);
    this.drawMinimap();
  }

  zoomAt(factor, px, py) {
    const k = Math.min(MAX_SCALE, Math.max(MIN_SCALE, this.k * factor));
    this.fitted = null;
    this.x = px - ((px - this.x) * k) / this.k;
    this.y = py - ((py - this.y) * k) / this.k;
    this.k = k;
    this.apply();
  }

  onWheel(ev) {
    ev.preventDefault();
    const r = this.svg.getBoundingClientRect();
    if (ev.ctrlKey || ev.metaKey || !ev.shiftKey) {
      this.zoomAt(Math.exp(-ev.deltaY * (ev.deltaMode ? 0.05 : 0.0015)), ev.clientX - r.left, ev.clientY - r.top);
    } else {
      this.fitted = null;
      this.x -= ev.deltaX || ev.deltaY;
      this.apply();
    }
  }

  onPointerDown(ev) {
    if (ev.button !== 0) return;
    const start = { x: ev.clientX, y: ev.clientY, tx: this.x, ty: this.y };
    let moved = false;
    const move = (e) => {
      const dx = e.clientX - start.x;
      const dy = e.clientY - start.y;
      if (!moved && Math.hypot(dx, dy) < 4) return;
      moved = true;
      this.svg.classList.add("panning");
      this.fitted = null;
      this.x = start.tx + dx;
      this.y = start.ty + dy;
      this.apply();
    };
    const up = () => {
      window.removeEventListener("pointermove", move);
      window.removeEventListener("pointerup", up);
      this.svg.classList.remove("panning");
      if (moved) {
        // A drag must not also count as a click on the box it started on.
        const swallow = (e) => e.stopPropagation();
        window.addEventListener("click", swallow, { capture: true, once: true });
        setTimeout(() => window.removeEventListener("click", swallow, { capture: true }), 0);
      }
    };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", up);
  }

  /** Smoothly move so that the rectangle `r` (graph coordinates) fills the view. */
  fitRect(r, { maxScale = 1.5, margin = 32, animate = true } = {}) {
    const { width, height } = this.size();
    const k = Math.max(MIN_SCALE, Math.min(maxScale, (width - 2 * margin) / Math.max(r.width, 1), (height - 2 * margin) / Math.max(r.height, 1)));
    const x = width / 2 - (r.x + r.width / 2) * k;
    const y = height / 2 - (r.y + r.height / 2) * k;
    this.moveTo(x, y, k, animate);
  }

  /** The scale at which the whole graph fits the view. */
  fitScale(bounds = this.bounds, margin = 32) {
    const { width, height } = this.size();
    return Math.min((width - 2 * margin) / Math.max(bounds.width, 1), (height - 2 * margin) / Math.max(bounds.height, 1));
  }

  fit(animate = true, maxScale = 1.5) {
    this.fitRect({ x: 0, y: 0, width: this.bounds.width, height: this.bounds.height }, { animate, maxScale });
    this.fitted = maxScale;
  }

  /**
   * The translation nearest to (x, y), at the current scale, that shows the box
   * `r` (graph coordinates) whole, or its top left where it is larger than the
   * view; and the whole graph where it fits.
   */
  inView(r, x, y, margin = 24) {
    const { width, height } = this.size();
    const k = this.k;
    const shift = (pos, start, size, view) => {
      const lo = margin - start * k; // this translation puts the start at the margin
      const hi = view - margin - (start + size) * k; // and this one the end
      return size * k > view - 2 * margin ? lo : Math.min(hi, Math.max(lo, pos));
    };
    x = shift(x, r.x, r.width, width);
    y = shift(y, r.y, r.height, height);
    if (this.bounds.width * k <= width && this.bounds.height * k <= height) {
      x = shift(x, 0, this.bounds.width, width);
      y = shift(y, 0, this.bounds.height, height);
    }
    return { x, y };
  }

  /** Center on a box, zooming in only as far as needed to read it. */
  centerOn(box) {
    const { width, height } = this.size();
    const k = Math.max(this.k, 0.8);
    this.moveTo(width / 2 - (box.x + box.width / 2) * k, height / 2 - (box.y + box.height / 2) * k, k, true);
  }

  moveTo(x, y, k, animate) {
    cancelAnimationFrame(this.animation);
    this.fitted = null;
    if (!animate) {
      Object.assign(this, { x, y, k });
      this.apply();
      return;
    }
    const from = { x: this.x, y: this.y, k: this.k };
    const t0 = performance.now();
    const step = (t) => {
      const p = Math.min(1, (t - t0) / 200);
      const e = 1 - Math.pow(1 - p, 3);
      this.x = from.x + (x - from.x) * e;
      this.y = from.y + (y - from.y) * e;
      this.k = from.k + (k - from.k) * e;
      this.apply();
      if (p < 1) this.animation = requestAnimationFrame(step);
    };
    this.animation = requestAnimationFrame(step);
  }

  minimapScale() {
    const { width, height } = this.minimap;
    return Math.min(width / this.bounds.width, height / this.bounds.height);
  }

  /** Where the graph's origin sits in the minimap: centred along its short side. */
  minimapOffset() {
    const s = this.minimapScale();
    return { x: (this.minimap.width - this.bounds.width * s) / 2, y: (this.minimap.height - this.bounds.height * s) / 2 };
  }

  /** Draw the boxes (`boxes`: id -> graph rect) into the minimap's base, in the theme's colours. */
  paintMinimap(boxes = this.boxes) {
    this.boxes = boxes;
    const ctx = this.minimapBase.getContext("2d");
    const s = this.minimapScale();
    const o = this.minimapOffset();
    const style = getComputedStyle(this.minimap);
    const [cluster, node] = [style.getPropertyValue("--mm-cluster"), style.getPropertyValue("--mm-node")];
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, this.minimapBase.width, this.minimapBase.height);
    ctx.translate(o.x, o.y);
    for (const [id, b] of boxes) {
      if (id === "c0") continue;
      ctx.fillStyle = id[0] === "c" ? cluster : node;
      ctx.fillRect(b.x * s, b.y * s, Math.max(1, b.width * s), Math.max(1, b.height * s));
    }
  }

  drawMinimap() {
    const view = this.size();
    const big = this.bounds.width * this.k > view.width * 1.05 || this.bounds.height * this.k > view.height * 1.05;
    this.minimapBox.classList.toggle("hidden", !big);
    if (!big) return;
    const ctx = this.minimap.getContext("2d");
    const s = this.minimapScale();
    const o = this.minimapOffset();
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, this.minimap.width, this.minimap.height);
    ctx.drawImage(this.minimapBase, 0, 0);
    ctx.translate(o.x, o.y);
    ctx.strokeStyle = getComputedStyle(this.minimap).getPropertyValue("--mm-view");
    ctx.lineWidth = 2;
    ctx.strokeRect((-this.x / this.k) * s, (-this.y / this.k) * s, (view.width / this.k) * s, (view.height / this.k) * s);
  }

  onMinimap(ev) {
    ev.stopPropagation();
    const go = (e) => {
      const r = this.minimap.getBoundingClientRect();
      const s = this.minimapScale() * (r.width / this.minimap.width);
      const o = this.minimapOffset();
      const px = r.width / this.minimap.width;
      const gx = (e.clientX - r.left - o.x * px) / s;
      const gy = (e.clientY - r.top - o.y * px) / s;
      const view = this.size();
      this.fitted = null;
      this.x = view.width / 2 - gx * this.k;
      this.y = view.height / 2 - gy * this.k;
      this.apply();
    };
    go(ev);
    const up = () => {
      window.removeEventListener("pointermove", go);
      window.removeEventListener("pointerup", up);
    };
    window.addEventListener("pointermove", go);
    window.addEventListener("pointerup", up);
  }
}
