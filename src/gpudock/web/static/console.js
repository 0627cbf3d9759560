// gpudock console: confirmation before destructive forms, copy buttons, the phone
// menu and tap-to-show reasons. No business logic.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  }, true);
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) { return; }
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (!source) { return; }
    var text = source.textContent.trim();
    var done = function () { button.textContent = button.getAttribute("data-done") || "Copied"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done);
    } else {
      var area = document.createElement("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
      done();
    }
  });
  document.addEventListener("click", function (event) {
    var toggle = event.target.closest ? event.target.closest(".menu-toggle") : null;
    if (!toggle) { return; }
    var header = toggle.closest("header");
    var open = header.classList.toggle("open");
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
  });
  // A reason kept in a title shows on hover only; a phone has no hover.
  document.addEventListener("click", function (event) {
    var mark = event.target.closest ? event.target.closest(".good[title], .bad[title], .unchecked[title], .badge[title]") : null;
    if (!mark || !mark.getAttribute("title")) { return; }
    var next = mark.nextElementSibling;
    if (next && next.classList.contains("tip")) { next.remove(); return; }
    var tip = document.createElement("span");
    tip.className = "tip";
    tip.setAttribute("role", "note");
    tip.textContent = mark.getAttribute("title");
    mark.insertAdjacentElement("afterend", tip);
  });
  // A field's error goes as soon as the field changes: it spoke of the old value.
  var clearFieldError = function (event) {
    var label = event.target.closest ? event.target.closest("#create-form label") : null;
    if (!label) { return; }
    label.querySelectorAll(".field-error").forEach(function (e) { e.remove(); });
    var form = label.closest("form");
    if (form && !form.querySelector(".field-error")) {
      var alert = form.parentElement.querySelector("p.error[role=alert]");
      if (alert) { alert.remove(); }
    }
  };
  document.addEventListener("input", clearFieldError);
  document.addEventListener("change", clearFieldError);
  // The count's spinner stops at what one host of the chosen model has.
  document.addEventListener("htmx:afterSwap", function () {
    var limit = document.querySelector("#availability [data-max-per-host]");
    var count = document.getElementById("gpu-count");
    if (limit && count) { count.setAttribute("max", limit.getAttribute("data-max-per-host")); }
  });
})();
