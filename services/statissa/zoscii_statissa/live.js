// The console's live view of a queue (the queue page's <section id="live">): follows the
// queue over the live service's Server-Sent Events and lists what is published while the
// page is open. What it listed, and the last name, are kept in sessionStorage: a reload
// shows them again and resumes right after the last one (no gap, no repeat). Within one
// page, EventSource reconnects by itself with Last-Event-ID.
(function () {
  "use strict";
  var section = document.getElementById("live");
  if (!section || typeof EventSource === "undefined") return;
  var queue = section.dataset.queue;
  var list = section.querySelector("ol");
  var status = section.querySelector(".live-status");
  var key = "zoscii-live:" + section.dataset.url + ":" + queue;
  var KEEP = 200;
  var saved = {};
  try { saved = JSON.parse(sessionStorage.getItem(key) || "{}"); } catch (e) { saved = {}; }
  var entries = Array.isArray(saved.entries) ? saved.entries : [];
  var last = saved.last || section.dataset.after || "";

  function show(entry) {
    var item = document.createElement("li");
    item.dataset.name = entry.name;
    var name = document.createElement("code");
    name.textContent = entry.name;
    var text = document.createElement("span");
    text.className = "preview";
    text.textContent = " " + entry.preview + " (" + entry.size + " bytes)";
    item.appendChild(name);
    item.appendChild(text);
    list.appendChild(item);
  }

  function add(name, preview, size) {
    if (!name || name <= last) return;  // names sort in publish order: never twice
    var entry = { name: name, preview: preview, size: size };
    show(entry);
    entries.push(entry);
    while (entries.length > KEEP) { entries.shift(); list.removeChild(list.firstChild); }
    last = name;
    try { sessionStorage.setItem(key, JSON.stringify({ last: last, entries: entries })); }
    catch (e) { /* storage full or off: the view still works, a reload starts anew */ }
  }

  entries.forEach(show);
  var url = new URL(section.dataset.url, document.baseURI);
  url.searchParams.set("action", "stream");
  url.searchParams.set("q", queue);
  if (last) url.searchParams.set("after", last);
  var source = new EventSource(url.toString());
  source.onopen = function () { status.textContent = "following"; };
  source.onerror = function () {
    status.textContent = source.readyState === EventSource.CLOSED ? "stopped" : "reconnecting…";
  };
  source.onmessage = function (event) {
    add(event.lastEventId, event.data.slice(0, 200), new Blob([event.data]).size);
  };
  source.addEventListener("binary", function (event) {
    add(event.lastEventId, "(binary)", atob(event.data).length);
  });
  source.addEventListener("large", function (event) {
    var about = JSON.parse(event.data);
    add(about.name, "(large: fetch it by its name)", about.size);
  });
  source.addEventListener("disconnect", function () { status.textContent = "reconnecting…"; });
}());
