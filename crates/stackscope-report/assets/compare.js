// stackscope compare.html: draws both GPU timelines on one scale (uPlot) and the differential
// icicle of the stacks (flame.js, over d3-flame-graph) from the JSON embedded in the page. The
// verdict, the figures and the step bars are in the HTML already. Everything it needs is in the
// page: it loads nothing.
//
// For tests and scripts, `window.stackscopeCompare` says what was drawn: drawnFrames(),
// vanishedDrawn() and timelineScales() ({before: [xmin, xmax], after: [xmin, xmax]}, null for a
// side without GPU data); #diff-icicle's data-drawn and data-vanished-drawn and each timeline's
// data-x-range say the same in the DOM.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("stackscope-data").textContent);
  var C = D.compare || {};
  var SIDES = ["before", "after"];
  // A frame whose share moved by less than this (half a point) is drawn grey.
  var SAME = 0.005;
  // A change of this much (ten points) or more takes the strongest red or blue.
  var FULL = 0.1;
  var VANISHED = "#a596b0";
  var UTIL_STROKE = "#1f5fbf";

  function num(v) { return typeof v === "number" && isFinite(v) ? v : 0; }
  function side(name) { return C[name] || {}; }

  // ---- timelines ----
  var plots = { before: null, after: null };
  var scales = { before: null, after: null };

  // The one x range of both: to the longer duration (to the last reading where neither says).
  function xMax() {
    var longest = Math.max(num(side("before").duration_secs), num(side("after").duration_secs));
    if (longest > 0) return longest;
    (D.timelines || []).forEach(function (pts) {
      if (pts.length) longest = Math.max(longest, num(pts[pts.length - 1][0]));
    });
    return longest > 0 ? longest : 1;
  }

  function plotWidth(el) { return Math.max(600, el.clientWidth || 1100); }

  // The idle threshold as a dashed line across the plot.
  function drawIdleLine(u) {
    var below = D.idle_below;
    if (typeof below !== "number" || !isFinite(below)) return;
    var ctx = u.ctx, y = u.valToPos(below, "y", true);
    ctx.save();
    ctx.strokeStyle = "#888";
    ctx.lineWidth = 1;
    ctx.setLineDash([5, 4]);
    ctx.beginPath();
    ctx.moveTo(u.bbox.left, y);
    ctx.lineTo(u.bbox.left + u.bbox.width, y);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = "#666";
    ctx.font = Math.round(10 * (window.devicePixelRatio || 1)) + "px sans-serif";
    ctx.textBaseline = "bottom";
    ctx.textAlign = "left";
    ctx.fillText("idle below " + below + "%", u.bbox.left + 4, y - 2);
    ctx.restore();
  }

  function drawTimeline(name, i) {
    var el = document.getElementById("timeline-" + name);
    var pts = (D.timelines && D.timelines[i]) || [];
    if (!pts.length) {
      el.className += " empty";
      el.textContent = "No GPU data in this recording.";
      return;
    }
    var max = xMax();
    var opts = {
      width: plotWidth(el),
      height: 130,
      scales: { x: { time: false, range: function () { return [0, max]; } }, y: { range: [0, 100] } },
      axes: [
        { label: "seconds from the window's start", labelSize: 18, labelGap: 0, size: 30 },
        { label: "%", labelSize: 20 }
      ],
      series: [{}, {
        label: "utilization", stroke: UTIL_STROKE, width: 2, fill: "rgba(31, 95, 191, 0.12)",
        points: { show: false }, spanGaps: false,
        // A reading describes the time before it, back to the previous one.
        paths: uPlot.paths.stepped({ align: -1 })
      }],
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      hooks: {
        draw: [drawIdleLine, function (u) {
          scales[name] = [u.scales.x.min, u.scales.x.max];
          el.setAttribute("data-x-range", u.scales.x.min + "," + u.scales.x.max);
        }]
      }
    };
    var data = [pts.map(function (p) { return num(p[0]); }), pts.map(function (p) { return p[1]; })];
    plots[name] = new uPlot(opts, data, el);
  }

  // ---- differential icicle ----
  var showVanished = false;
  var icicleEl = document.getElementById("diff-icicle");
  var details = document.getElementById("diff-details");

  function newNode(name) { return { name: name, width: 0, before: 0, after: 0, kids: {}, order: [] }; }

  function child(node, name) {
    var next = node.kids[name];
    if (!next) {
      next = newNode(name);
      node.kids[name] = next;
      node.order.push(name);
    }
    return next;
  }

  // The tree by frames: every node's before and after are the shares of all stacks through it;
  // its width is after's share, plus before's share of the vanished stacks when they are shown.
  function buildTree() {
    var root = newNode("all");
    (D.stacks || []).forEach(function (s) {
      var before = num(s.before), after = num(s.after);
      var width = after > 0 ? after : (showVanished ? before : 0);
      var node = root;
      var add = function (n) { n.width += width; n.before += before; n.after += after; };
      add(node);
      (s.frames || []).forEach(function (f) { node = child(node, String(f)); add(node); });
    });
    return shape(root);
  }

  // d3-flame-graph's shape (name, self value, children), without the nodes of no width.
  function shape(n) {
    var children = [], sum = 0;
    n.order.forEach(function (k) {
      var c = n.kids[k];
      if (c.width <= 0) return;
      children.push(shape(c));
      sum += c.width;
    });
    return {
      name: n.name, value: Math.max(0, n.width - sum), total: n.width,
      before: n.before, after: n.after, vanished: !(n.after > 0), children: children
    };
  }

  function colour(d) {
    var x = d.data;
    if (x.vanished) return VANISHED;
    var change = x.after - x.before;
    if (Math.abs(change) < SAME) return "#c8c8c8";
    var a = Math.min(1, 0.3 + 0.7 * Math.abs(change) / FULL);
    if (change > 0) {
      return "rgb(" + Math.round(240 - 10 * a) + "," + Math.round(200 - 140 * a) + "," + Math.round(200 - 140 * a) + ")";
    }
    return "rgb(" + Math.round(200 - 140 * a) + "," + Math.round(210 - 110 * a) + "," + Math.round(240 - 10 * a) + ")";
  }

  function pct(v) { return (100 * v).toFixed(1) + "%"; }

  // `frame: before X% → after Y% (+Z points)`.
  function describe(x) {
    var change = 100 * (x.after - x.before);
    var text = x.name + ": before " + pct(x.before) + " → after " + pct(x.after) +
      " (" + (change < 0 ? "−" : "+") + Math.abs(change).toFixed(1) + " points)";
    return x.vanished ? text + ", vanished" : text;
  }

  var flame = stackscopeFlame(icicleEl, function (d) {
    if (d && d.data) details.textContent = describe(d.data);
  });
  flame.chart.setDetailsElement(details);
  flame.chart.setColorMapper(function (d) { return colour(d); });
  flame.chart.setLabelHandler(function (d) { return describe(d.data); });

  function drawnNodes() {
    var out = [];
    var frames = icicleEl.querySelectorAll("svg g");
    for (var i = 0; i < frames.length; i++) {
      var d = frames[i].__data__;
      if (d && d.data && d.x0 !== undefined) out.push(d.data);
    }
    return out;
  }

  function drawIcicle() {
    flame.draw(buildTree());
    var nodes = drawnNodes();
    icicleEl.setAttribute("data-drawn", String(nodes.length));
    icicleEl.setAttribute("data-vanished-drawn", String(nodes.filter(function (x) { return x.vanished; }).length));
  }

  // ---- controls ----
  var toggle = document.getElementById("toggle-vanished");
  toggle.checked = false;
  toggle.addEventListener("change", function () {
    showVanished = toggle.checked;
    drawIcicle();
  });
  document.getElementById("reset-zoom").onclick = function () { flame.resetZoom(); };
  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      SIDES.forEach(function (name) {
        var p = plots[name];
        if (!p) return;
        var width = plotWidth(document.getElementById("timeline-" + name));
        if (width !== p.width) p.setSize({ width: width, height: p.height });
      });
      flame.resize();
      drawIcicle();
    }, 100);
  });

  window.stackscopeCompare = {
    drawnFrames: function () { return drawnNodes().length; },
    vanishedDrawn: function () { return drawnNodes().filter(function (x) { return x.vanished; }).length; },
    timelineScales: function () {
      return { before: scales.before && scales.before.slice(), after: scales.after && scales.after.slice() };
    }
  };

  SIDES.forEach(drawTimeline);
  drawIcicle();
  document.body.setAttribute("data-ready", "1");
})();
