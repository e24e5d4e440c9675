"use strict";
// Explain a URL from the answers embedded at build time, and filter the domain table.
// Everything from the data goes into the page as text (textContent), never as HTML.
(() => {
  const answers = JSON.parse(document.getElementById("explanations").textContent);
  const byUrl = new Map(answers.map((answer) => [answer.url, answer]));

  function element(tag, text, attributes = {}) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    return node;
  }

  function explain(text) {
    const result = document.getElementById("explain-result");
    result.replaceChildren();
    const answer = byUrl.get(text);
    if (answer === undefined) {
      result.append(element("p",
        "Not among the URLs embedded in this report. Ask the command line: " +
        "miqps canonicalize --json --maps MAPS '" + text + "'", { id: "explain-missing" }));
      return;
    }
    result.append(...window.miqpsExplanation(answer));
  }

  const input = document.getElementById("explain-url");
  document.getElementById("explain").addEventListener("submit", (event) => {
    event.preventDefault();
    explain(input.value.trim());
  });

  const filter = document.getElementById("domain-filter");
  filter.addEventListener("input", () => {
    const wanted = filter.value.trim().toLowerCase();
    for (const row of document.querySelectorAll("#domains tbody tr")) {
      row.hidden = wanted !== "" && !row.dataset.domain.includes(wanted);
    }
  });
})();
