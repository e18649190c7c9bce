/* gradguard pages: two small enhancements. Every page reads fine without them.
 * 1. Live status: an element with data-status-url is polled (backing off) while the run is
 *    queued or running; when the run finishes the page reloads to show the verdict.
 *    Without JavaScript a <noscript> meta refresh and a reload link do the same.
 * 2. Copy buttons: [data-copy-target] copies the text of the element with that id, through
 *    the Clipboard API, or (where that is refused) into a selected textarea for Ctrl+C.
 */
(function () {
  "use strict";
  var FINAL = { passed: 1, failed: 1, error: 1 };

  function live(el) {
    var url = el.getAttribute("data-status-url");
    var status = el.getAttribute("data-status");
    var label = el.querySelector("[data-status-label]") || el;
    var delay = 800;
    function schedule(ms) { window.setTimeout(tick, ms); }
    function tick() {
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
        .then(function (data) {
          if (data.status !== status) {
            status = data.status;
            label.textContent = data.status;
            label.className = "pill s-" + data.status;
            el.setAttribute("data-status", data.status);
            if (FINAL[data.status]) { window.location.reload(); return; }
          }
          delay = Math.min(delay * 1.4, 5000);
          schedule(delay);
        })
        .catch(function () { delay = Math.min(delay * 2, 15000); schedule(delay); });
    }
    if (!FINAL[status]) { schedule(delay); }
  }

  function copy(button) {
    var target = document.getElementById(button.getAttribute("data-copy-target"));
    var note = document.getElementById(button.getAttribute("data-copy-status"));
    if (!target) { return; }
    var text = target.textContent;
    function done(message) { if (note) { note.textContent = message; } }
    function fallback() {
      var area = document.getElementById(button.getAttribute("data-copy-target") + "-fallback");
      if (!area) {
        area = document.createElement("textarea");
        area.id = button.getAttribute("data-copy-target") + "-fallback";
        area.className = "copy-fallback";
        area.setAttribute("aria-label", "Reproducer script, selected: press Ctrl+C to copy");
        area.readOnly = true;
        button.parentNode.insertBefore(area, button.nextSibling);
      }
      area.value = text;
      area.focus();
      area.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      done(ok ? "Copied." : "Selected: press Ctrl+C to copy.");
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done("Copied."); }, fallback);
    } else {
      fallback();
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("[data-status-url]"), live);
    Array.prototype.forEach.call(document.querySelectorAll("[data-copy-target]"), function (b) {
      b.hidden = false;
      b.addEventListener("click", function () { copy(b); });
    });
  });
})();
