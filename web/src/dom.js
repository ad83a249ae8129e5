// The one DOM helper the toolbar, panels and overlay share.

/** `<tag>` with `attrs` (the key "text" sets its text) and `children` appended. */
export function h(tag, attrs = {}, children = []) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.appendChild(c);
  return e;
}
