// The overview's live figures: /ui/overview.json every 2 s (no library, no CDN).
(function () {
  function set(id, text) { var el = document.getElementById(id); if (el) el.textContent = text; }
  function rows(id, head, items) {
    var table = document.getElementById(id);
    if (!table) return;
    var html = "<tr>" + head.map(function (h) { return "<th>" + h + "</th>"; }).join("") + "</tr>";
    items.forEach(function (cells) {
      html += "<tr>" + cells.map(function (c) {
        var td = document.createElement("td");
        td.textContent = c.text; if (c.cls) td.className = c.cls;
        return td.outerHTML;
      }).join("") + "</tr>";
    });
    table.innerHTML = html;
  }
  function sum(obj) { return Object.keys(obj).reduce(function (a, k) { return a + obj[k]; }, 0); }
  function refresh() {
    fetch("/ui/overview.json", {credentials: "same-origin"}).then(function (r) { return r.json(); })
      .then(function (o) {
        var err = document.getElementById("error");
        err.hidden = !o.error; err.textContent = o.error || "";
        set("fires", o.fires_per_s.toFixed(1));
        set("runs", sum(o.runs_per_s).toFixed(1));
        var h = o.last_hour;
        set("hour", Math.round(h.SUCCEEDED || 0) + " / " +
            Math.round((h.FAILED || 0) + (h.TIMED_OUT || 0) + (h.DEAD_LETTERED || 0)));
        set("skew", o.skew_p99_ms === null ? "-" : Math.round(o.skew_p99_ms) + " ms");
        set("dlq", o.dlq_records === null ? "-" : String(o.dlq_records));
        set("jobs", String(o.jobs));
        rows("lag", ["group", "records behind"], Object.keys(o.lag).map(function (k) {
          return [{text: k}, {text: String(Math.round(o.lag[k]))}]; }));
        var owned = Object.keys(o.owned).map(function (k) {
          return [{text: k}, {text: String(Math.round(o.owned[k]))}]; });
        owned.push([{text: "of"}, {text: o.partitions === null ? "-" : String(o.partitions)}]);
        rows("owned", ["scheduler", "partitions owned"], owned);
        rows("processes", ["role", "process", "state"], o.processes.map(function (p) {
          return [{text: p.role}, {text: p.process},
                  {text: p.up ? "up" : "DOWN", cls: p.up ? "ok" : "bad"}]; }));
        set("updated", "live · " + new Date().toLocaleTimeString());
      }).catch(function (e) { set("updated", "not updated: " + e); });
  }
  setInterval(refresh, 2000);
  refresh();
})();
