// stackscope report.html: the flamegraph of the selected window, drawn as an icicle (the root on
// top, callees below, as speedscope and Firefox's profiler draw it) with d3-flame-graph.
//
// Two things d3-flame-graph does its own way are settled here after every redraw:
// - its bars grow into place through d3 transitions (one of 250 ms whatever the configured
//   duration), which a screenshot or a slow machine catches half-done, children wider than
//   their parents; every bar is set to its final place and width at once instead;
// - it sizes the graph once, from the deepest frame of the first tree; the height here follows
//   the deepest frame drawn now, so the graph is as tall as the rows it shows.
var stackscopeFlame = (function () {
  "use strict";
  var CELL_H = 18;
  // Frames narrower than this (CSS pixels) are not drawn: their samples stay in their parent's
  // width, and they do not make the graph deeper. One sample of a 50-frame import chain would
  // otherwise hang a column of slivers far below the rows that matter. Zooming into a frame
  // widens its callees, and the narrow ones appear.
  var MIN_FRAME_PX = 3;
  // Below this width a frame's name does not fit; it shows on hover in the details line.
  var MIN_LABEL_PX = 35;

  // Draws into `el`; `onClick(node)` runs after a click zoomed to `node`. Returns the drawing
  // operations and the d3-flame-graph chart, for its colour and label handlers.
  return function icicle(el, onClick) {
    var width = Math.max(600, el.clientWidth || 1100);
    var drawn = false;
    var chart = flamegraph()
      .width(width)
      .cellHeight(CELL_H)
      .inverted(true)
      .transitionDuration(0)
      .minFrameSize(MIN_FRAME_PX)
      .selfValue(true)
      .sort(true)
      .title("")
      .getName(function (d) { return d.data.name; })
      .onClick(function (d) {
        settle();
        onClick(d);
      });

    // Puts every drawn frame where d3-flame-graph's transitions would leave it, and sizes the
    // graph to its rows. The transitions still run, from the final values to the same ones.
    function settle() {
      var svg = el.querySelector("svg");
      if (!svg) return;
      var deepest = 0;
      var frames = svg.querySelectorAll("g");
      for (var i = 0; i < frames.length; i++) {
        var g = frames[i], d = g.__data__;
        if (!d || d.x0 === undefined) continue;
        var w = (d.x1 - d.x0) * width;
        g.setAttribute("transform", "translate(" + d.x0 * width + "," + d.depth * CELL_H + ")");
        var rect = g.querySelector("rect");
        if (rect) rect.setAttribute("width", w);
        var label = g.querySelector("foreignObject");
        if (label) {
          label.setAttribute("width", w);
          var div = label.firstChild;
          if (div) {
            div.textContent = d.data.name;
            div.style.display = w < MIN_LABEL_PX ? "none" : "block";
          }
        }
        deepest = Math.max(deepest, d.depth);
      }
      svg.setAttribute("height", (deepest + 1) * CELL_H);
    }

    return {
      chart: chart,
      // Draws a tree (d3-flame-graph's shape: name, self value, children).
      draw: function (tree) {
        if (drawn) {
          chart.update(tree);
        } else {
          d3.select(el).datum(tree).call(chart);
          drawn = true;
        }
        settle();
      },
      // Highlights the frames whose name matches `term`; an empty term clears the highlight.
      search: function (term) {
        if (term) chart.search(term); else chart.clear();
        settle();
      },
      resetZoom: function () {
        chart.resetZoom();
        settle();
      },
      // Takes the element's width now (after the window was resized); the next draw uses it.
      resize: function () {
        var now = Math.max(600, el.clientWidth || 1100);
        if (now === width) return;
        width = now;
        chart.width(width);
      }
    };
  };
})();
