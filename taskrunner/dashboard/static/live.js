// Live updates: poll the page's /api/ twin and write the new values into the page.
// Values are only ever written as text (textContent, attribute values), never as
// HTML, so nothing a task payload or an error holds can become markup.
//
//   data-bind="a.b"      the element's text is that value (formatted by data-fmt)
//   data-rows="a.b"      a tbody rebuilt from that list with its <template> row;
//                        inside a row, paths are the item's fields
//   data-href="/x/{f}"   a link's href, with {f} the item's field f (URL-encoded)
//   data-action="/x/{f}" a form's action, the same way
//   data-value="f"       an input's value
//   data-show / data-show-not="a.b"   shown when the value is true / false
//   data-chart="a.b"     a polyline redrawn from [time, value] points
(function () {
  "use strict";
  var WIDTH = 600, HEIGHT = 120, SPAN = 3600;

  function get(doc, path) {
    var value = doc;
    path.split(".").forEach(function (key) {
      value = value === null || value === undefined ? undefined : value[key];
    });
    return value;
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  function fmt(value, kind) {
    if (value === null || value === undefined) return "\u2013";
    switch (kind) {
      case "int": return Math.trunc(Number(value)).toLocaleString("en-US");
      case "ms": return Number(value).toFixed(1) + " ms";
      case "s": return Number(value).toFixed(1) + " s";
      case "rate": return Number(value).toFixed(1) + "/s";
      case "bool": return value ? "yes" : "no";
      case "paused": return value ? "paused" : "active";
      case "list": return value.map(String).join(", ");
      case "time":
        var d = new Date(Number(value) * 1000);
        return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) +
          " " + pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds());
      default:
        return typeof value === "object" ? JSON.stringify(value) : String(value);
    }
  }

  function topOf(series) {
    return series.reduce(function (top, p) { return Math.max(top, p[1]); }, 1);
  }

  function polyline(series) {
    if (!series.length) return "";
    var end = series[series.length - 1][0], top = topOf(series), out = [];
    series.forEach(function (p) {
      var x = WIDTH * (1 - (end - p[0]) / SPAN);
      if (x < 0) return;
      var y = HEIGHT * (1 - Math.max(0, p[1]) / top);
      out.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    return out.join(" ");
  }

  function within(root, selector) {
    // The page's own elements leave out the rows of lists (bound item by item).
    var all = Array.prototype.slice.call(root.querySelectorAll(selector));
    if (root !== document.body) return all;
    return all.filter(function (el) { return !el.closest("[data-rows]"); });
  }

  function fill(template, doc) {
    return template.replace(/\{(\w+)\}/g, function (_, key) {
      return encodeURIComponent(String(get(doc, key)));
    });
  }

  function bind(root, doc) {
    within(root, "[data-bind]").forEach(function (el) {
      el.textContent = fmt(get(doc, el.dataset.bind), el.dataset.fmt);
    });
    within(root, "[data-href]").forEach(function (el) {
      el.setAttribute("href", fill(el.dataset.href, doc));
    });
    within(root, "[data-action]").forEach(function (el) {
      el.setAttribute("action", fill(el.dataset.action, doc));
    });
    within(root, "[data-value]").forEach(function (el) {
      el.value = String(get(doc, el.dataset.value));
    });
    within(root, "[data-show]").forEach(function (el) {
      el.hidden = !get(doc, el.dataset.show);
    });
    within(root, "[data-show-not]").forEach(function (el) {
      el.hidden = !!get(doc, el.dataset.showNot);
    });
  }

  function update(doc) {
    document.querySelectorAll("[data-rows]").forEach(function (body) {
      var items = get(doc, body.dataset.rows) || [];
      var signature = JSON.stringify(items);
      if (body.dataset.signature === signature) return;  // keeps open details, ticks
      body.dataset.signature = signature;
      var template = body.querySelector("template");
      // What the user ticked survives the rebuild (a row is known by its value).
      var ticked = {};
      body.querySelectorAll("input[type=checkbox]:checked").forEach(function (box) {
        ticked[box.value] = true;
      });
      Array.prototype.slice.call(body.children).forEach(function (child) {
        if (child !== template) body.removeChild(child);
      });
      items.forEach(function (item) {
        var row = template.content.firstElementChild.cloneNode(true);
        bind(row, item);
        row.querySelectorAll("input[type=checkbox]").forEach(function (box) {
          if (ticked[box.value]) box.checked = true;
        });
        body.appendChild(row);
      });
    });
    bind(document.body, doc);
    document.querySelectorAll("[data-chart]").forEach(function (line) {
      line.setAttribute("points", polyline(get(doc, line.dataset.chart) || []));
    });
    document.querySelectorAll("[data-chart-top]").forEach(function (el) {
      var series = get(doc, el.dataset.chartTop) || [];
      el.textContent = topOf(series).toFixed(1) + (el.dataset.unit || "");
    });
  }

  function start() {
    var api = document.body.dataset.api;
    if (!api) return;
    var every = Number(document.body.dataset.refresh) || 2000;
    var problem = document.getElementById("poll-error");
    var live = document.getElementById("live");
    function poll() {
      fetch(api, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (response) {
          return response.json().then(function (doc) {
            if (!response.ok) throw new Error(doc.error || response.statusText);
            return doc;
          });
        })
        .then(function (doc) {
          update(doc);
          problem.hidden = true;
          live.hidden = false;
          document.body.dataset.updated = String(Date.now());
        })
        .catch(function (error) {
          problem.textContent = "Live update failed: " + error.message;
          problem.hidden = false;
        })
        .then(function () { setTimeout(poll, every); });
    }
    setTimeout(poll, every);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
