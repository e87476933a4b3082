(function () {
  "use strict";
  // No angle brackets in this script: the page's tests look for stray tags.
  var form = document.getElementById("filters");
  if (!form) { return; }
  form.hidden = false;
  var rows = Array.prototype.slice.call(document.querySelectorAll("tr.row"));
  var counter = document.getElementById("shown");
  function value(name) { return form.elements[name].value; }
  function matches(row, f) {
    var d = row.dataset;
    if (f.session !== "*" && d.session !== f.session) { return false; }
    if (f.rule !== "*" && d.rule !== f.rule) { return false; }
    if (f.show === "attention" && !d.level) { return false; }
    if (f.show === "alert" && d.level !== "alert") { return false; }
    if (f.show === "calls" && ["call", "refusal", "gate"].indexOf(d.kind) === -1) { return false; }
    if (f.show === "unverified" && d.unverified !== "1") { return false; }
    return !f.text || row.textContent.toLowerCase().indexOf(f.text) !== -1;
  }
  function apply() {
    var f = { session: value("session"), show: value("show"), rule: value("rule"), text: value("text").trim().toLowerCase() };
    var shown = 0, total = 0;
    rows.forEach(function (row) {
      var ok = matches(row, f);
      row.hidden = !ok;
      if (row.dataset.view === "timeline") { total += 1; if (ok) { shown += 1; } }
    });
    counter.textContent = shown + " of " + total + " timeline rows shown";
  }
  // A session's button: the timeline, that session's rows only.
  Array.prototype.forEach.call(document.querySelectorAll("button[data-pick]"), function (button) {
    button.addEventListener("click", function () {
      form.elements.session.value = button.dataset.pick;
      form.elements.show.value = "all";
      apply();
      document.getElementById("timeline").scrollIntoView();
    });
  });
  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("submit", function (e) { e.preventDefault(); });
  apply();
})();
