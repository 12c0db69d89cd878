// stackscope report.html: memory, where the recording read it. The memory chart (uPlot): a line
// per process's resident memory, the cgroup's usage and its limit as a horizontal line, on the
// GPU timeline's x axis, shaded and selected as it is; and the memory growth flamegraph
// (flame.js) of the selected window: the stacks weighted by the bytes that grew while they ran.
// report.js owns the window and the trees and calls these; this file keeps no state of its own.
var stackscopeMemory = (function () {
  "use strict";
  var MB = 1e6;
  // The cgroup's lines stand apart from the processes' colours: its limit red, its usage grey.
  var LIMIT = { stroke: "#b3261e", width: 1.5, dash: [8, 4] };
  var USAGE = { stroke: "#7a7a7a", width: 1.25, dash: [3, 3] };

  // Bytes as the memory verdict says them (decimal units): 365 MB, 1.25 GB, 12.0 KB.
  function bytes(v) {
    var units = [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "KB"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(v) >= units[i][0]) {
        var n = v / units[i][0];
        return (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2)) + " " + units[i][1];
      }
    }
    return Math.round(v) + " B";
  }

  // The last time the chart has a reading at, for the page's x range.
  function end(M) {
    var last = 0;
    M.processes.forEach(function (p) { if (p.t.length) last = Math.max(last, p.t[p.t.length - 1]); });
    if (M.cgroup && M.cgroup.t.length) last = Math.max(last, M.cgroup.t[M.cgroup.t.length - 1]);
    return last;
  }

  // uPlot's data, in MB on one x (every reading's time merged; a line has null where it has no
  // reading and spans it), and for each line its look and legend entry. The limit is a value
  // at every x: a horizontal line across the chart.
  function plotData(M, from, to) {
    var times = {};
    times[from] = 1;
    times[to] = 1;
    M.processes.forEach(function (p) { p.t.forEach(function (t) { times[t] = 1; }); });
    if (M.cgroup) M.cgroup.t.forEach(function (t) { times[t] = 1; });
    var xs = Object.keys(times).map(Number).sort(function (a, b) { return a - b; });
    var pos = {};
    xs.forEach(function (t, i) { pos[t] = i; });
    var data = [xs], entries = [];
    function line(t, values, entry) {
      var col = new Array(xs.length).fill(null);
      t.forEach(function (x, i) { col[pos[x]] = values[i] / MB; });
      data.push(col);
      entries.push(entry);
    }
    M.processes.forEach(function (p, i) {
      line(p.t, p.rss, { label: p.label, kind: "process", pid: p.pid, group: "resident memory",
        stroke: stackscopeSeries.colour(i), width: 1.75, dash: null, unit: "MB", show: true });
    });
    if (M.cgroup) {
      // The cgroup's usage counts the page cache and whatever else shares the cgroup, often
      // far above the processes: drawn at first, it would flatten their lines. Its legend entry
      // shows it.
      line(M.cgroup.t, M.cgroup.usage, { label: "usage", kind: "cgroup", group: "memory cgroup",
        stroke: USAGE.stroke, width: USAGE.width, dash: USAGE.dash, unit: "MB", show: false });
      if (M.cgroup.limit !== null && M.cgroup.limit !== undefined) {
        var limit = M.cgroup.limit / MB;
        data.push(xs.map(function () { return limit; }));
        entries.push({ label: "limit", kind: "limit", group: "memory cgroup", stroke: LIMIT.stroke,
          width: LIMIT.width, dash: LIMIT.dash, unit: "MB", show: true });
      }
    }
    return { data: data, entries: entries };
  }

  // Draws the chart into `el` and its legend into `legendEl`. `o`: width, the x range
  // (`range()`), the left and right axis sizes of the GPU chart (so that both plot the same
  // seconds at the same pixels), `onSelect(u)` for a dragged window and `overlay(u)` drawn over
  // the lines (the window's shading). Returns the uPlot.
  function chart(el, legendEl, M, o) {
    var range = o.range();
    var built = plotData(M, range[0], range[1]);
    var series = [{}].concat(built.entries.map(function (e) {
      return {
        label: e.label, stroke: e.stroke, width: e.width, dash: e.dash || undefined,
        show: e.show, scale: "MB", spanGaps: true, points: { show: false }
      };
    }));
    var updateLegend = null;
    // The seconds are named on the GPU chart's axis, right above: this one keeps its room.
    var axes = [
      { size: 30 },
      { scale: "MB", label: "MB", labelSize: 20, size: o.leftAxis }
    ];
    // The GPU chart's power axis takes room on the right: the same room here keeps the x axes
    // aligned (its label's room too, as the power axis has a label).
    if (o.rightAxis) {
      axes.push({ scale: "MB", side: 1, grid: { show: false }, label: "MB", labelSize: 20, size: o.rightAxis });
    }
    var plot = new uPlot({
      width: o.width,
      height: 100,
      scales: {
        x: { time: false, range: function () { return o.range(); } },
        // From 0: memory that doubles should look like it.
        MB: { range: function (u, min, max) { return [0, max > 0 ? max * 1.08 : 1]; } }
      },
      axes: axes,
      series: series,
      cursor: { drag: { x: true, y: false, setScale: false } },
      legend: { show: false },
      hooks: {
        setSelect: [function (u) { o.onSelect(u); }],
        setCursor: [function (u) { if (updateLegend) updateLegend(u); }],
        draw: [o.overlay, function (u) {
          // The axis's range, for whoever reads the page (its tests): the limit in it or not.
          el.setAttribute("data-scale", u.scales.MB.min + "," + u.scales.MB.max);
        }]
      }
    }, built.data, el);
    updateLegend = stackscopeSeries.legend(legendEl, built.entries, plot);
    // What each legend entry is, for whoever reads the page (its tests).
    var items = legendEl.querySelectorAll(".legend-series");
    built.entries.forEach(function (e, i) {
      if (!items[i]) return;
      items[i].setAttribute("data-kind", e.kind);
      if (e.pid !== undefined) items[i].setAttribute("data-pid", String(e.pid));
    });
    el.setAttribute("data-lines", String(M.processes.length));
    return plot;
  }

  // The memory growth flamegraph in `el`, its hovered frame described in `detailsEl`.
  // Returns flame.js's operations; `draw(tree)` takes report.js's tree of bytes grown.
  function growth(el, detailsEl) {
    var flame = stackscopeFlame(el, function () {});
    var total = 0;
    flame.chart.setDetailsElement(detailsEl);
    flame.chart.setLabelHandler(function (d) {
      var t = d.data.total || d.value;
      return d.data.name + ": " + bytes(t) + " grown while it ran (" +
        (100 * t / Math.max(1, total)).toFixed(1) + "%)";
    });
    return {
      draw: function (tree) {
        total = tree.total || 0;
        flame.draw(tree);
        el.setAttribute("data-bytes", String(total));
      },
      search: flame.search,
      resetZoom: flame.resetZoom,
      resize: flame.resize
    };
  }

  return { chart: chart, growth: growth, bytes: bytes, end: end };
})();
