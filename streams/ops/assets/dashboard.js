"use strict";
// The live dashboard: polls the JSON API and draws it. Everything from the data goes into
// the page as text (textContent) or as SVG coordinates, never as HTML.
(() => {
  const SVG = "http://www.w3.org/2000/svg";
  const SPARSE_POINTS = 60;
  const $ = (selector) => document.querySelector(selector);
  let feedAfter = 0;

  function element(tag, text, attributes = {}) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    return node;
  }

  function row(cells, attributes = {}) {
    const tr = element("tr", undefined, attributes);
    for (const cell of cells) tr.append(cell instanceof Node ? wrap(cell) : element("td", cell));
    return tr;
  }

  function wrap(node) {
    const td = element("td");
    td.append(node);
    return td;
  }

  const count = (number) => Number(number).toLocaleString("en-US");

  async function api(path) {
    const response = await fetch(path, { cache: "no-store" });
    return { ok: response.ok, body: await response.json() };
  }

  // ---------------------------------------------------------------- totals and status

  async function refreshSummary() {
    const { body } = await api("/api/summary");
    const status = $("#status");
    status.textContent = body.status;
    status.className = body.status === "live" ? "sources live" : "sources";
    for (const key of ["domains", "patterns", "feed", "audit_restores", "fetches", "saved"]) {
      document.querySelector(`[data-total="${key}"]`).textContent = count(body[key]);
    }
  }

  // ---------------------------------------------------------------- domains

  async function refreshDomains() {
    const wanted = $("#domain-filter").value;
    const { body } = await api("/api/domains?filter=" + encodeURIComponent(wanted));
    const rows = body.rows.map((domain) => {
      const link = element("a", domain.domain, {
        href: "#domain=" + encodeURIComponent(domain.domain) });
      return row([link, domain.version, domain.updated_at, count(domain.patterns),
        count(domain.kept), count(domain.dropped), count(domain.fetches)],
        { "data-domain": domain.domain });
    });
    $("#domains tbody").replaceChildren(...rows);
    const hidden = body.matching - body.rows.length;
    $("#domains-count").textContent = `${count(body.matching)} of ${count(body.total)} domains`
      + (hidden > 0 ? ` match; ${count(hidden)} more not shown (filter to find them)` : "");
    document.body.dataset.domainsRendered = String(Number(
      document.body.dataset.domainsRendered || 0) + 1);
  }

  // ---------------------------------------------------------------- one domain

  function chosenDomain() {
    const hash = location.hash;
    return hash.startsWith("#domain=") ? decodeURIComponent(hash.slice(8)) : null;
  }

  async function refreshDomain() {
    const section = $("#domain");
    const name = chosenDomain();
    if (name === null) {
      section.hidden = true;
      return;
    }
    const { ok, body } = await api("/api/domain?name=" + encodeURIComponent(name));
    section.hidden = false;
    $("#domain-name").textContent = name;
    const patterns = section.querySelector("table.patterns");
    for (const old of patterns.querySelectorAll("tbody")) old.remove();
    section.querySelector("table.sprawl tbody").replaceChildren();
    section.querySelector("table.domain-feed tbody").replaceChildren();
    if (!ok) {
      $("#domain-about").textContent = body.error;
      section.dataset.rendered = name;
      return;
    }
    $("#domain-about").textContent =
      `map version ${body.map_version || "none"} (${body.updated_at || "no map"}); ` +
      `${count(body.distinct_urls)} distinct URLs in the tail become ` +
      `${count(body.canonical_urls)} canonical ones: ${count(body.duplicates_saved)} ` +
      `duplicates saved; ${count(body.audit_fetches)} fetches spent (audit records).`;
    $("#domain-politeness").textContent = politeness(body);
    section.querySelector("table.sprawl tbody").replaceChildren(...body.sprawl.map(
      (param) => row([param.name, count(param.urls_with), count(param.variants),
        count(param.dropped_in)])));
    for (const pattern of body.patterns) patterns.append(patternRows(pattern));
    section.querySelector("table.domain-feed tbody").replaceChildren(
      ...body.feed.reverse().map(feedRow));
    $("#domain-hidden-params").textContent = hiddenNote(body.hidden_params, "parameters");
    $("#domain-hidden-patterns").textContent = hiddenNote(body.hidden_patterns,
      "patterns with fewer URLs in the tail");
    section.dataset.rendered = name;
  }

  const ROBOTS = { rules: "rules obeyed", none: "none (everything allowed)",
    unreachable: "not answering (nothing fetched until it answers)" };
  // From the probing worker's metrics, when the dashboard reads them (--worker-metrics).
  function politeness(body) {
    if (body.robots === null && body.pace_seconds === null) return "";
    const robots = body.robots === null ? "not fetched yet" : ROBOTS[body.robots] || body.robots;
    const pace = body.pace_seconds === null ? "–"
      : `${body.pace_seconds.toFixed(2)} s between requests`;
    return `robots.txt: ${robots}; pace: ${pace}`;
  }

  const hiddenNote = (hidden, what) => hidden ? `${count(hidden)} more ${what} not shown` : "";

  function patternRows(pattern) {
    const body = element("tbody");
    const head = element("th", undefined, { colspan: "9" });
    head.append(element("code", pattern.key), element("span", pattern.learned
      ? `learned from ${count(pattern.urls_seen)} URLs, last verified ${pattern.decided_at}: ` +
        `${pattern.verification_samples} samples, ${pattern.verification_changed} changed, ` +
        `${pattern.verification_inconclusive} inconclusive`
      : "not in the map: the conservative default"));
    body.append(row([], { class: "pattern" }));
    body.firstChild.append(head);
    for (const param of pattern.params) {
      const applied = param.applied.map(([text, n]) => `${text} ×${count(n)}`).join(", ");
      body.append(row([param.name, param.map_decision || "–", param.map_layer || "–",
        param.samples, param.changed, param.unchanged, param.inconclusive,
        param.default_values.join(", "), applied], { class: param.map_decision }));
    }
    return body;
  }

  // ---------------------------------------------------------------- feed

  function feedRow(entry) {
    const version = entry.version_after === null
      ? `v${entry.version_before} stays` : `v${entry.version_before} → v${entry.version_after}`;
    const audit = entry.request_reason === "audit";
    // undecided: no decision was made, and the reason says why (shells, interstitials,
    // disallowed by robots.txt, every fetch failed...); rejected: by the anomaly gate
    const outcome = entry.accepted ? "accepted"
      : entry.kept_after === null ? "undecided" : "rejected";
    const verdict = outcome + (audit ? " (audit)" : "");
    const reason = audit ? `restored by an audit; ${entry.reason}` : entry.reason;
    return row([entry.at, entry.domain, entry.pattern, verdict, reason, version,
      (entry.dropped_after || []).join(", ")],
      { class: outcome });
  }

  async function refreshFeed() {
    const { body } = await api("/api/feed?after=" + feedAfter);
    const tbody = $("#feed tbody");
    for (const entry of body) {
      feedAfter = Math.max(feedAfter, entry.seq);
      tbody.prepend(feedRow(entry));
    }
    while (tbody.rows.length > 200) tbody.lastChild.remove();
  }

  // ---------------------------------------------------------------- explain

  async function explain(text) {
    const result = $("#explain-result");
    const { body } = await api("/api/explain?url=" + encodeURIComponent(text));
    result.replaceChildren();
    if (body.error !== undefined) {
      result.append(element("p", `invalid URL: ${body.error}`, { id: "explain-error" }),
        element("pre", JSON.stringify(body), { id: "explain-json" }));
      return;
    }
    result.append(...window.miqpsExplanation(body));
  }

  // ---------------------------------------------------------------- plots

  function svg(tag, attributes) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    return node;
  }

  // The top of a value axis: the least 1, 2 or 5 times a power of ten that is not below the
  // largest value (1 when there is none), so that its ticks 0, half and top are distinct.
  function axisTop(largest) {
    if (!(largest > 0)) return 1;
    const power = 10 ** Math.floor(Math.log10(largest));
    return power * [1, 2, 5, 10].find((step) => step * power >= largest * (1 - 1e-9));
  }
  const tick = (value) => Number(value).toLocaleString("en-US", { maximumSignificantDigits: 3 });

  // A line chart over time: each series is [name, label, values] (null: no point).
  function lineChart(figure, points, series, asShare) {
    const width = 380, height = 160, left = 48, bottom = 18, top = 22;
    const chart = svg("svg", { role: "img", width, height, viewBox: `0 0 ${width} ${height}` });
    const values = series.flatMap(([, , vals]) => vals.filter((v) => v !== null));
    const largest = asShare ? 1 : axisTop(Math.max(0, ...values));
    const first = points.length ? points[0].at : 0;
    const span = points.length > 1 ? points[points.length - 1].at - first : 1;
    const x = (at) => left + (width - left - 8) * (at - first) / (span || 1);
    const y = (value) => height - bottom - (height - bottom - top) * value / largest;
    for (const fraction of [0, 0.5, 1]) {
      chart.append(svg("line", { class: "grid", x1: left, x2: width - 8,
        y1: y(largest * fraction), y2: y(largest * fraction) }));
      const label = svg("text", { x: left - 4, y: y(largest * fraction) + 4,
        "text-anchor": "end" });
      label.textContent = asShare ? `${Math.round(fraction * 100)}%` : tick(largest * fraction);
      chart.append(label);
    }
    let key = left;
    for (const [name, labelText, vals] of series) {
      const coordinates = [];
      vals.forEach((value, index) => {
        if (value !== null) coordinates.push([x(points[index].at), y(value)]);
      });
      chart.append(svg("polyline", { class: name, "data-series": name,
        "data-count": String(coordinates.length),
        points: coordinates.map(([cx, cy]) => `${cx.toFixed(1)},${cy.toFixed(1)}`).join(" ") }));
      if (coordinates.length <= SPARSE_POINTS) {  // few points: show each one
        for (const [cx, cy] of coordinates) chart.append(svg("circle", { class: name, cx, cy, r: 2.5 }));
      }
      chart.append(svg("rect", { class: name, x: key, y: 4, width: 10, height: 10 }));
      const legend = svg("text", { x: key + 14, y: 13 });
      legend.textContent = labelText;
      chart.append(legend);
      key += 30 + 6.5 * labelText.length;
    }
    const old = figure.querySelector("svg");
    if (old) old.replaceWith(chart); else figure.append(chart);
  }

  async function refreshPlots() {
    const { body: points } = await api("/api/plots");
    lineChart($("#plot-learned"), points,
      [["learned", "learned share", points.map((p) => p.learned_share)]], true);
    lineChart($("#plot-rates"), points, [
      ["in", "urls.raw", points.map((p) => p.urls_in)],
      ["out", "urls.canonical", points.map((p) => p.urls_out)]], false);
    lineChart($("#plot-fetches"), points, [
      ["fetches", "fetches spent", points.map((p) => p.fetches)],
      ["saved", "duplicates saved", points.map((p) => p.saved)]], false);
  }

  // ---------------------------------------------------------------- wiring

  function every(seconds, refresh) {
    const run = () => refresh().catch((error) => { $("#status").textContent = String(error); });
    run();
    return setInterval(run, seconds * 1000);
  }

  $("#explain").addEventListener("submit", (event) => {
    event.preventDefault();
    explain($("#explain-url").value.trim());
  });
  $("#domain-filter").addEventListener("input", () => { refreshDomains(); });
  window.addEventListener("hashchange", () => { refreshDomain(); });
  every(2, refreshSummary);
  every(2, refreshFeed);
  every(2, refreshPlots);
  every(5, refreshDomains);
  every(5, refreshDomain);
})();
