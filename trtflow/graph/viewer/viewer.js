// trtflow graph viewer: the embedded graph as a hierarchy of name-scope groups, laid out one group at
// a time when it is opened (a layered layout per group) and drawn on a canvas, so a 100,000-node
// graph opens as fast as its opened groups. Self-contained: no external scripts, works offline.
(function () {
  "use strict";
  var started = performance.now();
  var data = JSON.parse(document.getElementById("graph-data").textContent);
  var canvas = document.getElementById("canvas");
  var surface = document.getElementById("graph");
  var ctx = surface.getContext("2d");
  var minimap = document.getElementById("minimap");
  var panel = document.getElementById("panel");
  var search = document.getElementById("search");
  var searchCount = document.getElementById("search-count");
  var crumbs = document.getElementById("crumbs");

  var FONT = "11px system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif";
  var BOLD = "600 " + FONT;
  var LINE = 13, PAD = 14, HEADER = 22, NODE_GAP = 24, RANK_GAP = 44, PORT_GAP = 16, DUMMY = 8;
  var MAX_SPAN = 40, BEND_BUDGET = 6000, SWEEPS = 4, OPEN_BUDGET = 80;

  var nodes = data.nodes, groups = data.groups, N = nodes.length, G = groups.length;
  var edges = data.edges;
  var outEdges = [], inEdges = [];
  var i, g;
  for (i = 0; i < N; i++) { outEdges.push([]); inEdges.push([]); }
  edges.forEach(function (edge, index) { outEdges[edge[0]].push(index); inEdges[edge[1]].push(index); });
  var parent = groups.map(function (group) { return group.parent === null ? -1 : group.parent; });
  var depth = new Int32Array(G), first = new Float64Array(G);
  for (g = 1; g < G; g++) depth[g] = depth[parent[g]] + 1;  // a parent comes before its groups
  for (g = G - 1; g >= 0; g--) {
    first[g] = Infinity;
    groups[g].nodes.forEach(function (n) { first[g] = Math.min(first[g], n); });
    groups[g].groups.forEach(function (c) { first[g] = Math.min(first[g], first[c]); });
  }

  var expanded = new Uint8Array(G);
  expanded[0] = 1;
  var layouts = new Array(G);       // per opened group: its children's places, cached until a child changes
  var members = new Array(G);
  var sizes = new Array(N + G);     // item id (node i, or N + group g) -> [w, h] when closed
  var placed = [], boxes = new Map(), origins = new Map(), visibleEdges = [], pathEdges = new Set();
  var view = { x: 0, y: 0, k: 1 };
  var selected = -1, matches = [], matchIndex = -1, home = null;
  var scheduled = false, minimapBase = null, minimapScale = null;
  var timings = { layoutMs: 0 };

  // -- sizes and the hierarchy ----------------------------------------------------------------

  function textWidth(text, bold) {
    ctx.font = bold ? BOLD : FONT;
    return ctx.measureText(text).width;
  }

  function linesSize(lines, extra) {
    var widest = 0;
    lines.forEach(function (line, index) { widest = Math.max(widest, textWidth(line, index === 0)); });
    return [Math.min(Math.max(widest + 20, 60), 340), lines.length * LINE + 10 + (extra || 0)];
  }

  function shorten(text) { return text.length <= 44 ? text : text.slice(0, 30) + "…" + text.slice(-13); }

  function groupLines(g) { return [shorten(groups[g].lines[0])].concat(groups[g].lines.slice(1)); }

  // inside a group, a node is titled by the last part of its name: the group says the rest
  var shownLines = new Array(N);
  function nodeLines(n) {
    if (!shownLines[n]) {
      var node = nodes[n], name = node.name, cut = name.lastIndexOf("/");
      var title = node.group > 0 && node.kind === "op" && cut >= 0 && cut < name.length - 1 ? shorten(name.slice(cut + 1)) : node.lines[0];
      shownLines[n] = [title].concat(node.lines.slice(1));
    }
    return shownLines[n];
  }

  function closedSize(id) {
    if (!sizes[id]) sizes[id] = id < N ? linesSize(nodeLines(id)) : linesSize(groupLines(id - N), 8);
    return sizes[id];
  }

  function itemSize(id) {
    if (id >= N && expanded[id - N]) {
      var layout = layoutOf(id - N);
      return [Math.max(layout.w + 2 * PAD, textWidth(groupLines(id - N)[0], true) + 90), layout.h + HEADER + 2 * PAD];
    }
    return closedSize(id);
  }

  function membersOf(g) {
    if (!members[g]) {
      var found = groups[g].nodes.slice();
      groups[g].groups.forEach(function (c) { found.push.apply(found, membersOf(c)); });
      members[g] = found;
    }
    return members[g];
  }

  // the child of group g that holds node n (the node itself when it sits directly in g), or -1
  function childOf(g, n) {
    var at = nodes[n].group;
    if (at === g) return n;
    var previous = -1;
    while (at !== g && at !== -1) { previous = at; at = parent[at]; }
    return at === g ? N + previous : -1;
  }

  // what a node is drawn as now: itself, or the outermost closed group around it
  function shownAs(n) {
    var at = nodes[n].group, shown = n;
    while (at > 0) { if (!expanded[at]) shown = N + at; at = parent[at]; }
    return shown;
  }

  function holder(id) { return id < N ? nodes[id].group : parent[id - N]; }

  function setExpanded(g, open) {
    if (g <= 0 || !!expanded[g] === open) return;
    expanded[g] = open ? 1 : 0;
    for (var at = parent[g]; at >= 0; at = parent[at]) layouts[at] = null;  // their child changed size
  }

  // -- layered layout of one group's children -------------------------------------------------

  function isotonic(desired, widths) {
    var offsets = [0], k, targets = [], blocks = [];
    for (k = 1; k < widths.length; k++) offsets.push(offsets[k - 1] + (widths[k - 1] + widths[k]) / 2 + NODE_GAP);
    for (k = 0; k < desired.length; k++) targets.push(desired[k] - offsets[k]);
    targets.forEach(function (target) {
      blocks.push([target, 1]);
      while (blocks.length > 1 && blocks[blocks.length - 2][0] / blocks[blocks.length - 2][1] > blocks[blocks.length - 1][0] / blocks[blocks.length - 1][1]) {
        var last = blocks.pop();
        blocks[blocks.length - 1][0] += last[0];
        blocks[blocks.length - 1][1] += last[1];
      }
    });
    var values = [];
    blocks.forEach(function (block) { for (var j = 0; j < block[1]; j++) values.push(block[0] / block[1]); });
    return values.map(function (value, j) { return value + offsets[j]; });
  }

  // items are in graph order; an edge against that order (a cycle between groups) does not rank
  function layered(count, widths, heights, links) {
    var rank = new Int32Array(count), preds = [], succs = [], k;
    for (k = 0; k < count; k++) { preds.push([]); succs.push([]); }
    links.forEach(function (link) { if (link[0] < link[1]) { preds[link[1]].push(link[0]); succs[link[0]].push(link[1]); } });
    for (k = 0; k < count; k++) preds[k].forEach(function (p) { rank[k] = Math.max(rank[k], rank[p] + 1); });
    for (k = 0; k < count; k++) {  // a source sits just above its first consumer
      if (!preds[k].length && succs[k].length) {
        rank[k] = Math.max(0, Math.min.apply(null, succs[k].map(function (s) { return rank[s]; })) - 1);
      }
    }
    var rankOf = Array.from(rank), width = widths.slice(), up = [], down = [], chains = new Map(), budget = BEND_BUDGET;
    for (k = 0; k < count; k++) { up.push([]); down.push([]); }
    links.forEach(function (link, index) {
      var span = rankOf[link[1]] - rankOf[link[0]];
      if (link[0] >= link[1] || span < 1 || (span > 1 && (span > MAX_SPAN || budget < span))) return;
      var path = [link[0]];
      for (var step = 1; step < span; step++) {
        var dummy = rankOf.length;
        rankOf.push(rankOf[link[0]] + step); width.push(DUMMY); up.push([]); down.push([]);
        path.push(dummy);
      }
      budget -= span - 1;
      path.push(link[1]);
      chains.set(index, path.slice(1, -1));
      for (var p = 0; p + 1 < path.length; p++) { down[path[p]].push(path[p + 1]); up[path[p + 1]].push(path[p]); }
    });
    var levels = [];
    rankOf.forEach(function (r, id) { (levels[r] = levels[r] || []).push(id); });
    levels = levels.filter(function (row) { return row; });
    var position = new Float64Array(rankOf.length);
    levels.forEach(function (row) { row.forEach(function (id, j) { position[id] = j; }); });
    function reorder(row, neighbours) {
      var keyed = row.map(function (id) {
        var linked = neighbours[id], sum = 0;
        linked.forEach(function (n) { sum += position[n]; });
        return [linked.length ? sum / linked.length : position[id], id];
      });
      keyed.sort(function (a, b) { return a[0] - b[0]; });
      var ordered = keyed.map(function (pair) { return pair[1]; });
      ordered.forEach(function (id, j) { position[id] = j; });
      return ordered;
    }
    var sweep, r;
    for (sweep = 0; sweep < SWEEPS; sweep++) {
      if (sweep % 2 === 0) for (r = 1; r < levels.length; r++) levels[r] = reorder(levels[r], up);
      else for (r = levels.length - 2; r >= 0; r--) levels[r] = reorder(levels[r], down);
    }
    var x = new Float64Array(rankOf.length);
    function placeRow(row, desired) {
      isotonic(desired, row.map(function (id) { return width[id]; })).forEach(function (value, j) { x[row[j]] = value; });
    }
    levels.forEach(function (row) { placeRow(row, row.map(function () { return 0; })); });
    for (sweep = 0; sweep < SWEEPS; sweep++) {
      var neighbours = sweep % 2 === 0 ? up : down;
      var order = sweep % 2 === 0 ? levels : levels.slice().reverse();
      order.forEach(function (row) {
        placeRow(row, row.map(function (id) {
          var linked = neighbours[id], sum = 0;
          if (!linked.length) return x[id];
          linked.forEach(function (n) { sum += x[n]; });
          return sum / linked.length;
        }));
      });
    }
    var left = Infinity, right = -Infinity, tops = [], top = 0, rowOf = new Int32Array(rankOf.length);
    for (k = 0; k < rankOf.length; k++) { left = Math.min(left, x[k] - width[k] / 2); right = Math.max(right, x[k] + width[k] / 2); }
    var rowHeights = levels.map(function (row, index) {
      var tallest = 0;
      row.forEach(function (id) { rowOf[id] = index; if (id < count) tallest = Math.max(tallest, heights[id]); });
      return tallest;
    });
    rowHeights.forEach(function (height, index) {  // a row of ports alone (height 0) sits close
      tops.push(top);
      top += height + (height && rowHeights[index + 1] ? RANK_GAP : PORT_GAP);
    });
    var cx = [], cy = [];
    for (k = 0; k < count; k++) { cx.push(x[k] - left); cy.push(tops[rowOf[k]] + rowHeights[rowOf[k]] / 2); }
    var routes = new Map();
    chains.forEach(function (chain, index) {
      var a = links[index][0], b = links[index][1];
      var route = [[cx[a], cy[a] + heights[a] / 2]];
      chain.forEach(function (d) {  // straight down its row beside the boxes in it; bends only between rows
        var rowTop = tops[rowOf[d]], rowHeight = rowHeights[rowOf[d]];
        route.push([x[d] - left, rowTop]);
        if (rowHeight) route.push([x[d] - left, rowTop + rowHeight]);
      });
      route.push([cx[b], cy[b] - heights[b] / 2]);
      routes.set(index, route);
    });
    var last = rowHeights.length - 1;
    var bottom = last < 0 ? 0 : top - (rowHeights[last] ? RANK_GAP : PORT_GAP);
    return { x: cx, y: cy, w: count ? right - left : 0, h: Math.max(0, bottom), routes: routes };
  }

  // A group's layout has, besides its children, up to two ports: `in`, above them, where edges from
  // outside enter, and `out`, below them, where edges to outside leave. Their routes are laid out
  // with the group's own edges, so an edge between groups runs around the boxes inside a group, not
  // through them.
  function layoutOf(g) {
    if (layouts[g]) return layouts[g];
    var begin = performance.now();
    var items = groups[g].nodes.concat(groups[g].groups.map(function (c) { return N + c; }));
    items.sort(function (a, b) { return (a < N ? a : first[a - N]) - (b < N ? b : first[b - N]); });
    var seen = new Set(), pairs = [], enters = false, leaves = false;
    function pair(from, to) {
      var key = from + "," + to;
      if (from !== to && !seen.has(key)) { seen.add(key); pairs.push([from, to]); }
    }
    membersOf(g).forEach(function (n) {
      var from = childOf(g, n);
      outEdges[n].forEach(function (e) {
        var target = childOf(g, edges[e][1]);
        if (target < 0) leaves = true;
        pair(from, target < 0 ? "out" : target);
      });
      inEdges[n].forEach(function (e) {
        if (childOf(g, edges[e][0]) < 0) { enters = true; pair("in", from); }
      });
    });
    var order = (enters ? ["in"] : []).concat(items, leaves ? ["out"] : []);  // `in` first: ranks follow indices
    var local = new Map();
    order.forEach(function (id, k) { local.set(id, k); });
    var links = pairs.map(function (p) { return [local.get(p[0]), local.get(p[1])]; });
    var measured = items.map(itemSize);
    var result = layered(
      order.length,
      order.map(function (id) { return typeof id === "string" ? DUMMY : measured[local.get(id) - (enters ? 1 : 0)][0]; }),
      order.map(function (id) { return typeof id === "string" ? 0 : measured[local.get(id) - (enters ? 1 : 0)][1]; }),
      links
    );
    var routes = new Map(), ports = {};
    result.routes.forEach(function (route, index) { routes.set(pairs[index][0] + "," + pairs[index][1], route); });
    if (enters) ports.in = [result.x[0], result.y[0]];
    if (leaves) ports.out = [result.x[order.length - 1], result.y[order.length - 1]];
    var at = enters ? 1 : 0;
    layouts[g] = {
      items: items, x: result.x.slice(at, at + items.length), y: result.y.slice(at, at + items.length),
      sizes: measured, w: result.w, h: result.h, routes: routes, ports: ports
    };
    timings.layoutMs += performance.now() - begin;
    return layouts[g];
  }

  // -- placing what is shown -------------------------------------------------------------------

  function placeGroup(g, ox, oy) {
    var layout = layoutOf(g);
    origins.set(g, [ox, oy]);
    layout.items.forEach(function (id, k) {
      var w = layout.sizes[k][0], h = layout.sizes[k][1];
      var box = { id: id, x: ox + layout.x[k] - w / 2, y: oy + layout.y[k] - h / 2, w: w, h: h };
      box.kind = id < N ? "node" : expanded[id - N] ? "open" : "group";
      boxes.set(id, box);
      placed.push(box);
      if (box.kind === "open") placeGroup(id - N, box.x + PAD, box.y + HEADER + PAD);
    });
  }

  function place() {
    placed = []; boxes = new Map(); origins = new Map();
    placeGroup(0, 0, 0);
    var shown = new Map();
    edges.forEach(function (edge) {
      var a = shownAs(edge[0]), b = shownAs(edge[1]);
      if (a === b) return;
      var key = a + "," + b;
      if (!shown.has(key)) shown.set(key, { a: a, b: b, tensor: edge[2] });
    });
    visibleEdges = [];
    shown.forEach(function (edge) {
      edge.points = routeBetween(edge.a, edge.b);
      visibleEdges.push(edge);
    });
    markPath();
    drawMinimapBase();
    schedule();
  }

  // The points of the edge from shown item a to shown item b: out of the open groups around a through
  // their `out` ports, along the route in the innermost group holding both, into the open groups
  // around b through their `in` ports. A piece with no route (a long edge over the bend budget) is
  // drawn straight.
  function routeBetween(a, b) {
    var around = new Set();
    for (var at = holder(b); at >= 0; at = parent[at]) around.add(at);
    var points = [], from = a, g = holder(a);
    function piece(group, start, end, fallback) {
      var route = layouts[group] && layouts[group].routes.get(start + "," + end), origin = origins.get(group);
      var begin = points.length;
      if (route) route.forEach(function (p) { points.push([p[0] + origin[0], p[1] + origin[1]]); });
      else points.push.apply(points, fallback);
      // leave an open group below its `out` port, enter one above its `in` port: no jog at the border
      var exit = typeof start === "number" && start >= N && port(start - N, "out");
      var entry = typeof end === "number" && end >= N && port(end - N, "in");
      if (exit) points[begin] = [exit[0], points[begin][1]];
      if (entry) points[points.length - 1] = [entry[0], points[points.length - 1][1]];
    }
    function bottom(id) { var box = boxes.get(id); return [box.x + box.w / 2, box.y + box.h]; }
    function top(id) { var box = boxes.get(id); return [box.x + box.w / 2, box.y]; }
    function port(group, name) {
      var found = expanded[group] && layouts[group] && layouts[group].ports[name], origin = origins.get(group);
      return found ? [found[0] + origin[0], found[1] + origin[1]] : null;
    }
    while (!around.has(g)) {  // up and out of the groups around a that do not hold b
      var exit = port(g, "out");
      piece(g, from, "out", exit ? [bottom(from), exit] : [bottom(from)]);
      from = N + g;
      g = parent[g];
    }
    var inward = [];  // the items holding b, from the common group's child down to b
    for (var item = b; holder(item) !== g; item = N + holder(item)) inward.push(item);
    inward.push(item);
    inward.reverse();
    var into = inward[0];
    piece(g, from, into, [bottom(from), top(into)]);
    for (var k = 1; k < inward.length; k++) {
      var group = inward[k - 1] - N, entry = port(group, "in");
      piece(group, "in", inward[k], entry ? [entry, top(inward[k])] : [top(inward[k])]);
    }
    return points;
  }

  // the edges on the way from the graph's inputs to the selected (at first: the focus) node
  function markPath() {
    pathEdges = new Set();
    var target = selected >= 0 && selected < N ? shownAs(selected) : selected;
    if (target < 0) return;
    var into = new Map();
    visibleEdges.forEach(function (edge, index) {
      if (!into.has(edge.b)) into.set(edge.b, []);
      into.get(edge.b).push(index);
    });
    var stack = [target], seen = new Set([target]);
    while (stack.length) {
      (into.get(stack.pop()) || []).forEach(function (index) {
        pathEdges.add(index);
        var source = visibleEdges[index].a;
        if (!seen.has(source)) { seen.add(source); stack.push(source); }
      });
    }
  }

  // -- drawing ---------------------------------------------------------------------------------

  function schedule() {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(function () { scheduled = false; render(); });
  }

  function roundRect(x, y, w, h, r) {
    ctx.beginPath();
    ctx.moveTo(x + r, y);
    ctx.arcTo(x + w, y, x + w, y + h, r);
    ctx.arcTo(x + w, y + h, x, y + h, r);
    ctx.arcTo(x, y + h, x, y, r);
    ctx.arcTo(x, y, x + w, y, r);
    ctx.closePath();
  }

  function drawLines(lines, box, color) {
    ctx.fillStyle = color;
    ctx.textAlign = "center";
    ctx.textBaseline = "alphabetic";
    lines.forEach(function (line, index) {
      ctx.font = index === 0 ? BOLD : FONT;
      ctx.fillText(line, box.x + box.w / 2, box.y + 16 + index * LINE);
    });
  }

  // zoomed out, a group's name is still written, at screen size, where its box has room for it
  function farLabel(box, text, top) {
    var size = 12 / view.k;
    if (box.w * view.k < 70 || (!top && box.h < size * 1.4)) return;
    ctx.font = "600 " + size + "px system-ui, sans-serif";
    ctx.fillStyle = "#1d2a44";
    ctx.textAlign = "left";
    var room = box.w - 8 / view.k, shown = text;
    while (shown.length > 4 && ctx.measureText(shown).width > room) shown = shown.slice(0, -2);
    var x = box.x + 4 / view.k, y = top ? box.y - 4 / view.k : box.y + box.h / 2 + size / 3;
    shown = shown === text ? text : shown + "…";
    ctx.lineWidth = 3 / view.k;
    ctx.strokeStyle = "rgba(255,255,255,0.9)";
    ctx.strokeText(shown, x, y);  // a halo, readable on any fill
    ctx.fillText(shown, x, y);
  }

  function drawBox(box, labels) {
    var id = box.id;
    if (box.kind === "open") {
      var g = id - N;
      roundRect(box.x, box.y, box.w, box.h, 8);
      ctx.fillStyle = depth[g] % 2 ? "rgba(225,232,245,0.55)" : "rgba(240,243,250,0.7)";
      ctx.fill();
      ctx.lineWidth = id === selected ? 3 : 1.2;
      ctx.strokeStyle = id === selected ? "#ff2d00" : groups[g].ring || "#9aa6bd";
      ctx.stroke();
      if (labels) {
        ctx.fillStyle = "#2a3a5a";
        ctx.font = BOLD;
        ctx.textAlign = "left";
        ctx.fillText("▾ " + groupLines(g)[0] + "  (" + groups[g].size.toLocaleString() + ")", box.x + 8, box.y + 15);
      } else {
        farLabel(box, groupLines(g)[0], true);
      }
      return;
    }
    var look = id < N ? nodes[id] : groups[id - N];
    var radius = id < N && nodes[id].kind !== "op" ? box.h / 2 : 6;
    if (look.ring) {
      roundRect(box.x - 5, box.y - 5, box.w + 10, box.h + 10, radius + 3);
      ctx.lineWidth = 3; ctx.strokeStyle = look.ring; ctx.stroke();
    }
    if (id >= N) {  // a closed group: a stack of cards
      roundRect(box.x + 4, box.y + 4, box.w, box.h, radius);
      ctx.fillStyle = "#c8c8c8"; ctx.fill();
    }
    roundRect(box.x, box.y, box.w, box.h, radius);
    ctx.fillStyle = look.fill; ctx.fill();
    if (id >= N && look.mix.length) {  // the precision mix, as a bar along the bottom
      var total = 0, at = box.x + 6;
      look.mix.forEach(function (part) { total += part[1]; });
      look.mix.forEach(function (part) {
        var w = (box.w - 12) * part[1] / total;
        ctx.fillStyle = part[0]; ctx.fillRect(at, box.y + box.h - 10, w, 5);
        at += w;
      });
    }
    ctx.setLineDash(look.dashed ? [5, 3] : []);
    ctx.lineWidth = id === selected ? 4 : matches.indexOf(id) >= 0 ? 3.5 : look.bw || 1.5;
    ctx.strokeStyle = id === selected ? "#ff2d00" : matches.indexOf(id) >= 0 ? "#00a0ff" : look.border;
    roundRect(box.x, box.y, box.w, box.h, radius);
    ctx.stroke();
    ctx.setLineDash([]);
    if (labels) drawLines(id < N ? nodeLines(id) : groupLines(id - N), box, id < N ? look.font : "#000000");
    else if (id >= N) farLabel(box, groupLines(id - N)[0], false);
  }

  // an edge's points as the cubic curves drawn through them: [start, control, control, end] each,
  // leaving and entering every point vertically
  function curves(p) {
    var found = [];
    for (var j = 1; j < p.length; j++) {
      var a = p[j - 1], b = p[j], dy = Math.max(10, Math.abs(b[1] - a[1]) / 2);
      found.push([a, [a[0], a[1] + dy], [b[0], b[1] - dy], b]);
    }
    return found;
  }

  function drawEdge(edge, onPath) {
    var p = edge.points;
    ctx.beginPath();
    ctx.moveTo(p[0][0], p[0][1]);
    curves(p).forEach(function (c) { ctx.bezierCurveTo(c[1][0], c[1][1], c[2][0], c[2][1], c[3][0], c[3][1]); });
    ctx.strokeStyle = onPath ? "#2f6fd6" : "#8a8a8a";
    ctx.lineWidth = (onPath ? 2.2 : 1.2) / Math.min(1, view.k);
    ctx.stroke();
    var end = p[p.length - 1], size = 6 / Math.min(1, view.k);
    ctx.beginPath();
    ctx.moveTo(end[0], end[1]);
    ctx.lineTo(end[0] - size / 2, end[1] - size);
    ctx.lineTo(end[0] + size / 2, end[1] - size);
    ctx.closePath();
    ctx.fillStyle = ctx.strokeStyle;
    ctx.fill();
  }

  function worldBounds() {
    return { x0: -view.x / view.k, y0: -view.y / view.k, x1: (surface.clientWidth - view.x) / view.k, y1: (surface.clientHeight - view.y) / view.k };
  }

  function intersects(box, b) { return box.x < b.x1 && box.x + box.w > b.x0 && box.y < b.y1 && box.y + box.h > b.y0; }

  function render() {
    var ratio = window.devicePixelRatio || 1, width = surface.clientWidth, height = surface.clientHeight;
    if (surface.width !== Math.round(width * ratio) || surface.height !== Math.round(height * ratio)) {
      surface.width = Math.round(width * ratio);
      surface.height = Math.round(height * ratio);
    }
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, surface.width, surface.height);
    ctx.setTransform(ratio * view.k, 0, 0, ratio * view.k, ratio * view.x, ratio * view.y);
    var bounds = worldBounds(), labels = view.k >= 0.35;
    placed.forEach(function (box) { if (box.kind === "open" && intersects(box, bounds)) drawBox(box, labels); });
    visibleEdges.forEach(function (edge, index) {
      var p = edge.points, x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
      p.forEach(function (q) { x0 = Math.min(x0, q[0]); x1 = Math.max(x1, q[0]); y0 = Math.min(y0, q[1]); y1 = Math.max(y1, q[1]); });
      if (intersects({ x: x0 - 20, y: y0 - 20, w: x1 - x0 + 40, h: y1 - y0 + 40 }, bounds)) drawEdge(edge, pathEdges.has(index));
    });
    placed.forEach(function (box) { if (box.kind !== "open" && intersects(box, bounds)) drawBox(box, labels); });
    drawMinimap();
  }

  function drawMinimapBase() {
    var root = layoutOf(0), w = Math.max(root.w, 1), h = Math.max(root.h, 1);
    var scale = Math.min((minimap.width - 10) / w, (minimap.height - 10) / h);
    minimapScale = { s: scale, ox: (minimap.width - w * scale) / 2, oy: (minimap.height - h * scale) / 2 };
    minimapBase = document.createElement("canvas");
    minimapBase.width = minimap.width;
    minimapBase.height = minimap.height;
    var base = minimapBase.getContext("2d");
    placed.forEach(function (box) {
      var x = minimapScale.ox + box.x * scale, y = minimapScale.oy + box.y * scale;
      var look = box.id < N ? nodes[box.id] : groups[box.id - N];
      if (box.kind === "open") { base.strokeStyle = "#9aa6bd"; base.strokeRect(x, y, box.w * scale, box.h * scale); }
      else { base.fillStyle = look.ring || look.fill; base.fillRect(x, y, Math.max(1, box.w * scale), Math.max(1, box.h * scale)); }
    });
  }

  function drawMinimap() {
    var mini = minimap.getContext("2d"), b = worldBounds(), m = minimapScale;
    mini.clearRect(0, 0, minimap.width, minimap.height);
    if (minimapBase) mini.drawImage(minimapBase, 0, 0);
    mini.strokeStyle = "#ff2d00";
    mini.lineWidth = 1.5;
    mini.strokeRect(m.ox + b.x0 * m.s, m.oy + b.y0 * m.s, (b.x1 - b.x0) * m.s, (b.y1 - b.y0) * m.s);
  }

  // -- moving around ---------------------------------------------------------------------------

  function zoomAt(factor, cx, cy) {
    var k = Math.min(6, Math.max(0.005, view.k * factor));
    view.x = cx - (cx - view.x) * (k / view.k);
    view.y = cy - (cy - view.y) * (k / view.k);
    view.k = k;
    schedule();
  }

  function fit() {
    var root = layoutOf(0), width = surface.clientWidth, height = surface.clientHeight;
    view.k = Math.min(width / Math.max(root.w + 40, 1), height / Math.max(root.h + 40, 1), 1.5);
    view.x = (width - root.w * view.k) / 2;
    view.y = (height - root.h * view.k) / 2;
    schedule();
  }

  // put item `id` at a readable zoom, a little below the middle, so what feeds it shows above
  function centerOn(id, k) {
    var box = boxes.get(id);
    if (!box) return;
    view.k = k || Math.max(view.k, 1);
    view.x = surface.clientWidth / 2 - (box.x + box.w / 2) * view.k;
    view.y = Math.min(surface.clientHeight * 0.6 - (box.y + box.h / 2) * view.k, 40);  // no blank page above the graph
    schedule();
  }

  // open every group around node n, so it is drawn itself
  function reveal(n) {
    var changed = false;
    for (var at = nodes[n].group; at > 0; at = parent[at]) {
      if (!expanded[at]) { setExpanded(at, true); changed = true; }
    }
    if (changed) place();
  }

  function toggle(g) {
    var begin = performance.now();
    setExpanded(g, !expanded[g]);
    place();
    timings.lastToggleMs = performance.now() - begin;
  }

  // -- the side panel --------------------------------------------------------------------------

  function htmlElement(tag, text, className) {
    var made = document.createElement(tag);
    if (text !== undefined) made.textContent = text;
    if (className) made.className = className;
    return made;
  }

  function section(title, entries) {
    if (!entries.length) return;
    var table = htmlElement("table");
    entries.forEach(function (entry) {
      var tr = htmlElement("tr");
      tr.appendChild(htmlElement("td", entry[0], "key"));
      tr.appendChild(htmlElement("td", typeof entry[1] === "string" ? entry[1] : JSON.stringify(entry[1])));
      table.appendChild(tr);
    });
    panel.appendChild(htmlElement("h3", title));
    panel.appendChild(table);
  }

  function list(title, items) {
    if (!items.length) return;
    var ul = htmlElement("ul");
    items.forEach(function (item) { ul.appendChild(htmlElement("li", item)); });
    panel.appendChild(htmlElement("h3", title));
    panel.appendChild(ul);
  }

  function tensorText(index) {
    var tensor = data.tensors[index];
    return tensor[1] ? tensor[0] + "  " + tensor[1] : tensor[0];
  }

  function groupPath(g) {
    var path = [];
    for (var at = g; at >= 0; at = parent[at]) path.unshift(groups[at].label);
    return path;
  }

  function showPanel(id) {
    panel.textContent = "";
    var heading;
    if (id < N) {
      var node = nodes[id];
      heading = htmlElement("h2", node.name);
      heading.id = "panel-name";
      panel.appendChild(heading);
      section("node", node.summary);
      list("inputs", inEdges[id].map(function (e) { return tensorText(edges[e][2]) + "  ← " + nodes[edges[e][0]].name; }));
      list("outputs", outEdges[id].map(function (e) { return tensorText(edges[e][2]) + "  → " + nodes[edges[e][1]].name; }));
      list("parts", node.parts);
      section("attributes", Object.keys(node.attributes).map(function (key) { return [key, node.attributes[key]]; }));
      crumbs.textContent = groupPath(node.group).concat([node.name]).join("  ›  ");
      return;
    }
    var g = id - N, group = groups[g];
    heading = htmlElement("h2", group.label);
    heading.id = "panel-name";
    panel.appendChild(heading);
    var rows = [["nodes", group.size.toLocaleString()]];
    group.mix.forEach(function (part) { rows.push(["precision " + part[2], part[1].toLocaleString()]); });
    group.lines.slice(2).forEach(function (line) { rows.push(["", line]); });
    if (group.worst) rows.push(["worst node", group.worst]);
    section("group", rows);
    var button = htmlElement("button", expanded[g] ? "close group" : "open group");
    button.addEventListener("click", function () { toggle(g); showPanel(id); });
    panel.appendChild(button);
    list("holds", group.groups.map(function (c) { return "▸ " + groups[c].label + " (" + groups[c].size + ")"; })
      .concat(group.nodes.slice(0, 200).map(function (n) { return nodes[n].name; })));
    crumbs.textContent = groupPath(g).join("  ›  ");
  }

  function select(id, center) {
    selected = id;
    if (id < N) reveal(id);
    markPath();
    showPanel(id);
    if (center) centerOn(id);
    schedule();
  }

  // -- search ----------------------------------------------------------------------------------

  var haystacks = null;
  function runSearch() {
    var query = search.value.trim().toLowerCase();
    matches = [];
    matchIndex = -1;
    if (query) {
      if (!haystacks) haystacks = nodes.map(function (node) { return [node.name, node.op].concat(node.parts).join("\n").toLowerCase(); });
      haystacks.forEach(function (text, n) { if (text.indexOf(query) >= 0) matches.push(n); });
    }
    searchCount.textContent = query ? matches.length.toLocaleString() + " found" : "";
    schedule();
  }

  function nextMatch(step) {
    if (!matches.length) return;
    matchIndex = (matchIndex + step + matches.length) % matches.length;
    searchCount.textContent = (matchIndex + 1) + " / " + matches.length;
    select(matches[matchIndex], true);
  }

  // -- input -----------------------------------------------------------------------------------

  function itemAt(clientX, clientY) {
    var rect = surface.getBoundingClientRect();
    var x = (clientX - rect.left - view.x) / view.k, y = (clientY - rect.top - view.y) / view.k;
    for (var j = placed.length - 1; j >= 0; j--) {
      var box = placed[j];
      if (x < box.x || x > box.x + box.w || y < box.y || y > box.y + box.h) continue;
      if (box.kind !== "open") return { box: box };
      if (y <= box.y + HEADER) return { box: box, header: true };
    }
    return null;
  }

  function drawLegend() {
    var legend = document.getElementById("legend");
    data.legend.forEach(function (entry) {
      var line = htmlElement("div", undefined, "row");
      var swatch = htmlElement("span", undefined, "swatch");
      if (entry[0] === "fill") swatch.style.background = entry[1];
      else swatch.style.border = "3px solid " + entry[1];
      line.appendChild(swatch);
      line.appendChild(htmlElement("span", entry[2]));
      legend.appendChild(line);
    });
    var stack = htmlElement("div", undefined, "row");
    var card = htmlElement("span", undefined, "swatch");
    card.style.boxShadow = "3px 3px 0 #c8c8c8";
    stack.appendChild(card);
    stack.appendChild(htmlElement("span", "closed group (click to open); blue edges: the way from the inputs to the selected node"));
    legend.appendChild(stack);
    data.notes.forEach(function (note) { legend.appendChild(htmlElement("div", note, "note")); });
  }

  function wireInput() {
    var drag = null;
    surface.addEventListener("pointerdown", function (event) {
      if (event.button !== 0) return;
      drag = { x: event.clientX, y: event.clientY, vx: view.x, vy: view.y, moved: false };
      canvas.classList.add("dragging");
    });
    window.addEventListener("pointermove", function (event) {
      if (!drag) return;
      var dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      view.x = drag.vx + dx;
      view.y = drag.vy + dy;
      schedule();
    });
    window.addEventListener("pointerup", function (event) {
      var click = drag && !drag.moved;
      drag = null;
      canvas.classList.remove("dragging");
      if (!click || event.target !== surface) return;
      var hit = itemAt(event.clientX, event.clientY);
      if (!hit) return;
      var id = hit.box.id;
      if (id >= N && (hit.box.kind === "group" || hit.header)) {
        toggle(id - N);
        select(id, false);
      } else {
        select(id, false);
      }
    });
    surface.addEventListener("wheel", function (event) {
      event.preventDefault();
      var rect = surface.getBoundingClientRect();
      zoomAt(Math.exp(-event.deltaY * 0.0015), event.clientX - rect.left, event.clientY - rect.top);
    }, { passive: false });
    function minimapMove(event) {
      var rect = minimap.getBoundingClientRect(), m = minimapScale;
      var wx = (event.clientX - rect.left - m.ox) / m.s, wy = (event.clientY - rect.top - m.oy) / m.s;
      view.x = surface.clientWidth / 2 - wx * view.k;
      view.y = surface.clientHeight / 2 - wy * view.k;
      schedule();
    }
    var miniDrag = false;
    minimap.addEventListener("pointerdown", function (event) { event.stopPropagation(); miniDrag = true; minimapMove(event); });
    minimap.addEventListener("pointermove", function (event) { if (miniDrag) minimapMove(event); });
    window.addEventListener("pointerup", function () { miniDrag = false; });
    search.addEventListener("input", runSearch);
    search.addEventListener("keydown", function (event) {
      if (event.key === "Enter") { event.preventDefault(); nextMatch(event.shiftKey ? -1 : 1); }
      if (event.key === "Escape") { search.value = ""; runSearch(); }
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "/" && document.activeElement !== search) { event.preventDefault(); search.focus(); }
    });
    window.addEventListener("resize", schedule);
    document.getElementById("fit").addEventListener("click", fit);
    document.getElementById("home").addEventListener("click", function () { if (home !== null) select(home, true); });
    document.getElementById("zoom-in").addEventListener("click", function () { zoomAt(1.25, surface.clientWidth / 2, surface.clientHeight / 2); });
    document.getElementById("zoom-out").addEventListener("click", function () { zoomAt(0.8, surface.clientWidth / 2, surface.clientHeight / 2); });
  }

  // -- opening ---------------------------------------------------------------------------------

  // small graphs open whole; large ones open the groups around the focus, then the shallowest
  // groups while few boxes are shown, so the first screen has both context and detail
  function openGroups() {
    if (!data.collapsed) { for (g = 1; g < G; g++) expanded[g] = 1; return; }
    for (var at = nodes[data.focus].group; at > 0; at = parent[at]) expanded[at] = 1;
    var shown = groups[0].nodes.length + groups[0].groups.length, queue = [0];
    for (g = 1; g < G; g++) if (expanded[g]) shown += groups[g].nodes.length + groups[g].groups.length - 1;
    while (queue.length) {
      var current = queue.shift();
      groups[current].groups.forEach(function (child) {
        var more = groups[child].nodes.length + groups[child].groups.length - 1;
        if (!expanded[child] && shown + more <= OPEN_BUDGET) { expanded[child] = 1; shown += more; }
        if (expanded[child]) queue.push(child);
      });
    }
  }

  document.getElementById("title").textContent = data.title;
  drawLegend();
  wireInput();
  openGroups();
  place();
  home = data.focus;
  select(home, false);
  centerOn(home, 1);
  render();
  timings.openMs = performance.now() - started;
  timings.interactiveMs = performance.now();  // since navigation started
  requestAnimationFrame(function () { setTimeout(function () { timings.graphPaintedMs = performance.now(); }, 0); });

  // what tests and benchmarks read: the boxes on screen (client pixels), and how long things took
  window.trtflowViewer = {
    timings: timings,
    view: view,
    focus: nodes[data.focus].name,
    drawn: function () {
      var rect = surface.getBoundingClientRect(), found = [];
      placed.forEach(function (box) {
        var x = rect.left + view.x + box.x * view.k, y = rect.top + view.y + box.y * view.k;
        var w = box.w * view.k, h = box.h * view.k;
        if (x + w < rect.left || x > rect.right || y + h < rect.top || y > rect.bottom) return;
        found.push({
          name: box.id < N ? nodes[box.id].name : groups[box.id - N].label, kind: box.kind,
          x: x, y: y, w: w, h: h, inside: x >= rect.left && y >= rect.top && x + w <= rect.right && y + h <= rect.bottom
        });
      });
      return found;
    },
    groupOf: function (name) {
      var n = nodes.findIndex(function (node) { return node.name === name; });
      return n < 0 ? null : groupPath(nodes[n].group);
    },
    toggle: function (label) {
      var found = groups.findIndex(function (group) { return group.label === label; });
      toggle(found);
      render();
      return timings.lastToggleMs;
    },
    pathEdges: function () { return pathEdges.size; },
    // [edge source, edge target, box] for every drawn edge that runs through a node or closed group
    // on screen other than its own ends (sampled along its curves)
    crossings: function () {
      var bounds = worldBounds(), shownBoxes = placed.filter(function (box) { return box.kind !== "open" && intersects(box, bounds); });
      var label = function (id) { return id < N ? nodes[id].name : groups[id - N].label; }, found = [];
      visibleEdges.forEach(function (edge) {
        var hit = new Set();
        curves(edge.points).forEach(function (c) {
          for (var t = 0.05; t < 1; t += 0.05) {
            var u = 1 - t, w = [u * u * u, 3 * u * u * t, 3 * u * t * t, t * t * t];
            var x = w[0] * c[0][0] + w[1] * c[1][0] + w[2] * c[2][0] + w[3] * c[3][0];
            var y = w[0] * c[0][1] + w[1] * c[1][1] + w[2] * c[2][1] + w[3] * c[3][1];
            shownBoxes.forEach(function (box) {
              if (box.id === edge.a || box.id === edge.b) return;
              if (x > box.x + 2 && x < box.x + box.w - 2 && y > box.y + 2 && y < box.y + box.h - 2) hit.add(box.id);
            });
          }
        });
        hit.forEach(function (id) { found.push([label(edge.a), label(edge.b), label(id)]); });
      });
      return found;
    },
    render: render
  };
  document.body.setAttribute("data-ready", "true");
})();
