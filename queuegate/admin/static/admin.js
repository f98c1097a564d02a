// The back office's page: polls the API every 2 s, draws with uPlot, sends
// changes as JSON POSTs carrying the CSRF cookie's token in a header.
(function () {
  "use strict";
  var ROOT = document.body.getAttribute("data-root");
  var STATUSES = ["open", "paused", "queue_all", "passthrough", "closed"];
  var METHODS = ["fifo", "random"];
  var LIVE_MS = 600000;
  var NO_TARGET = "No health target in code: give the room one (Room(..., target=Health(p95_ms=300))), then tune it here.";
  var CONTROLLER = ["target_ms", "max_errors", "floor", "ceiling", "settle"];
  var live = {}; // room -> [[t s], [waiting], [active], [p95 ms], [target ms], [rate or capacity]]
  var selected = null, editing = false, detail = null;
  var pressed = null; // the settings form's button whose change just came back
  // The log's times with their zone: operators on one call read them from
  // several (the console says UTC).
  var WHEN = { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" };

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  // Said beside the control that did it (`where`: the settings form's, the
  // visitor form's, the line's; else under the rooms table): under the
  // table alone, a change made in the settings was confirmed a screen
  // above, out of sight.
  function say(text, error, where) {
    var m = document.getElementById(where || "message");
    m.textContent = text; m.classList.toggle("error", Boolean(error));
    // In sight (a form's button near the window's edge left it below).
    if (where && text && m.scrollIntoView) m.scrollIntoView({ block: "nearest" });
  }
  function csrf() {
    var found = document.cookie.split("; ").filter(function (c) { return c.indexOf("queuegate_admin_csrf=") === 0; })[0];
    return found ? found.split("=")[1] : "";
  }
  function api(method, path, body) {
    var headers = { accept: "application/json" };
    if (method === "POST") { headers["content-type"] = "application/json"; headers["x-csrf-token"] = csrf(); }
    return fetch(ROOT + path, { method: method, credentials: "same-origin", headers: headers,
      body: method === "POST" ? JSON.stringify(body || {}) : undefined })
      .then(function (r) {
        return r.json().then(function (d) {
          if (!r.ok) { var e = new Error(d.error || ("HTTP " + r.status)); e.status = r.status; throw e; }
          return d;
        }, function () {
          // Not JSON: a proxy's answer (a 502, a 504), not the back office's.
          var e = new Error("HTTP " + r.status + " (not the back office's answer)");
          e.status = r.status; e.foreign = true; throw e;
        });
      });
  }
  // Unknown, as the console says it (queuegate.console.UNKNOWN).
  var UNKNOWN = "\u2014";
  var SPOKEN = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];
  // A duration in ms as the console says it (queuegate.console.duration):
  // "250 ms", "2.5 s", "42 s", "2 min 22 s", "1 h 5 min", "0 s"; the page said
  // "2.2 min" where `queuegate list` said "2 min 12 s" for the same wait.
  function seconds(ms) {
    if (ms === null || ms === undefined || ms < 0 || isNaN(ms)) return UNKNOWN;
    if (ms === 0) return "0 s";  // none, not a measurement ("0 ms")
    if (Math.round(ms) < 1000) return Math.round(ms) + " ms";  // 999.6 ms is "1 s", not "1000 ms"
    var tenths = Math.round(ms / 100) / 10;
    if (tenths < 10 && tenths !== Math.round(tenths)) return tenths.toFixed(1) + " s";
    var total = Math.round(ms / 1000), parts = [];
    SPOKEN.forEach(function (u) {
      var amount = Math.floor(total / u[0]);
      total -= amount * u[0];
      if (amount || parts.length) parts.push([amount, u[1]]);
    });
    // The two largest units people care about; "1 h", not "1 h 0 min".
    return parts.slice(0, 2).filter(function (p) { return p[0]; })
      .map(function (p) { return p[0] + " " + p[1]; }).join(" ");
  }
  // "1 min 30 s" on one line when a narrow histogram wraps its labels.
  function unbroken(ms) { return seconds(ms).replace(/ /g, "\u00a0"); }
  // A count with the reader's grouping of digits: "120,006", not "120006".
  function count(n) { return typeof n === "number" ? n.toLocaleString() : n; }
  // A measured rate a minute, as the console's list says it: a tenth below
  // 10 ("0.5"), whole and grouped from 10 on ("1,200"); not a count.
  function perMinute(x) { return x.toLocaleString(undefined, { maximumFractionDigits: x > 0 && x < 10 ? 1 : 0 }); }
  function share(x) { return x === null || x === undefined ? UNKNOWN : Math.round(x * 100) + " %"; }

  // -- the rooms table ------------------------------------------------------
  var LABELS = ["room", "status", "waiting", "active", "admitted a minute", "wait at the back", "median wait",
    "gave up", "rate / per (s)", "capacity", "target p95 (ms)", "health", ""];
  function roomRow(room) {
    var tr = el("tr", { "data-room": room.room });
    if (room.room === selected) tr.className = "selected";
    var cell = function (attrs, text) {
      var td = el("td", Object.assign({ "data-label": LABELS[tr.children.length] }, attrs || {}), text);
      tr.appendChild(td); return td;
    };
    var pick = el("button", { type: "button", "class": "quiet", "aria-label": "Show room " + room.room }, room.room);
    pick.addEventListener("click", function () { select(room.room); });
    var name = cell();
    name.appendChild(pick);
    // The title visitors see, beside the operator's name for the room.
    if (room.title) name.appendChild(el("span", { "class": "title" }, room.title));
    var label = function (what) { return what + " of " + room.room; };
    // The status shown is the control that changes it.
    var sel = el("select", { name: "status", "class": "pill " + room.status, "aria-label": label("status") });
    STATUSES.forEach(function (s) { sel.appendChild(el("option", s === room.status ? { value: s, selected: "" } : { value: s }, s)); });
    cell().appendChild(sel);
    var w = room.waits;
    [count(room.waiting), count(room.active), perMinute(room.per_minute), seconds(room.eta_back_ms), seconds(w.admitted_p50_ms), count(w.gave_up)]
      .forEach(function (v) { cell({}, v); });
    var rate = cell({ "class": "pair" });
    var r = el("input", { type: "number", min: "0", value: room.rate, name: "rate", "aria-label": label("rate") });
    var per = el("input", { type: "number", min: "0.1", step: "0.1", value: room.per / 1000, name: "per", "aria-label": label("interval in seconds") });
    rate.appendChild(r); rate.appendChild(document.createTextNode(" / ")); rate.appendChild(per);
    var cap = el("input", { type: "number", min: "0", value: room.capacity, name: "capacity", "aria-label": label("capacity") });
    cell().appendChild(cap);
    // A target is given in code (Room(target=Health(...))) and only tuned
    // here (0 switches it off): a room without one has nothing that would
    // measure it.
    var target = el("input", room.target_in_code
      ? { type: "number", min: "0", step: "50", value: room.target_ms, name: "target_ms", "aria-label": label("target p95 in ms, 0: off") }
      : { type: "number", value: 0, name: "target_ms", disabled: "", title: NO_TARGET, "aria-label": label("target p95 in ms: none") });
    cell().appendChild(target);
    var health = cell({ "class": "health" });
    if (room.target_ms > 0) {
      // A short verdict first (derived from the reason in one place,
      // queuegate.target.verdict), then the figures and the exact reason.
      health.appendChild(el("strong", {}, room.health_verdict || "measuring"));
      var pinned = room.pinned && room.health_verdict.indexOf("pinned") < 0 ? " · pinned" : "";
      // Its figures are its last look's, made as responses are reported:
      // once none has come for a while, how old they are is said.
      var old = room.health_stale_ms > 0 ? ", read " + seconds(room.health_stale_ms) + " ago: no response since" : "";
      health.appendChild(el("span", { "class": "note" },
        " · p95 " + (room.p95_ms < 0 ? UNKNOWN + " (no responses measured yet)" : room.p95_ms + " ms" + old) + pinned));
      if (room.health_reason) health.appendChild(el("span", { "class": "note reason" }, room.health_reason));
    } else {
      health.className = "note health";
      health.textContent = room.target_in_code ? "fixed: target off (0)" : "fixed: no target";
    }
    var apply = el("button", { type: "button", "aria-label": "Apply to " + room.room }, "Apply");
    apply.addEventListener("click", function () {
      if (!target.checkValidity()) { target.reportValidity(); return; }
      var wanted = { rate: Number(r.value), per: Number(per.value), capacity: Number(cap.value), status: sel.value, target_ms: Number(target.value) };
      var before = { rate: room.rate, per: room.per / 1000, capacity: room.capacity, status: room.status, target_ms: room.target_ms };
      var body = {};
      for (var k in wanted) if (wanted[k] !== before[k]) body[k] = wanted[k];
      if (!Object.keys(body).length) { say("Nothing changed in " + room.room + "."); return; }
      change(room.room, "", body);
    });
    // Enter in one of the row's fields applies the row, as in a form.
    tr.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && event.target.tagName === "INPUT") { event.preventDefault(); apply.click(); }
    });
    // A value typed and not applied yet is marked, and Revert puts the
    // row back to what Redis holds (Apply sent it with a later change).
    var revert = el("button", { type: "button", "class": "quiet revert", "aria-label": "Revert the changes to " + room.room + " not applied yet" }, "Revert");
    revert.addEventListener("click", function () {
      unapplied(tr).forEach(function (c) {
        if (c.tagName === "INPUT") c.value = c.defaultValue;
        else Array.prototype.forEach.call(c.options, function (o) { o.selected = o.defaultSelected; });
      });
      marked(tr);
    });
    var actions = cell({ "class": "actions" });
    actions.appendChild(apply); actions.appendChild(revert);
    marked(tr);
    return tr;
  }
  // The row's controls whose value is not the one Redis holds (a number
  // as a number: ".5" is the "0.5" shown).
  function unapplied(row) {
    return controls(row).filter(function (c) {
      if (c.tagName === "INPUT" && c.type === "number" && c.value !== "" && c.defaultValue !== "") {
        return Number(c.value) !== Number(c.defaultValue);
      }
      if (c.tagName === "INPUT") return c.value !== c.defaultValue;
      if (c.tagName === "SELECT") return Array.prototype.some.call(c.options, function (o) { return o.selected !== o.defaultSelected; });
      return false;
    });
  }
  function marked(row) {
    var changed = unapplied(row);
    controls(row).forEach(function (c) {
      var on = changed.indexOf(c) >= 0;
      c.classList.toggle("unapplied", on);
      if (on) c.setAttribute("title", "not applied yet: Apply, or Revert"); else if (c.tagName !== "BUTTON" && !c.disabled) c.removeAttribute("title");
    });
    row.querySelector("button.revert").hidden = !changed.length;
  }
  function change(room, action, body, where) {
    return api("POST", "api/rooms/" + encodeURIComponent(room) + (action ? "/" + action : ""), body)
      .then(function (d) {
        editing = false;
        // A change that may flood or starve the room is made, and said
        // (queuegate/risks.py); a release or remove of one who held nothing
        // did nothing, and says so as the console does (an error there).
        var warnings = d.warnings || [];
        var none = d.held_a_place === false;
        say((none ? "" : "Done: ") + describe(action || "settings", body, d) +
          warnings.map(function (w) { return ". Warning: " + w; }).join(""), warnings.length > 0 || none, where);
        refresh();
        return d;
      })
      .catch(function (err) { say(err.message, true, where); throw err; });
  }
  function describe(action, body, reply) {
    if (action === "settings" && body.reset_all) return "every setting back to the code's";
    if (action === "settings") {
      var names = Object.keys(body), set = names.filter(function (k) { return body[k] !== null; });
      var reset = names.filter(function (k) { return body[k] === null && k !== "pinned"; });
      var said = set.length ? ["changed " + set.map(function (k) { return k + " = " + body[k]; }).join(", ")] : [];
      if (reset.length) said.push(reset.join(", ") + " back to the code's");
      if (names.indexOf("pinned") >= 0 && body.pinned === null) said.push("given back to the controller");
      return said.join("; ");
    }
    if (action === "drain") return "drained " + reply.removed + " from the line";
    if (action === "seed") return "seed revealed";
    if (reply.held_a_place) return action + " " + body.visitor;
    return action === "release"
      ? "Nothing released: " + body.visitor + " holds no admission (one still in line stays there: Remove takes them out)"
      : "Nothing removed: " + body.visitor + " holds no place (any copy of an admission in the app's processes is revoked)";
  }

  // -- charts (charts.js draws them) ------------------------------------------
  function chart(id, series, data, scales) { window.queuegateChart(id, series, data, scales, selected); }
  function drawLive() {
    var d = live[selected] || [[], [], [], [], [], []];
    chart("live-chart", [
      { label: "waiting", stroke: "#2457d6", width: 2, scale: "people" },
      { label: "active", stroke: "#0f7a3d", width: 2, scale: "people" }], d.slice(0, 3));
    // A room with a health target: what the controller sees and sets.
    var health = d[4].length && d[4][d[4].length - 1] > 0;
    document.getElementById("health-figure").hidden = !health;
    if (health) {
      chart("health-chart", [
        { label: "p95 ms", stroke: "#b42318", width: 2, scale: "ms" },
        { label: "target ms", stroke: "#b07a00", width: 1.5, scale: "ms", dash: [6, 4] },
        { label: "rate (or capacity)", stroke: "#2457d6", width: 2, scale: "per" }],
        [d[0], d[3], d[4], d[5]], "per");
    }
  }
  // A duration's units, the scales charts.js names: [scale, ms].
  var DURATION_UNITS = [["s", 1000], ["min", 60000], ["h", 3600000], ["d", 86400000]];
  // One point a minute, at its end; the current minute so far is the last
  // point, with the line as it stands now.
  function drawMinutes(minutes, stats) {
    var t = [], waiting = [], active = [], admitted = [], gaveUp = [], wait = [], eta = [];
    minutes.forEach(function (m) {
      if (m.current) { m = Object.assign({}, m, { waiting: stats.waiting, active: stats.active }); }
      t.push(m.current ? stats.now / 1000 : m.at / 1000 + 60); waiting.push(m.waiting); active.push(m.active);
      admitted.push(m.admitted); gaveUp.push(m.gave_up);
      wait.push(m.wait_avg_ms === null ? null : m.wait_avg_ms);
      eta.push(m.eta_max_ms < 0 ? null : m.eta_max_ms);
    });
    // Waits in the unit that reads best for the longest: an axis of "6M"
    // seconds was 69 days.
    var longest = Math.max.apply(null, wait.concat(eta).filter(function (v) { return v !== null; }).concat([0]));
    var unit = DURATION_UNITS.filter(function (u) { return longest >= 3 * u[1]; }).pop() || DURATION_UNITS[0];
    wait = wait.map(function (v) { return v === null ? null : v / unit[1]; });
    eta = eta.map(function (v) { return v === null ? null : v / unit[1]; });
    chart("minutes-chart", [
      { label: "waiting", stroke: "#2457d6", width: 2, scale: "people" },
      { label: "active", stroke: "#0f7a3d", width: 2, scale: "people" },
      { label: "admitted / min", stroke: "#7a4cc2", width: 1.5, scale: "per" },
      { label: "gave up / min", stroke: "#b42318", width: 1.5, scale: "per" }],
      [t, waiting, active, admitted, gaveUp], "per");
    chart("waits-chart", [
      { label: "wait of those admitted (mean)", stroke: "#2457d6", width: 2, scale: unit[0], spanGaps: true },
      { label: "longest estimate given", stroke: "#b07a00", width: 1.5, scale: unit[0], dash: [6, 4], spanGaps: true }],
      [t, wait, eta]);
  }

  // -- the selected room --------------------------------------------------
  function histogram(analytics) {
    var table = clear(document.getElementById("waits"));
    var head = el("tr"); ["wait", "admitted", "", "gave up", ""].forEach(function (h, i) {
      var th = el("th", { scope: "col" }, h);
      if (!h) th.appendChild(el("span", { "class": "visually-hidden" }, i === 2 ? "share admitted" : "share who gave up"));
      head.appendChild(th);
    });
    var thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
    var a = analytics.waits.admitted, g = analytics.waits.gave_up, body = el("tbody");
    var top = Math.max(1, Math.max.apply(null, a.counts.concat(g.counts)));
    a.counts.forEach(function (n, i) {
      var low = i === 0 ? 0 : a.bounds_ms[i - 1];
      // "up to 5 s" (a wait of 5 s is in it: analytics.lua), "1 min – 2 min",
      // "over 4 h": not "0 s – 5 s" nor "1.0 min – 2.0 min".
      var text = i === 0 ? "up to " + unbroken(a.bounds_ms[0])
        : i < a.bounds_ms.length ? unbroken(low) + " – " + unbroken(a.bounds_ms[i]) : "over " + unbroken(low);
      var tr = el("tr"); tr.appendChild(el("th", { scope: "row" }, text));
      [[n, ""], [g.counts[i], " gave-up"]].forEach(function (pair) {
        tr.appendChild(el("td", {}, count(pair[0])));
        var bar = el("td", { "class": "bar" }); var fill = el("span", { "class": "fill" + pair[1] });
        fill.style.width = (pair[0] / top * 100).toFixed(1) + "%"; bar.appendChild(fill); tr.appendChild(bar);
      });
      body.appendChild(tr);
    });
    var foot = el("tr"); foot.appendChild(el("th", { scope: "row" }, "median · p90 · p99"));
    [a, g].forEach(function (h) {
      // None yet: said so, not "– · – · –".
      foot.appendChild(el("td", { colspan: "2" }, h.count > 0 ? [h.p50_ms, h.p90_ms, h.p99_ms].map(unbroken).join(" · ") : "none yet"));
    });
    body.appendChild(foot); table.appendChild(body);
    var e = analytics.estimate;
    document.getElementById("estimate").textContent = e.checked
      ? "Estimates at joining within 20 % of the real wait: " + share(e.share) + " of " + e.checked + " admitted from the line."
      : "No one admitted from the line yet: the estimates' accuracy shows here once they are.";
  }
  // Newcomers the client limit turned away (429): many at once, behind a
  // proxy the gate does not know, is every visitor counted as one client.
  function limitedNote(stats) {
    var n = stats.limited, limit = stats.client_limit;
    var now = limit ? "(" + limit + " a minute from one address)" : "(off now)";
    document.getElementById("limited").textContent = n
      ? "Refused a new place by the client limit " + now + ": " + n + (n === 1 ? " time" : " times") +
        " since the room was made. Many at once: is a proxy in front that the gate does not trust (trusted_proxies)?"
      : limit ? "Nobody refused a place by the client limit " + now + "." : "";
  }
  function settingsForm(stats) {
    var form = document.getElementById("settings");
    // Not while the focus is in the form (a value typed, a button about to
    // be pressed), but just after one of its buttons did its change: then
    // made again, the focus back on that button (or Apply, if it is gone).
    var focused = form.contains(document.activeElement) ? document.activeElement : null;
    if (focused && !(focused.tagName === "BUTTON" && pressed === focused.textContent)) return;
    var again = focused ? pressed : null;
    pressed = null;
    clear(form);
    // Every run-time setting, with the bounds the API checks (checks.py):
    // [name, kind, label, extra attributes of its field].
    // In the words of `queuegate set --help` ("capacity (0 = none)" read as
    // "nobody", where 0 is no limit; "silent this long: skipped (s)" as a
    // note to oneself).
    var fields = [
      ["rate", "number", "visitors admitted per interval (0 = no limit; only beside a capacity)"], ["per", "seconds", "interval (s)", { min: "0.001" }],
      ["capacity", "number", "most active sessions (0 = no limit)"], ["session", "seconds", "session length (s)", { min: "0.001" }],
      ["sliding", "bool", "each request renews the session"],
      ["abandon", "seconds", "skip waiting visitors silent for (s)"], ["status", STATUSES, "status"], ["method", METHODS, "order"],
      ["max_step", "number", "most visitors moved per call", { min: "1" }],
      ["opens_at", "datetime", "opens at (your time zone)"], ["challenge", "number", "proof of work: largest number to try (0 = none)", { max: "10000000" }],
      ["client_limit", "number", "new places per client a minute"],
      ["forget", "seconds", "expire the room unused for (s, 0 = never)"],
      ["target_ms", "number", "health target p95 (ms, 0 = off)"],
      ["max_errors", "share", "errors tolerated (share)", { max: "1" }], ["floor", "number", "controller's floor", { min: "1" }],
      ["ceiling", "number", "controller's ceiling (0 = none)"], ["settle", "seconds", "controller's settle time (s)", { min: "0.001" }]];
    var before = {}, fixed = !stats.target_in_code;
    fields.forEach(function (f) {
      var name = f[0], kind = f[1], id = "set-" + name, input, value = stats[name];
      form.appendChild(el("label", { "for": id }, f[2]));
      if (Array.isArray(kind)) {
        input = el("select", { id: id, name: name });
        kind.forEach(function (v) { var o = el("option", { value: v }, v); if (v === value) o.selected = true; input.appendChild(o); });
      } else if (kind === "bool") {
        input = el("input", { id: id, name: name, type: "checkbox" });
        input.checked = Boolean(value);
        value = input.checked;
      } else if (kind === "datetime") {
        input = el("input", { id: id, name: name, type: "datetime-local" });
        if (value > 0) { var d = new Date(value - new Date(value).getTimezoneOffset() * 60000); input.value = d.toISOString().slice(0, 16); }
        value = input.value;
      } else {
        if (kind === "seconds") value = value / 1000;
        input = el("input", Object.assign({ id: id, name: name, type: "number", min: "0", step: kind === "number" ? "1" : "any",
          value: value }, f[3] || {}));
      }
      // A setting the stats lack is blank, and stays unsent unless typed in.
      before[name] = value === undefined || value === null ? "" : String(value);
      if (fixed && CONTROLLER.indexOf(name) >= 0) {
        input.disabled = true; input.setAttribute("aria-describedby", "no-target");
      }
      form.appendChild(input);
      if (fixed && name === "target_ms") form.appendChild(el("p", { id: "no-target", "class": "note span" }, NO_TARGET));
      // Where a value that is not the code's comes from: an operator, or
      // the controller (queuegate show says the same).
      var origin = whoSet(stats, name, kind);
      if (origin) {
        form.appendChild(el("p", { id: id + "-origin", "class": "note span origin" }, origin));
        input.setAttribute("aria-describedby", ((input.getAttribute("aria-describedby") || "") + " " + id + "-origin").trim());
      }
    });
    var actions = el("div", { "class": "span row" });
    actions.appendChild(el("button", { type: "submit" }, "Apply changes"));
    var runTime = stats.run_time || [];
    // (A pin left by a deploy that had a target, with none now: Reset removes it.)
    if (stats.pinned && stats.target_in_code) {
      var auto = el("button", { type: "button", "class": "quiet" }, "Give the " + stats.pinned_setting + " back to the controller");
      auto.addEventListener("click", function () {
        change(selected, "", { pinned: null }, "settings-message").then(function () { pressed = auto.textContent; loadDetail(); });
      });
      actions.appendChild(auto);
    }
    if (runTime.length || stats.pinned) {
      var reset = el("button", { type: "button", "class": "quiet" }, "Reset to the code's…");
      reset.addEventListener("click", function () {
        if (!window.confirm("Set " + (runTime.length ? runTime.join(", ") : "the room") + " of " + selected +
          " back to the code's values" + (stats.pinned ? ", and give the controller its setting back" : "") + "?")) return;
        // What is set is read in the same script that resets it (configure.lua):
        // a change another operator makes meanwhile is reset too, or after.
        change(selected, "", { reset_all: true }, "settings-message").then(function () { pressed = reset.textContent; loadDetail(); });
      });
      actions.appendChild(reset);
    }
    form.appendChild(actions);
    if (again !== null) {
      var same = Array.prototype.filter.call(actions.children, function (b) { return b.textContent === again; })[0];
      (same || actions.firstChild).focus();
    }
    form.onsubmit = function (event) {
      event.preventDefault();
      var body = {}, shown = {};
      fields.forEach(function (f) {
        var input = form.elements[f[0]], v = f[1] === "bool" ? String(input.checked) : input.value;
        if (v === before[f[0]]) return;
        shown[f[0]] = v;
        if (f[1] === "bool") body[f[0]] = input.checked;
        else if (f[1] === "datetime") body[f[0]] = v ? new Date(v).toISOString() : 0;
        else if (Array.isArray(f[1])) body[f[0]] = v;
        else body[f[0]] = Number(v);
      });
      if (!Object.keys(body).length) { say("Nothing changed.", false, "settings-message"); return; }
      change(selected, "", body, "settings-message").then(function () {
        // Applied: what the form shows is the room's now (a form kept while
        // it has the focus sent the same change again with the next one).
        Object.assign(before, shown);
        pressed = "Apply changes";
        loadDetail();
      });
    };
  }
  // "set at run time; code: 600 s", "held by the health controller", or ""
  // for a value that is the code's.
  function whoSet(stats, name, kind) {
    var code = (stats.code || {})[name];
    if (stats.controlled === name) return "held by the health controller" + (code === undefined ? "" : "; code: " + shown(code, kind));
    if ((stats.run_time || []).indexOf(name) < 0) return "";
    var said = "set at run time" + (stats.pinned && name === stats.pinned_setting ? ", pinned" : "");
    if (code === undefined) return said + "; code: not known";
    return said + (shown(code, kind) === shown(stats[name], kind) ? ", the same as the code" : "; code: " + shown(code, kind));
  }
  function shown(value, kind) {
    if (kind === "seconds") return (value / 1000) + " s";
    if (kind === "bool") return Number(value) ? "yes" : "no";
    if (kind === "datetime") return Number(value) > 0 ? new Date(Number(value)).toLocaleString() : "none";
    return String(value);
  }
  function visitorsList(visitors, stats) {
    var box = clear(document.getElementById("visitors"));
    [["waiting", "First in line"], ["active", "Active"]].forEach(function (pair) {
      box.appendChild(el("p", { "class": "note" }, pair[1] + ": " + (visitors[pair[0]].length ? "" : "nobody")));
      var list = el("ul");
      visitors[pair[0]].forEach(function (v) {
        var item = el("li"); var b = el("button", { type: "button", "class": "quiet" }, v[0]);
        b.addEventListener("click", function () { document.getElementById("visitor-id").value = v[0]; });
        item.appendChild(b); list.appendChild(item);
      });
      // The list shows the first few: say how many it leaves out.
      var more = (stats[pair[0]] || 0) - visitors[pair[0]].length;
      if (more > 0 && visitors[pair[0]].length) list.appendChild(el("li", { "class": "note more" }, "and " + count(more) + " more"));
      box.appendChild(list);
    });
  }
  // One setting of a logged change; null is a reset (Store.configure(x=None)).
  function changeText(name, value) {
    if (value !== null) return name + " " + JSON.stringify(value);
    return name === "pinned" ? "pinned off (back to the controller)" : name + " reset to the code's value";
  }
  // A change's settings: each one, and the resets together in one line.
  function changeTexts(details) {
    var said = [], reset = [];
    Object.keys(details).forEach(function (k) {
      if (details[k] === null && k !== "pinned") reset.push(k); else said.push(changeText(k, details[k]));
    });
    if (reset.length === 1) said.push(changeText(reset[0], null));
    else if (reset.length) said.push("reset to the code's values: " + reset.join(", "));
    return said;
  }
  function activityList(node, entries) {
    clear(node);
    // Nothing logged: a sentence beside the list, not an item of it (a
    // screen reader said "list, 1 item").
    node.hidden = !entries.length;
    document.getElementById("activity-empty").hidden = entries.length > 0;
    entries.forEach(function (a) {
      var details = changeTexts(a.details);
      // null: an entry of no one room (a run of virtual visitors).
      var room = a.room === null ? "" : a.room + " · ";
      var head = new Date(a.at).toLocaleString([], WHEN) + " · " + a.who + " · " + room + a.action;
      // A short change on its line; a long one (--reset all) as a list.
      var long = details.length > 2 || details.join(", ").length > 120;
      var item = el("li", {}, head + (details.length ? ": " + (long ? "" : details.join(", ")) : ""));
      if (long) {
        var list = el("ul", { "class": "details" });
        details.forEach(function (d) { list.appendChild(el("li", {}, d)); });
        item.appendChild(list);
      }
      node.appendChild(item);
    });
    // A stop for the keyboard only while it scrolls (axe: a scrollable
    // region must be reachable), not a stop that does nothing.
    if (node.scrollHeight > node.clientHeight) node.setAttribute("tabindex", "0"); else node.removeAttribute("tabindex");
  }
  // The seed matters only to a room that draws: a lottery, or a scheduled
  // opening whose early comers are shuffled; or one that drew (a lottery
  // switched back to first come, first served, whose seed is to publish).
  function drawsShown(stats) {
    var seed = document.getElementById("seed");
    var lottery = stats.method === "random" || stats.draws > 0;
    seed.hidden = !(lottery || stats.opens_at > 0);
    seed.textContent = lottery ? "Reveal the lottery's seed…" : "Reveal the opening draw's seed…";
  }
  function loadDetail() {
    if (!selected) return;
    var room = selected;
    api("GET", "api/rooms/" + encodeURIComponent(room)).then(function (d) {
      if (room !== selected) return;
      detail = d;
      document.getElementById("detail").hidden = false;
      document.getElementById("detail-title").textContent = "Room " + room + (d.stats.title ? " · " + d.stats.title : "");
      drawMinutes(d.analytics.minutes, d.stats);
      histogram(d.analytics);
      limitedNote(d.stats);
      // stats.lua's `unlimited`: rate and capacity both 0 (no limit), which
      // a deploy under a run-time value can leave.
      document.getElementById("unlimited").textContent =
        d.stats.unlimited
          ? "This room lets everyone in: its rate and capacity are both 0 (no limit). Give one a value, or reset them to the code's."
          : "";
      settingsForm(d.stats);
      drawsShown(d.stats);
      visitorsList(d.visitors, d.stats);
      showActivity();
    }).catch(function (err) { say(err.message, true); });
  }
  // One activity list: every room's, or the room shown's.
  var everything = [];
  function showActivity() {
    var only = document.getElementById("activity-room").checked && detail && detail.room === selected;
    activityList(document.getElementById("activity"), only ? detail.activity : everything);
  }
  function select(room) {
    selected = room;
    document.getElementById("seed-out").textContent = "";
    // What was said of the last room's forms is not said of this one's.
    ["settings-message", "visitor-message", "line-message"].forEach(function (id) { say("", false, id); });
    document.getElementById("activity-room-name").textContent = "room " + room;
    Array.prototype.forEach.call(document.querySelectorAll("#rooms tr"), function (tr) {
      tr.className = tr.getAttribute("data-room") === room ? "selected" : "";
    });
    drawLive(); loadDetail();
  }

  // -- when the rooms cannot be read -------------------------------------------
  // Redis away (503), the back office's server away, or signed out: a banner
  // says so once (role=alert), the figures stay with the time they were
  // read, and every control that would fail is off until the next answer.
  var outage = null, lastRead = null;
  var OUTAGES = {
    redis: ["Redis is not answering.", "Redis answers again: the figures are live."],
    server: ["The back office is not answering.", "The back office answers again: the figures are live."],
    answered: ["The back office answered with an error.", "The back office answers again: the figures are live."],
    signedOut: ["You are signed out.", "Signed in again: the figures are live."]
  };
  // A control disabled while it had focus drops it to the page: the
  // keyboard's place is kept (the control, or one of its id after a
  // redraw) and given back when the controls are on again.
  var focusedBefore = null;
  function controlsOff(off) {
    var active = document.activeElement;
    Array.prototype.forEach.call(document.querySelectorAll("main button, main input, main select"), function (c) {
      if (c.id === "activity-room") return; // a filter of what the page has: still works
      if (off && !c.disabled) {
        if (c === active) focusedBefore = { element: c, id: c.id };
        c.disabled = true; c.setAttribute("data-offline", "");
      }
      else if (!off && c.hasAttribute("data-offline")) { c.disabled = false; c.removeAttribute("data-offline"); }
    });
    if (off || !focusedBefore) return;
    var back = focusedBefore.element.isConnected ? focusedBefore.element
      : focusedBefore.id ? document.getElementById(focusedBefore.id) : null;
    focusedBefore = null;
    if (back && !back.disabled && (document.activeElement === document.body || !document.activeElement)) back.focus();
  }
  function unreachable(err) {
    // "Not answering" only when nothing came back (a network error): any
    // other status is an answer, said with its status (a 404, a 500 of a bug).
    var kind = !err.status || err.foreign ? "server"
      : err.status === 503 ? "redis" : err.status === 401 ? "signedOut" : "answered";
    document.body.classList.add("offline");
    document.getElementById("clock").textContent = "offline";
    var asOf = lastRead ? "as of " + lastRead.toLocaleTimeString() + ", not live" : "";
    Array.prototype.forEach.call(document.querySelectorAll(".as-of"), function (s) { s.textContent = asOf; });
    controlsOff(true);
    var said = kind + (kind === "answered" ? err.status : "");
    if (outage === said) return; // said once (an answer of another status is said again)
    outage = said;
    var box = clear(document.getElementById("outage"));
    box.appendChild(el("strong", {}, kind === "answered" ? "The back office answered " + err.status + "." : OUTAGES[kind][0]));
    box.appendChild(document.createTextNode(" " + (lastRead
      ? "The figures below were read at " + lastRead.toLocaleTimeString() + " and may be out of date"
      : "No figures could be read yet") + "; the controls are off until it answers. This page tries again every 2 s."));
    if (kind === "signedOut") {
      box.appendChild(document.createTextNode(" "));
      box.appendChild(el("a", { href: ROOT + "login" }, "Sign in again"));
    }
    box.appendChild(el("span", { "class": "detail" }, err.message));
  }
  function reachable(d) {
    lastRead = new Date(d.now);
    document.getElementById("clock").textContent = "live · " + lastRead.toLocaleTimeString([], { timeZoneName: "short" });
    if (outage === null) return;
    var kind = outage.replace(/[0-9]+$/, "");
    outage = null;
    document.body.classList.remove("offline");
    clear(document.getElementById("outage"));
    Array.prototype.forEach.call(document.querySelectorAll(".as-of"), function (s) { s.textContent = ""; });
    controlsOff(false);
    say(OUTAGES[kind][1]);
  }

  // -- polling ------------------------------------------------------------
  var ticks = 0, loaded = false;
  // The rooms table's one line of text, in place of its rows.
  function note(text) {
    var row = el("tr");
    row.appendChild(el("td", { colspan: "13", "class": "note" }, text));
    clear(document.getElementById("rooms")).appendChild(row);
  }
  function refresh() {
    api("GET", "api/rooms").then(function (d) {
      reachable(d);
      d.rooms.forEach(function (room) {
        var h = live[room.room] = live[room.room] || [[], [], [], [], [], []];
        var values = [d.now / 1000, room.waiting, room.active, room.p95_ms < 0 ? null : room.p95_ms, room.target_ms,
          room.rate > 0 ? room.rate : room.capacity];
        values.forEach(function (v, i) { h[i].push(v); });
        while (h[0].length && h[0][0] < (d.now - LIVE_MS) / 1000) h.forEach(function (a) { a.shift(); });
      });
      var body = document.getElementById("rooms");
      if (!editing && d.rooms.length) {
        // Redrawn unless a field is being typed in; the control that had
        // the focus has it again after (keyboard users keep their place),
        // and a value changed and not applied yet is carried over, marked
        // (the whole table held still for it, its figures growing stale).
        var active = document.activeElement, row = body.contains(active) ? active.closest("tr") : null;
        var place = row ? [row.getAttribute("data-room"), controls(row).indexOf(active)] : null;
        var kept = {};
        Array.prototype.forEach.call(body.querySelectorAll("tr[data-room]"), function (old) {
          unapplied(old).forEach(function (c) { (kept[old.getAttribute("data-room")] = kept[old.getAttribute("data-room")] || {})[c.name] = c.value; });
        });
        clear(body);
        d.rooms.forEach(function (room) {
          var fresh = roomRow(room), typed = kept[room.room] || {};
          controls(fresh).forEach(function (c) { if (c.name && c.name in typed) c.value = typed[c.name]; });
          marked(fresh);
          body.appendChild(fresh);
        });
        row = place && body.querySelector("tr[data-room='" + CSS.escape(place[0]) + "']");
        if (row && controls(row)[place[1]]) controls(row)[place[1]].focus({ preventScroll: true });
      } else if (!d.rooms.length) {
        note("no rooms yet under this prefix: a room appears when the app starts (without a lifespan, at its first visitor)");
      }
      loaded = true;
      if (!selected && d.rooms.length) select(d.rooms[0].room);
      else if (selected) { drawLive(); if (ticks % 2 === 0) loadDetail(); }
      document.getElementById("simulate").hidden = !d.virtual_visitors;
      simulationStatus(d.simulation);
      ticks += 1;
    }).catch(function (err) {
      // (Why is in the banner above: said once, not twice.)
      if (!loaded) note("could not load the rooms (see above); trying again every 2 s");
      unreachable(err);
    });
    api("GET", "api/activity?count=30").then(function (d) {
      everything = d.activity; showActivity();
    }).catch(function () {});
  }

  function simulationStatus(s) {
    if (!s) return;
    var counts = s.admitted + " admitted, " + s.waiting + " waiting, " + s.gave_up + " gave up, " + s.errors + " errors";
    document.getElementById("sim-status").textContent = s.running
      ? "Running, of " + s.visitors + ": " + counts + "; " + s.arriving + " asking for the page, " + s.not_started
        + " not started yet (200 run at once)."
      : "Last run, of " + s.visitors + ": " + counts + "; median wait " + (s.wait_p50_s === null ? UNKNOWN : seconds(s.wait_p50_s * 1000)) + ".";
    var list = clear(document.getElementById("sim-errors"));
    s.error_reasons.forEach(function (e) { list.appendChild(el("li", {}, e.count + " × " + e.reason)); });
  }
  function controls(row) { return Array.prototype.slice.call(row.querySelectorAll("button, input, select")); }
  // A field being typed in holds the table still; a focused button does
  // not, nor a value changed and left (carried over: refresh).
  function typing() {
    var body = document.getElementById("rooms"), active = document.activeElement;
    return Boolean(active && body.contains(active) && active.tagName !== "BUTTON");
  }
  document.getElementById("rooms").addEventListener("focusin", function () { editing = typing(); });
  document.getElementById("rooms").addEventListener("focusout", function () {
    setTimeout(function () { editing = typing(); }, 0);
  });
  ["input", "change"].forEach(function (type) {
    document.getElementById("rooms").addEventListener(type, function (event) {
      var row = event.target.closest && event.target.closest("tr[data-room]");
      if (row) marked(row);
    });
  });
  document.getElementById("activity-room").addEventListener("change", showActivity);
  document.getElementById("visitor-form").addEventListener("submit", function (event) {
    event.preventDefault();
    var action = event.submitter ? event.submitter.value : "release";
    var visitor = document.getElementById("visitor-id").value.trim();
    if (!visitor) { say("Name a visitor id first (pick one from the lists).", true, "visitor-message"); return; }
    change(selected, action, { visitor: visitor }, "visitor-message").then(loadDetail);
  });
  document.getElementById("drain").addEventListener("click", function () {
    var waiting = detail && detail.room === selected ? count(detail.stats.waiting) + " " : "";
    if (!window.confirm("Empty the line of " + selected + "? Everyone waiting (" + (waiting || "all ") +
      "in line now) loses their place.")) return;
    change(selected, "drain", {}, "line-message").then(loadDetail);
  });
  document.getElementById("seed").addEventListener("click", function () {
    if (!window.confirm("Reveal the seed of " + selected + "? Publish it only after the draw.")) return;
    change(selected, "seed", {}, "line-message").then(function (d) {
      document.getElementById("seed-out").textContent = "seed " + d.seed + " · its SHA-256 (published before the draw) " + d.seed_sha256;
      loadDetail();
    });
  });
  document.getElementById("sim-form").addEventListener("submit", function (event) {
    event.preventDefault();
    api("POST", "api/simulate", { visitors: Number(document.getElementById("sim-visitors").value),
      path: document.getElementById("sim-path").value, give_up: Number(document.getElementById("sim-give-up").value),
      leave: document.getElementById("sim-leave").checked })
      .then(function () { say("Virtual visitors launched.", false, "sim-message"); refresh(); })
      .catch(function (err) { say(err.message, true, "sim-message"); });
  });
  window.addEventListener("resize", function () { drawLive(); if (detail) drawMinutes(detail.analytics.minutes, detail.stats); });
  refresh();
  setInterval(refresh, 2000);
})();
