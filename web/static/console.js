// Rota console: times in the browser's zone (UTC on hover), the live log tail of a run,
// plugin upload and confirmation of destructive forms.
// Everything else works without this script.
"use strict";

function localTimes() {
  for (const el of document.querySelectorAll("time[datetime]")) {
    const t = new Date(el.getAttribute("datetime"));
    if (isNaN(t)) continue;
    el.title = el.textContent;
    el.textContent = t.toLocaleString();
  }
}

async function followLog(pre) {
  const url = pre.dataset.logUrl;
  let next = 1;
  let first = true;
  for (;;) {
    let page;
    try {
      const res = await fetch(`${url}?from_line=${next}`, { credentials: "same-origin" });
      if (!res.ok) {
        const body = await res.json().catch(() => ({}));
        pre.textContent += `\n[log unavailable: ${body.error || res.status}]`;
        return;
      }
      page = await res.json();
    } catch (e) {
      pre.textContent += `\n[log unavailable: ${e}]`;
      return;
    }
    if (first) { pre.textContent = ""; first = false; }
    if (page.lines.length) {
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent += page.lines.join("\n") + "\n";
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
    next = page.next_line;
    if (page.complete) return;
    await new Promise((r) => setTimeout(r, page.lines.length ? 300 : 1500));
  }
}

// Sends the chosen module as the request body (the server takes raw modules, not
// multipart), with the session's CSRF token in a header.
function uploadPlugins(form) {
  const result = document.getElementById("upload-result");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = form.elements.name.value;
    const file = form.elements.module.files[0];
    if (!file) return;
    result.className = "";
    result.textContent = "Uploading…";
    try {
      const res = await fetch(`/console/plugins?name=${encodeURIComponent(name)}`, {
        method: "POST",
        credentials: "same-origin",
        headers: { "x-csrf-token": form.dataset.csrf, "content-type": "application/wasm" },
        body: file,
      });
      const body = await res.json().catch(() => ({}));
      if (res.ok) {
        location.reload();
      } else {
        result.className = "error";
        result.textContent = body.error || `Upload failed (${res.status}).`;
      }
    } catch (e) {
      result.className = "error";
      result.textContent = `Upload failed: ${e}`;
    }
  });
}

// Forms marked data-confirm ask first (without the script they submit at once).
function confirmForms() {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (e) => {
      if (!window.confirm(form.dataset.confirm)) e.preventDefault();
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes();
  confirmForms();
  const upload = document.getElementById("upload");
  if (upload) uploadPlugins(upload);
  const log = document.getElementById("log");
  if (log && log.dataset.logUrl) followLog(log);
});
