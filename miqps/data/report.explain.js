"use strict";
// The answer of `miqps canonicalize --json` for one URL as page elements: the same in the
// offline report and in the live dashboard. Every text goes in as text, never as HTML.
window.miqpsExplanation = (answer) => {
  function element(tag, text, attributes = {}) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    return node;
  }

  const canonical = element("p", "canonical URL: ");
  canonical.append(element("output", answer.canonical_url, { id: "explain-canonical" }));
  const status = element("p",
    `status ${answer.status}, pattern ${answer.pattern}, map version ${answer.map_version}`,
    { id: "explain-status" });
  const table = element("table", undefined, { id: "explain-params" });
  const headings = table.createTHead().insertRow();
  for (const heading of ["parameter", "kept or dropped", "layer"]) {
    headings.append(element("th", heading));
  }
  const body = table.appendChild(element("tbody"));
  const dropped = new Set(answer.dropped);
  for (const [name, layer] of Object.entries(answer.layers)) {
    const row = body.appendChild(element("tr", undefined,
      { class: dropped.has(name) ? "drop" : "keep" }));
    row.append(element("td", name), element("td", dropped.has(name) ? "dropped" : "kept"),
      element("td", layer));
  }
  return [canonical, status, table, element("pre", JSON.stringify(answer), { id: "explain-json" })];
};
