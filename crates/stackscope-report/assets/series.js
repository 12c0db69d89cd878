// stackscope report.html: how the timeline's lines look, and the legend that names them.
//
// Every line takes its own colour from one palette: the devices' utilization first, so it gets
// the palette's strongest colours, then SM activity, memory and power. Utilization is drawn
// thickest; memory and power are dashed as well. The legend draws each line's sample with the
// same colour, width and dash, and the value under the cursor beside it.
var stackscopeSeries = (function () {
  "use strict";
  // Saturated first; none is a flamegraph colour (those are warm: red through yellow).
  var PALETTE = ["#1f5fbf", "#7b3294", "#1b9e77", "#e7298a", "#0f8b8d", "#8c564b",
    "#5e3c99", "#66a61e", "#b8860b", "#525252", "#2b8cbe", "#c51b7d"];
  // The kinds of GPU line, in the order they take colours; `key` is the column in the page's
  // data (`PageGpu`); `many`: drawn at first on a page of several devices too (the legend
  // shows the others).
  var KINDS = [
    { key: "utilization", name: "utilization", unit: "%", width: 2.5, dash: null, stepped: true, many: true },
    // SM activity (GPM) beside utilization: kernels that run on a few SMs read high on
    // utilization alone.
    { key: "sm_active", name: "SM activity", unit: "%", width: 1.75, dash: null, many: true },
    { key: "memory", name: "memory", unit: "%", width: 1.25, dash: [6, 3] },
    { key: "power_watts", name: "power", unit: "W", width: 1.25, dash: [2, 3] }
  ];
  // A line that is not a GPU's (stack samples per second, where there is no GPU data).
  var PLAIN = { width: 1.5, dash: null };

  // The n-th colour: the palette, then hues spread by the golden angle.
  function colour(n) {
    if (n < PALETTE.length) return PALETTE[n];
    return "hsl(" + Math.round((n * 137.508) % 360) + ", 65%, 38%)";
  }

  function deviceLabel(g) {
    return (g.owner ? g.owner + ": " : "") + "GPU " + g.index + (g.name ? " " + g.name : "");
  }

  // The GPU lines the recording has data for, each with its colour: devices in order, each
  // device's kinds in KINDS order.
  function gpuLines(gpus) {
    var lines = [], n = 0;
    KINDS.forEach(function (kind, ki) {
      gpus.forEach(function (g, gi) {
        var values = g[kind.key] || [];
        if (!values.some(function (v) { return v !== null; })) return;
        lines.push({ gpu: gi, rank: ki, kind: kind, device: deviceLabel(g), stroke: colour(n++) });
      });
    });
    lines.sort(function (a, b) { return (a.gpu - b.gpu) || (a.rank - b.rank); });
    return lines;
  }

  // A short line drawn as the plot draws it: colour, width and dash.
  function swatch(stroke, width, dash) {
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", "28");
    svg.setAttribute("height", "10");
    svg.setAttribute("class", "line-swatch");
    var line = document.createElementNS(ns, "line");
    line.setAttribute("x1", "1");
    line.setAttribute("x2", "27");
    line.setAttribute("y1", "5");
    line.setAttribute("y2", "5");
    line.setAttribute("stroke", stroke);
    line.setAttribute("stroke-width", String(width));
    if (dash) line.setAttribute("stroke-dasharray", dash.join(" "));
    svg.appendChild(line);
    return svg;
  }

  // A value under the cursor; a dash where the line has none there.
  function format(v, unit) {
    if (v === null || v === undefined) return "–";
    return Math.round(v) + (unit === "%" ? "%" : " " + unit);
  }

  // Fills `el` with one entry per plotted series (`entries[i]` describes uPlot series i + 1:
  // label, group, stroke, width, dash, unit). Returns `update(plot)`, which shows the values
  // under the plot's cursor, and wires a click on an entry to show or hide its line.
  function legend(el, entries, plot) {
    el.textContent = "";
    var values = [], group = null, row = null;
    entries.forEach(function (e, i) {
      if (!row || e.group !== group) {
        group = e.group;
        row = document.createElement("span");
        row.className = "legend-group";
        if (group) {
          var name = document.createElement("span");
          name.className = "legend-device";
          name.textContent = group;
          row.appendChild(name);
        }
        el.appendChild(row);
      }
      var item = document.createElement("span");
      item.className = "legend-series";
      item.setAttribute("data-colour", e.stroke);
      item.setAttribute("data-width", String(e.width));
      item.setAttribute("data-dash", e.dash ? e.dash.join(" ") : "");
      item.title = "show or hide this line";
      item.appendChild(swatch(e.stroke, e.width, e.dash));
      var label = document.createElement("span");
      label.className = "legend-label";
      label.textContent = e.label;
      item.appendChild(label);
      var value = document.createElement("span");
      value.className = "legend-value";
      item.appendChild(value);
      values.push(value);
      item.onclick = function () {
        var shown = !plot.series[i + 1].show;
        plot.setSeries(i + 1, { show: shown });
        item.classList.toggle("off", !shown);
      };
      if (!plot.series[i + 1].show) item.classList.add("off");
      row.appendChild(item);
    });
    // The cursor's time, after the lines.
    var cursor = document.createElement("span");
    cursor.className = "legend-time";
    el.appendChild(cursor);
    function update(u) {
      var idx = u.cursor.idx;
      var at = idx === null || idx === undefined ? null : idx;
      cursor.textContent = at === null ? "" : "at " + u.data[0][at].toFixed(2) + " s";
      entries.forEach(function (e, i) {
        values[i].textContent = at === null ? "" : format(u.data[i + 1][at], e.unit);
      });
    }
    update(plot);
    return update;
  }

  return { kinds: KINDS, gpuLines: gpuLines, legend: legend, colour: colour, plain: PLAIN };
})();
