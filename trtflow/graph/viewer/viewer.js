// trtflow graph viewer: draws the embedded graph (positions computed by trtflow), with pan/zoom,
// search and a side panel. Self-contained: no external scripts, works from a file:// URL offline.
(function () {
  "use strict";
  var SVG_NS = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("graph-data").textContent);
  var svg = document.getElementById("graph");
  var canvas = document.getElementById("canvas");
  var panel = document.getElementById("panel");
  var search = document.getElementById("search");
  var searchCount = document.getElementById("search-count");
  var viewport = make("g", { id: "viewport" });
  var view = { x: 0, y: 0, k: 1 };
  var nodeElements = [];
  var edgeElements = [];
  var matches = [];
  var matchIndex = -1;
  var selected = null;

  function make(tag, attributes, parent) {
    var element = document.createElementNS(SVG_NS, tag);
    Object.keys(attributes || {}).forEach(function (key) { element.setAttribute(key, attributes[key]); });
    if (parent) parent.appendChild(element);
    return element;
  }

  function curve(points) {
    var d = "M" + points[0][0] + "," + points[0][1];
    for (var i = 1; i < points.length; i++) {
      var a = points[i - 1], b = points[i], dy = (b[1] - a[1]) / 2;
      d += " C" + a[0] + "," + (a[1] + dy) + " " + b[0] + "," + (b[1] - dy) + " " + b[0] + "," + b[1];
    }
    return d;
  }

  function drawEdges() {
    var group = make("g", { "class": "edges" }, viewport);
    data.edges.forEach(function (edge, index) {
      var element = make("g", { "class": "edge", "data-index": String(index) }, group);
      make("path", { d: curve(edge.points), "marker-end": "url(#arrow)" }, element);
      var title = make("title", {}, element);
      title.textContent = edge.tensor + (edge.label ? " — " + edge.label : "");
      if (edge.label) {
        var mid = edge.points[Math.floor(edge.points.length / 2)];
        var text = make("text", { x: mid[0] + 4, y: mid[1] - 6 }, element);
        text.textContent = edge.label;
      }
      edgeElements.push(element);
    });
  }

  function drawNodes() {
    var group = make("g", { "class": "nodes" }, viewport);
    data.nodes.forEach(function (node, index) {
      var element = make("g", {
        "class": "node", "data-index": String(index), "data-name": node.name,
        transform: "translate(" + (node.x - node.w / 2) + "," + (node.y - node.h / 2) + ")"
      }, group);
      if (node.ring) {
        make("rect", {
          x: -5, y: -5, width: node.w + 10, height: node.h + 10, rx: 9, fill: "none",
          stroke: node.ring, "stroke-width": 3, "class": "ring"
        }, element);
      }
      make("rect", {
        "class": "box", width: node.w, height: node.h, rx: node.kind === "op" ? 6 : node.h / 2,
        fill: node.fill, stroke: node.border, "stroke-width": node.bw,
        "stroke-dasharray": node.dashed ? "5,3" : "none"
      }, element);
      var text = make("text", { x: node.w / 2, y: 15, "text-anchor": "middle", fill: node.font }, element);
      node.lines.forEach(function (line, i) {
        var span = make("tspan", { x: node.w / 2, dy: i === 0 ? 0 : 13 }, text);
        if (i === 0) span.setAttribute("class", "title");
        span.textContent = line;
      });
      var title = make("title", {}, element);
      title.textContent = node.name;
      element.addEventListener("click", function (event) { event.stopPropagation(); select(index, false); });
      nodeElements.push(element);
    });
  }

  function applyView() {
    viewport.setAttribute("transform", "translate(" + view.x + "," + view.y + ") scale(" + view.k + ")");
  }

  // The whole graph in the window, on open and on the "fit" button: a reader first sees its shape,
  // then zooms (wheel, +) or searches into the part they care about.
  function fit() {
    var box = canvas.getBoundingClientRect();
    var k = Math.min(box.width / Math.max(data.width, 1), box.height / Math.max(data.height, 1), 1.5);
    view.k = k > 0 ? k : 1;
    view.x = (box.width - data.width * view.k) / 2;
    view.y = (box.height - data.height * view.k) / 2;
    applyView();
  }

  function zoomAt(factor, cx, cy) {
    var k = Math.min(8, Math.max(0.02, view.k * factor));
    view.x = cx - (cx - view.x) * (k / view.k);
    view.y = cy - (cy - view.y) * (k / view.k);
    view.k = k;
    applyView();
  }

  function centerOn(node) {
    var box = canvas.getBoundingClientRect();
    view.k = Math.max(view.k, 0.8);
    view.x = box.width / 2 - node.x * view.k;
    view.y = box.height / 2 - node.y * view.k;
    applyView();
  }

  function row(table, key, value) {
    var tr = htmlElement("tr");
    tr.appendChild(htmlElement("td", key, "key"));
    tr.appendChild(htmlElement("td", typeof value === "string" ? value : JSON.stringify(value)));
    table.appendChild(tr);
  }

  function htmlElement(tag, text, className) {
    var made = document.createElement(tag);
    if (text !== undefined) made.textContent = text;
    if (className) made.className = className;
    return made;
  }

  // A titled block of the side panel: a key/value table, or a list of lines.
  function section(title, entries) {
    if (!entries.length) return;
    var table = htmlElement("table");
    entries.forEach(function (entry) { row(table, entry[0], entry[1]); });
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

  function tensorText(name) {
    var tensor = data.tensors[name];
    return tensor ? name + "  " + tensor : name;
  }

  function showPanel(index) {
    var node = data.nodes[index];
    panel.textContent = "";
    var heading = htmlElement("h2", node.name);
    heading.id = "panel-name";
    panel.appendChild(heading);
    section("node", node.summary);
    list("inputs", data.edges.filter(function (e) { return e.t === index; }).map(function (e) {
      return tensorText(e.tensor) + "  ← " + data.nodes[e.s].name;
    }));
    list("outputs", data.edges.filter(function (e) { return e.s === index; }).map(function (e) {
      return tensorText(e.tensor) + "  → " + data.nodes[e.t].name;
    }));
    list("parts", node.parts);
    section("attributes", Object.keys(node.attributes).map(function (key) { return [key, node.attributes[key]]; }));
  }

  function select(index, center) {
    if (selected !== null) nodeElements[selected].classList.remove("selected");
    edgeElements.forEach(function (element) { element.classList.remove("near"); });
    selected = index;
    nodeElements[index].classList.add("selected");
    data.edges.forEach(function (edge, i) {
      if (edge.s === index || edge.t === index) edgeElements[i].classList.add("near");
    });
    showPanel(index);
    if (center) centerOn(data.nodes[index]);
  }

  function runSearch() {
    var query = search.value.trim().toLowerCase();
    matches.forEach(function (i) { nodeElements[i].classList.remove("match"); });
    matches = [];
    matchIndex = -1;
    if (query) {
      data.nodes.forEach(function (node, i) {
        var haystack = [node.name, node.op].concat(node.parts).join("\n").toLowerCase();
        if (haystack.indexOf(query) >= 0) matches.push(i);
      });
      matches.forEach(function (i) { nodeElements[i].classList.add("match"); });
    }
    searchCount.textContent = query ? matches.length + " found" : "";
  }

  function nextMatch(step) {
    if (!matches.length) return;
    matchIndex = (matchIndex + step + matches.length) % matches.length;
    searchCount.textContent = (matchIndex + 1) + " / " + matches.length;
    select(matches[matchIndex], true);
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
    data.notes.forEach(function (note) { legend.appendChild(htmlElement("div", note, "note")); });
  }

  function wireInput() {
    var drag = null;
    svg.addEventListener("pointerdown", function (event) {
      if (event.button !== 0) return;
      drag = { x: event.clientX, y: event.clientY, vx: view.x, vy: view.y, moved: false };
      canvas.classList.add("dragging");
    });
    window.addEventListener("pointermove", function (event) {
      if (!drag) return;
      var dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 2) drag.moved = true;
      view.x = drag.vx + dx;
      view.y = drag.vy + dy;
      applyView();
    });
    window.addEventListener("pointerup", function () { drag = null; canvas.classList.remove("dragging"); });
    svg.addEventListener("wheel", function (event) {
      event.preventDefault();
      var box = canvas.getBoundingClientRect();
      zoomAt(Math.exp(-event.deltaY * 0.0015), event.clientX - box.left, event.clientY - box.top);
    }, { passive: false });
    search.addEventListener("input", runSearch);
    search.addEventListener("keydown", function (event) {
      if (event.key === "Enter") { event.preventDefault(); nextMatch(event.shiftKey ? -1 : 1); }
      if (event.key === "Escape") { search.value = ""; runSearch(); }
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "/" && document.activeElement !== search) { event.preventDefault(); search.focus(); }
    });
    document.getElementById("fit").addEventListener("click", fit);
    document.getElementById("zoom-in").addEventListener("click", function () {
      var box = canvas.getBoundingClientRect();
      zoomAt(1.25, box.width / 2, box.height / 2);
    });
    document.getElementById("zoom-out").addEventListener("click", function () {
      var box = canvas.getBoundingClientRect();
      zoomAt(0.8, box.width / 2, box.height / 2);
    });
  }

  var defs = make("defs", {}, svg);
  var marker = make("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto"
  }, defs);
  make("path", { d: "M0,0 L10,5 L0,10 z", fill: "#7a7a7a" }, marker);
  svg.appendChild(viewport);
  document.getElementById("title").textContent = data.title;
  drawEdges();
  drawNodes();
  drawLegend();
  wireInput();
  fit();
  document.body.setAttribute("data-ready", "true");
})();
