// The back office's charts (uPlot): as wide as their card, times as the
// clock shows them, a legend with the newest values. admin.js says what to
// draw: window.queuegateChart(id, series, data, rightScale, owner) draws
// into the element `id`, again in place while its width, series and owner
// (the room shown) are the same.
(function () {
  "use strict";
  var charts = {};

  function chart(id, series, data, scales, owner) {
    var node = document.getElementById(id);
    // As wide as its card, never wider (a phone's card is under 300 px).
    var width = Math.max(160, node.clientWidth || 320);
    var existing = charts[id];
    // The axes in the page's text colour: uPlot's default black was about
    // 1.1:1 on the dark scheme's background (drawn again when it changes).
    var ink = getComputedStyle(node).color;
    if (existing && existing.width === width && existing.series.length === series.length + 1 && existing.owner === owner &&
        existing.series[1].scale === series[0].scale && existing.ink === ink) {
      existing.setData(data);
    } else {
      if (existing) existing.destroy();
      while (node.firstChild) node.removeChild(node.firstChild);
      var names = { s: "seconds", min: "minutes", h: "hours", d: "days", ms: "ms", people: "people",
        per: id === "health-chart" ? "admission" : "per minute" };
      // Times as the clock shows them, with room for each label (uPlot's
      // default puts a date under some and lets them run into each other).
      var faint = { stroke: faded(ink), width: 1 };
      var axes = [{ space: 90, values: clockLabels, stroke: ink, grid: faint, ticks: faint },
        { scale: series[0].scale, label: names[series[0].scale], values: amounts, size: axisSize, stroke: ink, grid: faint, ticks: faint }];
      if (scales) {
        axes.push({ side: 1, scale: scales, label: names[scales], grid: { show: false }, values: amounts, size: axisSize,
          stroke: ink, ticks: faint });
      }
      // Without an axis on the right, room there for half a time label: a
      // label at the right edge was cut ("04:38:00 A").
      var padding = [null, scales ? null : Math.ceil(labelWidth() / 2) + 4, null, null];
      series = series.map(function (s) { return Object.assign({ value: legendValue(UNITS[s.scale] || "") }, s); });
      var x = { label: "time", value: legendValue(null) };
      // Counts, rates and times from 0: a line of 1 to 2 people drawn
      // over the whole height read as a surge.
      var ranges = { x: { time: true } };
      series.forEach(function (s) { ranges[s.scale] = { range: fromZero }; });
      existing = charts[id] = new uPlot({ width: width, height: 220, series: [x].concat(series), axes: axes,
        padding: padding, scales: ranges, legend: { live: true } }, data, node);
      existing.owner = owner;
      existing.ink = ink;
      node.uplot = existing; // for the layout test's look at the axes
    }
    // At least SPAN seconds on the x axis, so that a first point or two do
    // not stretch it over years.
    var t = data[0], span = id === "live-chart" || id === "health-chart" ? 20 : 600;
    if (t.length) {
      var last = t[t.length - 1];
      existing.setScale("x", { min: Math.min(t[0], last - span), max: last + span / 40 });
    }
  }
  // A colour ("rgb(r, g, b)", as computed) at a sixth: grid lines and ticks.
  function faded(color) {
    var rgb = color.match(/[0-9.]+/g) || ["0", "0", "0"];
    return "rgba(" + rgb.slice(0, 3).join(", ") + ", 0.16)";
  }
  function fromZero(u, min, max) {
    return [0, max > 0 ? max * 1.1 : 1];
  }
  // The legend shows the values under the pointer, else the newest ones
  // (uPlot's own shows "--" until the pointer is over the chart).
  var UNITS = { ms: " ms", s: " s", min: " min", h: " h", d: " d" };
  function legendValue(unit) {
    return function (u, v, i, idx) {
      var d = u.data[i];
      if (idx === null || idx === undefined) {
        for (idx = d.length - 1; idx >= 0 && (d[idx] === null || d[idx] === undefined); idx--);
        v = idx >= 0 ? d[idx] : null;
      }
      if (v === null || v === undefined) return "\u2014";  // unknown, as the console says it
      if (unit === null) return new Date(v * 1000).toLocaleTimeString();
      // Exact, with the reader's grouping of digits ("120,006", "7,199,980.1 s").
      return (Number.isInteger(v) ? v : Math.round(v * 10) / 10).toLocaleString() + unit;
    };
  }
  // A y axis's figures as the reader's locale writes them: in full up to
  // 9,999 (uPlot's own), compact from 10,000 ("120K", "1.5M"; "1,500,000"
  // did not fit its axis). Three digits tell the ticks of a scale from 0
  // apart (steps of 1, 2, 2.5 or 5 times a power of ten: "1.25M").
  var compact = new Intl.NumberFormat(undefined, { notation: "compact", maximumSignificantDigits: 3 });
  function amounts(u, splits) {
    return splits.map(function (v) {
      if (v === null || v === undefined) return "";
      return Math.abs(v) >= 10000 ? compact.format(v) : uPlot.fmtNum(v);
    });
  }
  // A y axis as wide as its widest label, its tick and gap (uPlot's fixed
  // 50 px cut "1,500,000" at the edge, and ran "100,000" into the axis's
  // title). uPlot asks again, with the labels of the new layout, while the
  // sizes change: after its first answer an axis only grows, so that it
  // settles (its labels can change with the layout: "0.5" to "0.25").
  var measure = null;
  function axisSize(u, values, i, cycle) {
    var axis = u.axes[i];
    if (!measure) measure = document.createElement("canvas").getContext("2d");
    // uPlot keeps the font at the device's pixels.
    measure.font = axis.font[0];
    var widest = 0;
    (values || []).forEach(function (v) { widest = Math.max(widest, measure.measureText(String(v)).width / uPlot.pxRatio); });
    var size = Math.ceil((axis.ticks.show ? axis.ticks.size : 0) + axis.gap + widest + 2);
    return cycle > 1 ? Math.max(size, axis._size || 0) : size;
  }
  var widest = null;
  function labelWidth() {
    if (widest === null) {
      var ctx = document.createElement("canvas").getContext("2d");
      ctx.font = "12px " + getComputedStyle(document.body).fontFamily;
      var at = new Date(2000, 0, 1, 23, 58, 58);
      widest = ctx.measureText(at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })).width;
    }
    return widest;
  }
  function clockLabels(u, splits, axis, space, increment) {
    var options = increment < 60 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" } : { hour: "2-digit", minute: "2-digit" };
    return splits.map(function (t) { return new Date(t * 1000).toLocaleTimeString([], options); });
  }
  window.queuegateChart = chart;
})();
