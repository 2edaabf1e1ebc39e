/* sandgate approval page: live updates over Server-Sent Events. No dependencies, no build step.
   The queue is re-rendered by the server (/fragments/queue, escaped HTML) and swapped in; the detail page
   only announces that its item changed, so a half-typed reason is never lost. */
(function () {
  "use strict";
  var mode = document.body.getAttribute("data-live");
  if (!mode) { return; }
  var approvalId = document.body.getAttribute("data-approval");

  function toLogin() {
    window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname));
  }

  var busy = false, again = false;
  function refreshQueue() {
    if (busy) { again = true; return; }
    busy = true;
    fetch("/fragments/queue", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) { toLogin(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html === null) { return; }
        var box = document.getElementById("queue");
        var focused = document.activeElement && document.activeElement.getAttribute("data-id");
        box.innerHTML = html;
        var counter = box.querySelector("[data-count]");
        var status = document.getElementById("queue-status");
        if (counter && status) { status.textContent = counter.getAttribute("data-count") + " pending · updates live"; }
        if (focused) {
          var links = box.querySelectorAll("a[data-id]");
          for (var i = 0; i < links.length; i++) {
            if (links[i].getAttribute("data-id") === focused) { links[i].focus(); break; }
          }
        }
      })
      .catch(function () { /* the next event or tick retries */ })
      .then(function () {
        busy = false;
        if (again) { again = false; refreshQueue(); }
      });
  }

  function itemChanged(ev) {
    var notice = document.getElementById("live-notice");
    if (!notice || !approvalId || ev.id !== approvalId || ev.type === "filed") { return; }
    notice.hidden = false;
    notice.textContent = "";
    notice.appendChild(document.createTextNode("This approval changed elsewhere (" + ev.type + "). "));
    var a = document.createElement("a");
    a.href = window.location.pathname;
    a.textContent = "Reload to see it";
    notice.appendChild(a);
  }

  var source = null;
  function connect() {
    source = new EventSource("/events");
    source.addEventListener("approval", function (msg) {
      var ev;
      try { ev = JSON.parse(msg.data); } catch (e) { return; }
      if (mode === "queue") { refreshQueue(); } else { itemChanged(ev); }
    });
    source.addEventListener("logout", toLogin);
    source.onopen = function () { if (mode === "queue") { refreshQueue(); } };
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) {
        source = null;
        window.setTimeout(function () {
          fetch("/fragments/queue", { credentials: "same-origin" }).then(function (r) {
            if (r.status === 401) { toLogin(); } else { connect(); }
          }, function () { window.setTimeout(connect, 5000); });
        }, 2000);
      }
    };
  }
  if (window.EventSource) { connect(); }
  if (mode === "queue") { window.setInterval(refreshQueue, 30000); }
})();
