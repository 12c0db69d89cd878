// stackscope report.html: draws the GPU timeline (uPlot; its colours and legend from series.js),
// the thread lanes (canvas; the GIL's spans under them as SVG) and the flamegraph of the selected window (flame.js, over
// d3-flame-graph) from the JSON embedded in the page, and keeps the window and view in the URL.
// Where memory was read, the memory chart under the timeline and the memory growth flamegraph
// of the same window (memory.js). Everything it needs is in the page: it loads nothing.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("stackscope-data").textContent);
  var W = D.bucket_secs;
  var LANES_SHOWN = 8;
  var LANE_H = 14;
  var LABEL_H = 12;
  // Buckets' lane entries: [lane, active, idle, gil_held, gil_waited].
  var LANE_CELL = 5;
  // Under each lane, where the reader said who held the GIL: three tracks (held, waited for
  // it, ran without it) of GIL_TRACK pixels each.
  var GIL_KINDS = ["held", "waited", "without"];
  var GIL_TRACK = 3;
  var HAS_GIL = D.buckets.some(function (b) {
    for (var k = 0; k < b.l.length; k += LANE_CELL) if (b.l[k + 3] || b.l[k + 4]) return true;
    return false;
  });
  var GIL_H = HAS_GIL ? GIL_KINDS.length * GIL_TRACK + 1 : 0;
  var ROW_H = LABEL_H + LANE_H + GIL_H;
  var MAX_ROLE_LANES = 32;

  // ---- state: window [from, to) in seconds since the start, view, marked function ----
  var first = D.buckets.length ? D.buckets[0].i : 0;
  var last = D.buckets.length ? D.buckets[D.buckets.length - 1].i + 1 : 1;
  var fullFrom = first * W;
  var fullTo = Math.max(last * W, D.duration_secs || 0, fullFrom + W);
  var gpuEnd = 0;
  D.gpus.forEach(function (g) { if (g.t.length) gpuEnd = Math.max(gpuEnd, g.t[g.t.length - 1]); });
  fullTo = Math.max(fullTo, gpuEnd, D.memory ? stackscopeMemory.end(D.memory) : 0);
  var state = { from: null, to: null, view: D.gpus.length ? "all" : "all", mark: -1, lanesOpen: false };

  function parseHash() {
    var h = (location.hash || "").replace(/^#/, "");
    h.split("&").forEach(function (kv) {
      var p = kv.split("=");
      var k = decodeURIComponent(p[0] || ""), v = decodeURIComponent(p[1] || "");
      if (k === "from" && v !== "" && isFinite(+v)) state.from = +v;
      if (k === "to" && v !== "" && isFinite(+v)) state.to = +v;
      // Without GPU data the page has the one view of all samples.
      if (k === "view" && /^(all|idle|busy|diff)$/.test(v)) state.view = D.gpus.length ? v : "all";
    });
    clampWindow();
  }
  // The window lies within the recording and runs forward, wherever it came from (a link, a
  // drag past the axis): the title, the count and the shading then all describe the same span.
  function clampWindow() {
    var clamp = function (t) { return t === null ? null : Math.min(fullTo, Math.max(fullFrom, t)); };
    state.from = clamp(state.from);
    state.to = clamp(state.to);
    if (state.from !== null && state.to !== null && state.from > state.to) {
      var later = state.from;
      state.from = state.to;
      state.to = later;
    }
  }
  function writeHash() {
    var parts = [];
    if (state.from !== null) parts.push("from=" + round3(state.from));
    if (state.to !== null) parts.push("to=" + round3(state.to));
    parts.push("view=" + state.view);
    try { history.replaceState(null, "", "#" + parts.join("&")); } catch (e) { /* file: URLs */ }
  }
  function round3(x) { return Math.round(x * 1000) / 1000; }

  // A bucket is in the window when its start is: bucket edges are exact binary fractions, so
  // a window on bucket edges holds exactly the samples `stackscope report --from --to` counts.
  function inWindow(b) {
    var start = b.i * W;
    if (state.from !== null && start < state.from - 1e-9) return false;
    if (state.to !== null && start >= state.to - 1e-9) return false;
    return true;
  }

  // ---- counting ----
  function windowCounts() {
    var idle = {}, busy = {}, unknown = {}, total = 0, ti = 0, tb = 0;
    D.buckets.forEach(function (b) {
      if (!inWindow(b)) return;
      var s = b.s;
      for (var k = 0; k < s.length; k += 4) {
        var id = s[k];
        idle[id] = (idle[id] || 0) + s[k + 1];
        busy[id] = (busy[id] || 0) + s[k + 2];
        unknown[id] = (unknown[id] || 0) + s[k + 3];
        total += s[k + 1] + s[k + 2] + s[k + 3];
        ti += s[k + 1];
        tb += s[k + 2];
      }
    });
    return { idle: idle, busy: busy, unknown: unknown, total: total, idleTotal: ti, busyTotal: tb };
  }

  // Each stack's weight in the window for the view: [value, idle, busy] by stack id.
  function sampleWeights(c) {
    var weights = {};
    Object.keys(c.idle).forEach(function (key) {
      var i = c.idle[key] || 0, b = c.busy[key] || 0, u = c.unknown[key] || 0;
      var v;
      if (state.view === "idle") v = i;
      else if (state.view === "busy") v = b;
      else if (state.view === "diff") v = i + b;
      else v = i + b + u;
      weights[key] = [v, i, b];
    });
    return weights;
  }

  // Each stack's bytes of memory grown in the window, summed over the buckets as samples are:
  // [bytes, 0, 0] by stack id.
  function growthWeights() {
    var weights = {};
    D.buckets.forEach(function (b) {
      if (!b.g || !inWindow(b)) return;
      for (var k = 0; k < b.g.length; k += 2) {
        var w = weights[b.g[k]] || (weights[b.g[k]] = [0, 0, 0]);
        w[0] += b.g[k + 1];
      }
    });
    return weights;
  }

  // The flamegraph's tree of the stacks' weights ({stack id: [value, idle, busy]}): samples of
  // the view, or bytes grown.
  function buildTree(weights) {
    var root = { name: "all", value: 0, children: [], idle: 0, busy: 0, fn: -1, _kids: {} };
    Object.keys(weights).forEach(function (key) {
      var v = weights[key][0], i = weights[key][1], b = weights[key][2];
      if (!v) return;
      var node = root;
      node.value += v; node.idle += i; node.busy += b;
      var frames = D.stacks[+key] || [];
      for (var f = 0; f < frames.length; f++) {
        var label = D.frames[frames[f]];
        var next = node._kids[label];
        if (!next) {
          next = { name: label, value: 0, children: [], idle: 0, busy: 0, fn: D.frame_functions[frames[f]], _kids: {} };
          node._kids[label] = next;
          node.children.push(next);
        }
        next.value += v; next.idle += i; next.busy += b;
        node = next;
      }
    });
    // d3-flame-graph sums children into a parent's value: give it self values.
    (function strip(n) {
      var childSum = 0;
      n.children.forEach(function (ch) { childSum += ch.value; strip(ch); });
      n.total = n.value;
      n.value = Math.max(0, n.value - childSum);
      delete n._kids;
    })(root);
    return root;
  }

  // ---- flamegraph ----
  var flame = stackscopeFlame(document.getElementById("flamegraph"), function (d) {
    state.mark = d && d.data ? d.data.fn : -1;
    drawMarks();
  });
  var chart = flame.chart.setDetailsElement(document.getElementById("details"));
  var lastCounts = null;
  chart.setColorMapper(function (d, original) {
    if (d.highlight) return "#e05cc4";
    if (state.view !== "diff" || !lastCounts) return original;
    var ti = lastCounts.idleTotal, tb = lastCounts.busyTotal;
    var pi = ti ? d.data.idle / ti : 0, pb = tb ? d.data.busy / tb : 0;
    var lean = (pi + pb) > 0 ? (pi - pb) / (pi + pb) : 0;
    var a = Math.abs(lean);
    // Idle-leaning frames red, busy-leaning blue, even ones grey.
    if (lean > 0) return "rgb(" + Math.round(200 + 55 * a) + "," + Math.round(200 - 150 * a) + "," + Math.round(200 - 150 * a) + ")";
    return "rgb(" + Math.round(200 - 150 * a) + "," + Math.round(200 - 110 * a) + "," + Math.round(200 + 55 * a) + ")";
  });
  chart.setLabelHandler(function (d) {
    var t = d.data.total || d.value;
    var text = d.data.name + ": " + t + " samples";
    if (lastCounts && lastCounts.total) text += " (" + (100 * t / Math.max(1, viewTotal())).toFixed(1) + "%)";
    if (state.view === "diff" && lastCounts) {
      var ti = lastCounts.idleTotal, tb = lastCounts.busyTotal;
      text += ", " + (ti ? 100 * d.data.idle / ti : 0).toFixed(1) + "% of GPU-idle, " +
        (tb ? 100 * d.data.busy / tb : 0).toFixed(1) + "% of GPU-busy samples";
    }
    return text;
  });
  function viewTotal() {
    if (!lastCounts) return 0;
    if (state.view === "idle") return lastCounts.idleTotal;
    if (state.view === "busy") return lastCounts.busyTotal;
    if (state.view === "diff") return lastCounts.idleTotal + lastCounts.busyTotal;
    return lastCounts.total;
  }

  function render() {
    lastCounts = windowCounts();
    flame.draw(buildTree(sampleWeights(lastCounts)));
    var term = document.getElementById("search").value;
    if (term) flame.search(term);
    document.getElementById("selection-samples").textContent = String(lastCounts.total);
    var vs = document.getElementById("view-samples");
    vs.textContent = state.view === "all" ? "" : "(" + viewTotal() + " in this view)";
    var from = state.from === null ? fullFrom : state.from;
    var to = state.to === null ? fullTo : state.to;
    var span = "of " + from.toFixed(2) + " s to " + to.toFixed(2) + " s";
    document.getElementById("window-label").textContent = span + ", " + viewName();
    if (growth) renderGrowth(term, span);
    var buttons = document.querySelectorAll("#views button");
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].className = buttons[i].getAttribute("data-view") === state.view ? "on" : "";
    }
    document.getElementById("legend").innerHTML = state.view === "diff"
      ? "<span class=\"swatch idle\"></span>more of the GPU-idle samples <span class=\"swatch busy\"></span>more of the GPU-busy samples (width: both together)"
      : "";
    writeHash();
    if (plot) plot.redraw(false);
    if (memoryPlot) memoryPlot.redraw(false);
    drawLanes();
  }
  function viewName() {
    return { all: "all samples", idle: "samples while the GPU idled", busy: "samples while the GPU was busy", diff: "GPU-idle against GPU-busy samples" }[state.view];
  }

  // ---- timeline ----
  var plot = null;
  var timelineEl = document.getElementById("timeline");
  var plotWidth = Math.max(600, timelineEl.clientWidth || 1100);

  function samplesSeries() {
    var xs = [], ys = [];
    D.buckets.forEach(function (b) {
      var n = 0;
      for (var k = 0; k < b.s.length; k += 4) n += b.s[k + 1] + b.s[k + 2] + b.s[k + 3];
      xs.push(b.i * W + W / 2);
      ys.push(n / W);
    });
    return [xs, ys];
  }

  // The GPU lines on one x (every device's reading times merged, gaps null): uPlot's data,
  // and for each line after x its look and legend entry.
  function gpuPlotData() {
    // A reading describes the time before it, back to the previous one. The first one's
    // start is unknown: it reaches back to the start when that is within a few spacings
    // (the older readings of a long recording are merged into coarser and coarser points),
    // else one spacing (a device that appeared late).
    D.gpus.forEach(function (g) {
      if (g.t.length < 2) return;
      var spacing = g.t[1] - g.t[0];
      var back = g.t[0] - fullFrom <= 4 * spacing ? fullFrom : g.t[0] - spacing;
      if (back < g.t[0]) {
        g.t.unshift(back);
        stackscopeSeries.kinds.forEach(function (k) { g[k.key].unshift(g[k.key][0]); });
      }
    });
    var times = {};
    D.gpus.forEach(function (g) { g.t.forEach(function (t) { times[t] = 1; }); });
    var xs = Object.keys(times).map(Number).sort(function (a, b) { return a - b; });
    var pos = {};
    xs.forEach(function (t, i) { pos[t] = i; });
    var data = [xs], entries = [];
    stackscopeSeries.gpuLines(D.gpus).forEach(function (line) {
      var g = D.gpus[line.gpu], kind = line.kind;
      var col = new Array(xs.length).fill(null);
      g.t.forEach(function (t, i) { col[pos[t]] = g[kind.key][i]; });
      data.push(col);
      entries.push({
        label: kind.name, group: line.device, stroke: line.stroke, width: kind.width,
        dash: kind.dash, unit: kind.unit, stepped: kind.stepped,
        show: D.gpus.length === 1 || kind.many
      });
    });
    return { data: data, entries: entries };
  }

  function buildPlot() {
    var built = D.gpus.length ? gpuPlotData() : {
      data: samplesSeries(),
      entries: [{ label: "stack samples per second (no GPU data)", group: "", stroke: stackscopeSeries.colour(0),
        width: stackscopeSeries.plain.width, dash: null, unit: "samples/s", show: true }]
    };
    var series = [{}].concat(built.entries.map(function (e) {
      return {
        label: e.label, stroke: e.stroke, width: e.width, dash: e.dash || undefined, show: e.show,
        scale: D.gpus.length ? (e.unit === "W" ? "W" : "%") : "n", spanGaps: false,
        // Lines only: the legend draws them so; the cursor's values are in the legend.
        points: { show: false },
        paths: e.stepped ? uPlot.paths.stepped({ align: -1 }) : undefined
      };
    }));
    var updateLegend = null;
    var opts = {
      width: plotWidth,
      height: 170,
      // Samples per second from 0: an axis from 90 to 110 makes the sampler's jitter look
      // like swings of the job.
      scales: {
        x: { time: false, range: function () { return [fullFrom, fullTo]; } },
        "%": { range: [0, 100] },
        n: { range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } }
      },
      axes: [
        { label: "seconds since start", labelSize: 18, labelGap: 0, size: 30 },
        { scale: D.gpus.length ? "%" : "n", label: D.gpus.length ? "%" : "samples/s", labelSize: 20 },
        { scale: "W", side: 1, grid: { show: false }, label: "W", labelSize: 20 }
      ],
      series: series,
      cursor: { drag: { x: true, y: false, setScale: false } },
      // The legend below the plot is stackscope's own (series.js): it draws each line as drawn.
      legend: { show: false },
      hooks: {
        setSelect: [selectWindow],
        setCursor: [function (u) { if (updateLegend) updateLegend(u); }],
        draw: [drawOverlay, function (u) {
          // The samples-per-second axis's range, for whoever reads the page (its tests).
          if (!D.gpus.length) timelineEl.setAttribute("data-rate-axis", u.scales.n.min + "," + u.scales.n.max);
        }]
      }
    };
    if (!D.gpus.length || !series.some(function (s) { return s.scale === "W"; })) opts.axes.pop();
    plot = new uPlot(opts, built.data, timelineEl);
    updateLegend = stackscopeSeries.legend(document.getElementById("timeline-legend"), built.entries, plot);
  }

  // A window dragged on the timeline or the memory chart: both follow it.
  function selectWindow(u) {
    if (u.select.width < 2) return;
    var a = u.posToVal(u.select.left, "x"), b = u.posToVal(u.select.left + u.select.width, "x");
    // Snap to bucket edges: the counts are exact there.
    state.from = Math.floor(a / W) * W;
    state.to = Math.max(Math.ceil(b / W) * W, state.from + W);
    clampWindow();
    u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
    render();
  }

  // ---- memory ----
  var memoryPlot = null, growth = null;
  function buildMemory() {
    if (!D.memory) return;
    // The GPU chart's y axes' room, so that both charts put a second at the same pixel.
    var size = function (i) {
      var a = plot.axes[i], v = a && (a._size || (typeof a.size === "number" ? a.size : 0));
      return v || 50;
    };
    memoryPlot = stackscopeMemory.chart(document.getElementById("memory-chart"),
      document.getElementById("memory-legend"), D.memory, {
        width: plotWidth, range: function () { return [fullFrom, fullTo]; },
        leftAxis: size(1), rightAxis: plot.axes.length > 2 ? size(2) : 0,
        onSelect: selectWindow, overlay: drawOverlay
      });
    growth = stackscopeMemory.growth(document.getElementById("memory-growth"),
      document.getElementById("memory-growth-details"));
    document.getElementById("memory-growth-reset").onclick = function () { growth.resetZoom(); };
  }
  // The memory growth flamegraph of the window (`span` names it), through the tree the
  // samples' flamegraph is built with.
  function renderGrowth(term, span) {
    var tree = buildTree(growthWeights());
    growth.draw(tree);
    if (term) growth.search(term);
    document.getElementById("memory-growth-bytes").textContent = stackscopeMemory.bytes(tree.total);
    document.getElementById("memory-growth-label").textContent = span;
  }

  // Shading of the selected window and the marks of the clicked function, over the chart.
  function drawOverlay(u) {
    var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
    ctx.save();
    if (state.from !== null || state.to !== null) {
      var x0 = u.valToPos(state.from === null ? fullFrom : state.from, "x", true);
      var x1 = u.valToPos(state.to === null ? fullTo : state.to, "x", true);
      ctx.fillStyle = "rgba(255, 200, 0, 0.15)";
      ctx.fillRect(x0, top, x1 - x0, h);
    }
    var marks = markShares();
    if (marks) {
      ctx.fillStyle = "rgba(224, 92, 196, 0.35)";
      marks.forEach(function (m) {
        if (!m[1]) return;
        var a = u.valToPos(m[0], "x", true), b = u.valToPos(m[0] + W, "x", true);
        var mh = Math.max(2, h * 0.12 * m[1]);
        ctx.fillRect(a, top + h - mh, Math.max(1, b - a), mh);
      });
    }
    ctx.restore();
  }

  // For the marked function: each bucket's start and the share of its samples with the
  // function anywhere on the stack.
  var stackHasCache = {};
  function markShares() {
    if (state.mark < 0) return null;
    var has = stackHasCache[state.mark];
    if (!has) {
      has = D.stacks.map(function (fr) {
        for (var i = 0; i < fr.length; i++) if (D.frame_functions[fr[i]] === state.mark) return true;
        return false;
      });
      stackHasCache[state.mark] = has;
    }
    return D.buckets.map(function (b) {
      var n = 0, m = 0;
      for (var k = 0; k < b.s.length; k += 4) {
        var c = b.s[k + 1] + b.s[k + 2] + b.s[k + 3];
        n += c;
        if (has[b.s[k]]) m += c;
      }
      return [b.i * W, n ? m / n : 0, m];
    });
  }

  function drawMarks() {
    var el = document.getElementById("marked");
    if (state.mark >= 0) {
      var shares = markShares();
      var moments = shares.filter(function (m) { return m[2] > 0; }).length;
      el.textContent = "marked on the timeline: " + D.functions[state.mark] + " (on the stack in " + moments + " of " + shares.length + " time slices)";
    } else {
      el.textContent = "";
    }
    if (plot) plot.redraw(false);
    if (memoryPlot) memoryPlot.redraw(false);
    drawLanes();
  }

  // ---- thread lanes ----
  // One lane per thread, each under its label (`pid 448 · trainer (MainThread)`): the trainer
  // first, then its feeders, then the helpers; the labels are elements over the canvas, so
  // they are never cut short and read as text.
  var lanesEl = document.getElementById("lanes");
  var canvas = document.createElement("canvas");
  var laneBox = document.createElement("div");
  laneBox.className = "lane-box";
  var laneLabels = document.createElement("div");
  laneLabels.id = "lane-labels";
  // The GIL's spans are SVG rects over the canvas (classes gil-held, gil-waited, gil-without,
  // with the lane's pid and thread id): elements that read as the lanes' spans, not pixels.
  var SVG_NS = "http://www.w3.org/2000/svg";
  var gilSvg = document.createElementNS(SVG_NS, "svg");
  gilSvg.id = "gil-strips";
  laneBox.appendChild(canvas);
  laneBox.appendChild(gilSvg);
  laneBox.appendChild(laneLabels);
  var marked = document.createElement("div");
  marked.id = "marked";
  var toggle = document.createElement("button");
  toggle.id = "more-lanes";
  var laneKey = document.createElement("div");
  laneKey.className = "lane-key";
  // The order is the loop's only where there is one: a server's or a script's threads are
  // listed busiest first.
  var hasLoop = D.lanes.some(function (l) { return l.role === "trainer"; });
  laneKey.innerHTML = (hasLoop ? "threads: the trainer, its feeders, then helpers: "
                               : "threads, the busiest first: ") +
    "<span class=\"swatch busy-lane\"></span>running " +
    "<span class=\"swatch idle-lane\"></span>idle (sleeping or blocked) " +
    "<span class=\"swatch unsampled-lane\"></span>not sampled";
  // The GIL's legend (written into the page where lanes have GIL counts) on the key's line.
  var gilLegend = document.getElementById("gil-legend");
  if (gilLegend) laneKey.appendChild(gilLegend);
  lanesEl.appendChild(marked);
  lanesEl.appendChild(laneBox);
  lanesEl.appendChild(laneKey);
  lanesEl.appendChild(toggle);
  var ROLE_CLASS = { trainer: 0, dataloader_worker: 1, worker: 2 };
  function laneClass(l) { var c = ROLE_CLASS[l.role]; return c === undefined ? 3 : c; }
  // A lane emptied into its pool's (a thread that ended before its kind was one pool) is left
  // out.
  var laneOrder = D.lanes.map(function (l, i) { return i; }).filter(function (i) {
    return D.lanes[i].active + D.lanes[i].idle > 0;
  }).sort(function (a, b) {
    var la = D.lanes[a], lb = D.lanes[b];
    return (laneClass(la) - laneClass(lb)) || ((la.order || 0) - (lb.order || 0)) ||
      (lb.active - la.active) || (lb.idle - la.idle) || a - b;
  });
  // Shown unfolded: the trainer and every feeder (up to MAX_ROLE_LANES), helpers to fill
  // LANES_SHOWN.
  var roleLanes = laneOrder.filter(function (i) { return laneClass(D.lanes[i]) < 3; }).length;
  var lanesShown = Math.max(LANES_SHOWN, Math.min(roleLanes, MAX_ROLE_LANES));
  toggle.onclick = function () { state.lanesOpen = !state.lanesOpen; drawLanes(); };

  // Each lane's GIL as runs of buckets: by lane, by kind, [first bucket, last bucket, level],
  // where level is the share of the lane's samples in the bucket that held the GIL (waited
  // for it, ran without it: active less held), in eighths so that like neighbours join.
  var gilRuns = HAS_GIL ? buildGilRuns() : {};
  function buildGilRuns() {
    var runs = {};
    D.buckets.forEach(function (b) {
      for (var k = 0; k < b.l.length; k += LANE_CELL) {
        var active = b.l[k + 1], n = active + b.l[k + 2], held = b.l[k + 3];
        if (!n) continue;
        var shares = [held / n, b.l[k + 4] / n, Math.max(0, active - held) / n];
        var byKind = runs[b.l[k]] || (runs[b.l[k]] = [[], [], []]);
        shares.forEach(function (share, kind) {
          var level = Math.round(share * 8) / 8;
          if (share > 0 && level === 0) level = 1 / 8;
          if (!level) return;
          var list = byKind[kind], run = list[list.length - 1];
          if (run && run[1] === b.i - 1 && run[2] === level) run[1] = b.i;
          else list.push([b.i, b.i, level]);
        });
      }
    });
    return runs;
  }
  function drawGil(shown, rowOf, gilTop, x, cssW, cssH) {
    gilSvg.setAttribute("width", cssW);
    gilSvg.setAttribute("height", cssH);
    while (gilSvg.firstChild) gilSvg.removeChild(gilSvg.firstChild);
    shown.forEach(function (lane) {
      var byKind = gilRuns[lane];
      if (!byKind) return;
      var l = D.lanes[lane], top = gilTop(rowOf[lane]);
      byKind.forEach(function (list, kind) {
        list.forEach(function (run) {
          var x0 = x(run[0] * W), x1 = x((run[1] + 1) * W);
          var rect = document.createElementNS(SVG_NS, "rect");
          rect.setAttribute("class", "gil-" + GIL_KINDS[kind]);
          rect.setAttribute("data-pid", String(l.pid));
          rect.setAttribute("data-thread-id", String(l.thread_id));
          rect.setAttribute("data-from", String(round3(run[0] * W)));
          rect.setAttribute("data-to", String(round3((run[1] + 1) * W)));
          rect.setAttribute("x", x0);
          rect.setAttribute("y", top + kind * GIL_TRACK);
          rect.setAttribute("width", Math.max(1, x1 - x0));
          rect.setAttribute("height", GIL_TRACK);
          rect.setAttribute("fill-opacity", 0.45 + 0.55 * run[2]);
          gilSvg.appendChild(rect);
        });
      });
    });
  }

  function drawLanes() {
    if (!plot) return;
    var shown = state.lanesOpen ? laneOrder : laneOrder.slice(0, lanesShown);
    var hidden = laneOrder.length - shown.length;
    toggle.style.display = laneOrder.length > lanesShown ? "" : "none";
    toggle.textContent = state.lanesOpen ? "fold the quieter threads" : "show " + hidden + " more threads";
    var dpr = window.devicePixelRatio || 1;
    var cssW = plot.width, cssH = LANE_H + shown.length * ROW_H + 4;
    canvas.width = cssW * dpr; canvas.height = cssH * dpr;
    canvas.style.width = cssW + "px"; canvas.style.height = cssH + "px";
    var ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, cssH);
    var left = plot.bbox.left / dpr, width = plot.bbox.width / dpr;
    var x = function (t) { return left + (t - fullFrom) / (fullTo - fullFrom) * width; };
    // Row r's GIL tracks, under its bar.
    var gilTop = function (r) { return barTop(r) + LANE_H; };
    ctx.font = "11px sans-serif";
    ctx.textBaseline = "middle";
    // Row 0: the marked function.
    var marks = markShares();
    ctx.fillStyle = "#666";
    ctx.fillText(state.mark >= 0 ? "marked" : "", 2, LANE_H / 2);
    if (marks) {
      marks.forEach(function (m) {
        if (!m[2]) return;
        ctx.fillStyle = "rgba(224, 92, 196," + (0.25 + 0.75 * m[1]) + ")";
        ctx.fillRect(x(m[0]), 1, Math.max(1, x(m[0] + W) - x(m[0])), LANE_H - 2);
      });
    }
    // Row r (from 1): its label at barTop(r) - LABEL_H, its bar at barTop(r).
    var barTop = function (r) { return LANE_H + (r - 1) * ROW_H + LABEL_H; };
    var rowOf = {};
    laneLabels.textContent = "";
    shown.forEach(function (lane, r) {
      rowOf[lane] = r + 1;
      var y = barTop(r + 1);
      ctx.fillStyle = "#f3f3f3";
      ctx.fillRect(left, y + 1, width, LANE_H - 2);
      var l = D.lanes[lane];
      var label = document.createElement("div");
      label.className = "lane-label";
      label.setAttribute("data-role", l.role || "");
      label.setAttribute("data-pid", String(l.pid));
      label.title = l.at_a_time ? l.name + ": the bar's height is how many of its " +
        l.at_a_time + " at a time were alive" : l.name;
      label.style.top = (y - LABEL_H) + "px";
      label.style.left = left + "px";
      label.textContent = l.label || l.name;
      laneLabels.appendChild(label);
    });
    D.buckets.forEach(function (b) {
      var x0 = x(b.i * W), bw = Math.max(1, x((b.i + 1) * W) - x0);
      for (var k = 0; k < b.l.length; k += LANE_CELL) {
        var r = rowOf[b.l[k]];
        if (!r) continue;
        var active = b.l[k + 1], idle = b.l[k + 2];
        var share = active / Math.max(1, active + idle);
        // Busy green, idle grey; unsampled stays the lane's light background. A lane of many
        // threads is as tall as the share of them alive (samples over one thread's per bucket).
        var many = D.lanes[b.l[k]].at_a_time;
        var h = LANE_H - 2;
        if (many > 1) h = Math.max(2, h * Math.min(1, (active + idle) / (D.rate_hz * W * many)));
        ctx.fillStyle = share > 0 ? "rgba(42, 157, 58," + (0.3 + 0.7 * share) + ")" : "#b8b8b8";
        ctx.fillRect(x0, barTop(r) + LANE_H - 1 - h, bw, h);
      }
    });
    if (HAS_GIL) drawGil(shown, rowOf, gilTop, x, cssW, cssH);
    if (state.from !== null || state.to !== null) {
      var a = x(state.from === null ? fullFrom : state.from), z = x(state.to === null ? fullTo : state.to);
      ctx.strokeStyle = "#c79a00";
      ctx.strokeRect(a, 0.5, z - a, cssH - 1);
    }
  }

  // ---- controls ----
  document.getElementById("views").addEventListener("click", function (e) {
    var v = e.target.getAttribute && e.target.getAttribute("data-view");
    if (v) { state.view = v; render(); }
  });
  document.getElementById("search").addEventListener("input", function (e) {
    flame.search(e.target.value);
    if (growth) growth.search(e.target.value);
  });
  document.getElementById("reset-zoom").onclick = function () { flame.resetZoom(); };
  document.getElementById("whole").onclick = function () { state.from = null; state.to = null; render(); };
  window.addEventListener("hashchange", function () { parseHash(); render(); });
  // A resized window redraws the timeline, its lanes and the flamegraph at the new width, once
  // the resizing pauses.
  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      var width = Math.max(600, timelineEl.clientWidth || 1100);
      if (plot && width !== plot.width) plot.setSize({ width: width, height: plot.height });
      if (memoryPlot && width !== memoryPlot.width) memoryPlot.setSize({ width: width, height: memoryPlot.height });
      flame.resize();
      if (growth) growth.resize();
      render();
    }, 100);
  });

  parseHash();
  buildPlot();
  buildMemory();
  render();
  document.body.setAttribute("data-ready", "1");
  // Milliseconds from navigation to drawn: what "interactive" took.
  document.body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
})();
