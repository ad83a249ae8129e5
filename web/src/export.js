// Export the current view (the graph as it is expanded now) as SVG or PNG.
// The copy is made standalone: CSS-positioned boxes get plain transform
// attributes and the theme's colours are written into its own <style>.

function download(blob, name) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

function themeVariables() {
  const names = new Set();
  for (const sheet of document.styleSheets) {
    for (const rule of sheet.cssRules) {
      if (!rule.style) continue;
      for (const prop of rule.style) if (prop.startsWith("--")) names.add(prop);
    }
  }
  const computed = getComputedStyle(document.documentElement);
  return [...names].map((n) => `${n}:${computed.getPropertyValue(n)};`).join("");
}

function styleText() {
  return [...document.querySelectorAll("style")].map((s) => s.textContent).join("\n");
}

/** A standalone SVG string of the laid-out graph. */
export function svgMarkup(svg, bounds) {
  const copy = svg.cloneNode(true);
  const pad = 16;
  copy.setAttribute("xmlns", "http://www.w3.org/2000/svg");
  copy.setAttribute("viewBox", `${-pad} ${-pad} ${bounds.width + 2 * pad} ${bounds.height + 2 * pad}`);
  copy.setAttribute("width", String(Math.ceil(bounds.width + 2 * pad)));
  copy.setAttribute("height", String(Math.ceil(bounds.height + 2 * pad)));
  // The whole graph at its own scale: nothing culled, and the text a zoomed-out view drops is back.
  copy.setAttribute("class", `${svg.getAttribute("class").replace(/\s*\blod-\w+/g, "")} atlas-export`);
  for (const e of copy.querySelectorAll(".culled")) e.classList.remove("culled");
  copy.querySelector(".viewport").removeAttribute("transform");
  for (const g of copy.querySelectorAll("g[style]")) {
    const m = /translate\(([-\d.e]+)px,\s*([-\d.e]+)px\)/.exec(g.style.transform);
    if (m) g.setAttribute("transform", `translate(${m[1]},${m[2]})`);
    const overlay = g.style.getPropertyValue("--unit-overlay"); // a data overlay's fill stays in the export
    g.removeAttribute("style");
    if (overlay) g.style.setProperty("--unit-overlay", overlay); // through CSSOM: the page policy refuses style attributes
  }
  for (const r of copy.querySelectorAll("rect[style]")) {
    if (r.style.width) r.setAttribute("width", parseFloat(r.style.width).toString());
    if (r.style.height) r.setAttribute("height", parseFloat(r.style.height).toString());
    r.removeAttribute("style");
  }
  const style = document.createElementNS("http://www.w3.org/2000/svg", "style");
  style.textContent = `svg.atlas-export{${themeVariables()}}\n${styleText()}\nsvg.atlas-export *{transition:none!important;animation:none!important}`;
  copy.insertBefore(style, copy.firstChild);
  const bg = document.createElementNS("http://www.w3.org/2000/svg", "rect");
  for (const [k, v] of Object.entries({ x: -pad, y: -pad, width: bounds.width + 2 * pad, height: bounds.height + 2 * pad, class: "export-bg" })) bg.setAttribute(k, String(v));
  copy.insertBefore(bg, style.nextSibling);
  return new XMLSerializer().serializeToString(copy);
}

export function exportSvg(svg, bounds, name) {
  download(new Blob([svgMarkup(svg, bounds)], { type: "image/svg+xml" }), `${name}.svg`);
}

export async function exportPng(svg, bounds, name) {
  const markup = svgMarkup(svg, bounds);
  const url = URL.createObjectURL(new Blob([markup], { type: "image/svg+xml" }));
  try {
    const img = new Image();
    await new Promise((resolve, reject) => {
      img.onload = resolve;
      img.onerror = () => reject(new Error("could not rasterise the SVG"));
      img.src = url;
    });
    // Browsers cap canvas size; large graphs get a smaller scale instead of failing.
    const scale = Math.min(2, 16000 / img.width, 16000 / img.height);
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, Math.floor(img.width * scale));
    canvas.height = Math.max(1, Math.floor(img.height * scale));
    const ctx = canvas.getContext("2d");
    ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
    download(blob, `${name}.png`);
  } finally {
    URL.revokeObjectURL(url);
  }
}
