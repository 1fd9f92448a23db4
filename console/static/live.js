// Live updates: the server sends an "overview" event every refresh
// interval; the page's live region is re-rendered from the same URL.
// Without JavaScript the pages are complete; reload to refresh.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!live || !window.EventSource) { return; }
  var busy = false;
  function editing() {
    var a = document.activeElement;
    if (a && live.contains(a) && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(a.tagName)) { return true; }
    var fields = live.querySelectorAll("input");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value !== "" && fields[i].type !== "hidden") { return true; }
    }
    return false;
  }
  function refresh() {
    if (busy || editing()) { return; }
    busy = true;
    fetch(location.href, { headers: { "X-Fragment": "1" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) { live.innerHTML = html; status.textContent = "live · " + new Date().toLocaleTimeString(); })
      .catch(function () { status.textContent = "refresh failed"; })
      .finally(function () { busy = false; });
  }
  var es = new EventSource("/events");
  es.addEventListener("overview", refresh);
  es.addEventListener("error", function () { status.textContent = "reconnecting…"; });
})();
