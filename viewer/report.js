/* tracelink report viewer: the interactions of report.html (no framework, no network).
 *
 * The page shows without script but for the drill-downs (built by drill.js, which comes before this
 * in the page's script); this adds: selecting a source line (highlights the call sites it feeds and
 * the lines fused with it), sorting and filtering the dispatch table, the drill-down panel, and the
 * provenance graph's neighbourhoods, search and collapsible groups. Program text only ever reaches the
 * page through textContent (never innerHTML); the one markup the script parses is a big report's
 * packed templates, the report's own (escaped) markup.
 */
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('tl-data').textContent);
  // G: the graph's adjacency (whole graph) and its views; V: the placement of the view on the page
  // (a big graph opens on its hot subgraph, the full one waits in a template until asked for).
  var G = D.graph;
  var graphSvg = document.getElementById('graph-svg');
  var V = G.views[graphSvg ? graphSvg.getAttribute('data-view') : 'full'];

  function $(selector, root) { return (root || document).querySelector(selector); }
  function $$(selector, root) { return Array.prototype.slice.call((root || document).querySelectorAll(selector)); }

  // The markup builders and number formats drill.js defines for both (numbers as the page's Python writes them).
  var kit = tracelinkDrill(D);
  var h = kit.h, fmtNs = kit.format.ns, pct = kit.format.pct, shortExport = kit.shortExport, filesById = kit.files;
  var chip = kit.chip, badge = kit.badge, lineName = kit.lineName, lineLink = kit.lineLink;

  // Marks: classes added by one kind of selection, removed together.
  function Marks() { this.items = []; }
  Marks.prototype.add = function (node, cls) {
    if (node) { node.classList.add(cls); this.items.push([node, cls]); }
  };
  Marks.prototype.clear = function () {
    this.items.forEach(function (item) { item[0].classList.remove(item[1]); });
    this.items = [];
  };
  var lineMarks = new Marks(), graphMarks = new Marks(), drillMarks = new Marks();

  // Source files and lines ----------------------------------------------------------------------
  function showFile(fileId) {
    $$('.tab').forEach(function (tab) { tab.classList.toggle('on', tab.getAttribute('data-f') === fileId); });
    $$('.file').forEach(function (view) { view.hidden = view.getAttribute('data-f') !== fileId; });
  }
  function lineRow(key) {
    var parts = key.split(':');
    return document.getElementById('L-' + parts[0] + '-' + parts[1]);
  }

  // A big file's lines come as a template (packed with the others in a big report): put in place once the
  // page is interactive, or first when a line is asked for.
  function codePacked() { return document.querySelector('.code.src[data-packed]') !== null; }
  function withCode(then) {
    withTemplates(function () {
      $$('.code.src[data-packed]').forEach(function (slot) {
        var template = document.getElementById('t-code-' + slot.getAttribute('data-packed'));
        if (template) { slot.replaceWith(document.importNode(template.content, true)); template.remove(); }
      });
      then();
    });
  }
  function selectLine(key, scroll) {
    var line = D.lines[key];
    if (!line) { return; }
    if (codePacked()) { withCode(function () { selectLine(key, scroll); }); return; }
    lineMarks.clear();
    var fileId = key.split(':')[0];
    showFile(fileId);
    var row = lineRow(key);
    lineMarks.add(row, 'sel');
    var sites = {};
    line.cs.forEach(function (pair) { sites[pair[0]] = pair[1]; });
    var fused = {};
    Object.keys(sites).forEach(function (index) {
      var tr = document.getElementById('cs-' + index);
      lineMarks.add(tr, 'hl');
      lineMarks.add(tr, { r: 'hl-r', p: 'hl-p', i: 'hl-i' }[sites[index]] || 'hl-p');
      lineMarks.add(graphNode('cs:' + index), 'hl');
      (D.cs[index].ln || []).forEach(function (other) { if (other !== key) { fused[other] = true; } });
    });
    Object.keys(fused).forEach(function (other) { lineMarks.add(lineRow(other), 'fused'); });
    line.ops.forEach(function (op) { lineMarks.add(graphNode(op), 'hl'); });
    lineDetails(key, Object.keys(fused));
    if (scroll && row) { row.scrollIntoView({ block: 'center' }); }
    if (history.replaceState) { history.replaceState(null, '', '#' + (row ? row.id : '')); }
  }

  function lineDetails(key, fused) {
    var box = $('#line-details');
    var line = D.lines[key];
    var file = filesById[key.split(':')[0]];
    box.textContent = '';
    box.appendChild(h('h3', { 'class': 'mono' }, [lineName(key)]));
    box.appendChild(h('div', { 'class': 'muted small mono path' }, [file.path]));
    box.appendChild(h('p', null, [pct(line.s) + ' of dispatch time · ' + fmtNs(line.t) + ' per iteration']));
    var gain = D.gains && D.gains[key];
    if (gain && gain[0] !== null) {
      var interval = gain[1] !== null && gain[2] !== null ? ' (95% CI ' + gain[1].toFixed(2) + '–' + gain[2].toFixed(2) + ')' : ' (several ops: no CI)';
      box.appendChild(h('p', { 'class': 'gain ' + gain[3], id: 'line-gain' }, ['tuned: ' + gain[0].toFixed(2) + '× speedup' + interval]));
    }
    box.appendChild(h('h4', null, ['Dispatches it feeds (' + line.cs.length + ')']));
    if (!line.cs.length) { box.appendChild(h('p', { 'class': 'muted' }, ['None: its ops run in no dispatch (see Audit).'])); }
    var list = h('ul', { 'class': 'list', id: 'line-sites' });
    line.cs.forEach(function (pair) {
      var site = D.cs[pair[0]];
      list.appendChild(h('li', { 'data-cs': String(pair[0]) }, [
        chip(pair[0], pair[1]), ' ', badge(pair[1]), ' ',
        h('span', { 'class': 'mono' }, [shortExport(site.e)]), ' ',
        h('span', { 'class': 'muted num' }, [fmtNs(site.m) + ' · ' + pct(site.s)])
      ]));
    });
    box.appendChild(list);
    box.appendChild(h('h4', null, ['Source ops at this line (' + line.ops.length + ')']));
    var ops = h('ul', { 'class': 'list' });
    line.ops.forEach(function (op) {
      var info = D.ops[op] || { l: op, n: '' };
      ops.appendChild(h('li', null, [
        h('a', { href: '#', 'class': 'opl', 'data-op': op }, [info.l]), ' ',
        h('span', { 'class': 'muted mono' }, [info.n || ''])
      ]));
    });
    box.appendChild(ops);
    if (fused.length) {
      box.appendChild(h('h4', null, ['Fused with (' + fused.length + ' lines)']));
      var others = h('div', { 'class': 'links' });
      fused.slice(0, 60).forEach(function (other) { others.appendChild(lineLink(other)); others.appendChild(document.createTextNode(' ')); });
      if (fused.length > 60) { others.appendChild(h('span', { 'class': 'more' }, ['+' + (fused.length - 60)])); }
      box.appendChild(others);
    }
  }

  function goLine(key) {
    if (codePacked()) { withCode(function () { goLine(key); }); return; }
    var row = lineRow(key);
    selectLine(key, false);
    if (row) { row.scrollIntoView({ block: 'center' }); }
  }
  function goOp(op) {
    var info = D.ops[op];
    if (info && info.ln && info.ln.length) { goLine(info.ln[0]); return; }
    graphSelect(op);
    var node = graphNode(op);
    if (node) { node.scrollIntoView({ block: 'center' }); }
  }

  // Dispatch table ------------------------------------------------------------------------------
  function sortBy(th) {
    var table = th.closest('table');
    var column = Number(th.getAttribute('data-col'));
    var numeric = th.getAttribute('data-sort') === 'num';
    var direction = th.classList.contains('desc') ? 1 : th.classList.contains('asc') ? -1 : (numeric ? -1 : 1);
    $$('th', table).forEach(function (other) { other.classList.remove('asc', 'desc'); });
    th.classList.add(direction === 1 ? 'asc' : 'desc');
    var body = table.tBodies[0];
    var keyed = Array.prototype.map.call(body.rows, function (row, position) {
      var cell = row.cells[column];
      var value = cell ? cell.getAttribute('data-v') : null;
      var key = numeric ? (value === null || value === '' ? -Infinity : parseFloat(value)) : (cell ? cell.textContent.toLowerCase() : '');
      return [key, position, row];
    });
    keyed.sort(function (a, b) { return a[0] < b[0] ? -direction : a[0] > b[0] ? direction : a[1] - b[1]; });
    keyed.forEach(function (item) { body.appendChild(item[2]); });
  }

  function filterDispatches(query) {
    var rows = $$('#dispatch-table tbody tr');
    var needle = query.trim().toLowerCase(), shown = 0;
    rows.forEach(function (row) {
      if (row.tlText === undefined) {  // the row's text and its cells' full values (titles), once
        row.tlText = (row.textContent + ' ' + $$('[title]', row).map(function (c) { return c.getAttribute('title'); }).join(' ')).toLowerCase();
      }
      row.hidden = needle !== '' && row.tlText.indexOf(needle) < 0;
      if (!row.hidden) { shown++; }
    });
    $('#dispatch-count').textContent = shown + ' of ' + rows.length + ' call sites';
  }

  // A big report's templates (drill-downs, executable sources, the full graph) come packed in the
  // data (gzip, base64): unpacked once, when first needed, then used like any other.
  var templatesReady = null;
  function withTemplates(then) {
    if (!D.packed) { then(); return; }
    if (!templatesReady) {
      var bytes = Uint8Array.from(atob(D.packed), function (c) { return c.charCodeAt(0); });
      var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
      templatesReady = new Response(stream).text().then(function (markup) {
        var unpacked = new DOMParser().parseFromString(markup, 'text/html').getElementById('templates');
        var holder = document.getElementById('templates');
        Array.prototype.slice.call(unpacked.children).forEach(function (node) { holder.appendChild(document.adoptNode(node)); });
        D.packed = null;
      });
    }
    templatesReady.then(then);
  }

  // Drill-down panel ----------------------------------------------------------------------------
  function openDrill(index) { withTemplates(function () { showDrill(index); }); }
  function showDrill(index) {
    if (!D.cs[index]) { return; }
    var panel = $('#panel');
    panel.hidden = false;
    panel.setAttribute('data-cs', String(index));
    document.body.classList.add('panel-open');
    var body = $('#panel-body');
    body.textContent = '';
    body.scrollTop = 0;
    body.appendChild(kit.drill(index));
    var slot = $('.exe-slot', body);
    if (slot) {
      var exeId = slot.getAttribute('data-x');
      var source = document.getElementById('t-' + exeId);
      if (source) {
        slot.appendChild(source.content.cloneNode(true));
        markExecutable(slot, index, exeId);
      }
    }
    $('#panel-title').textContent = 'Call site #' + index + ' · ' + shortExport(D.cs[index].e);
    drillMarks.clear();
    drillMarks.add(document.getElementById('cs-' + index), 'open');
  }
  function closeDrill() {
    $('#panel').hidden = true;
    document.body.classList.remove('panel-open');
    drillMarks.clear();
  }
  function markExecutable(slot, index, exeId) {
    var exe = D.exe[exeId];
    var shown = exe && exe.dumped !== null && exe.dumped !== undefined && D.cs[exe.dumped] ? exe.dumped : index;
    var roles = {};
    D.cs[shown].ops.forEach(function (op) { roles[op[0]] = op[1]; });
    var first = null;
    $$('.ln[data-ops]', slot).forEach(function (row) {
      var best = '';
      row.getAttribute('data-ops').split(' ').forEach(function (op) {
        if (roles[op] === 'r') { best = 'r'; } else if (roles[op] === 'p' && best !== 'r') { best = 'p'; }
      });
      row.classList.add(best === 'r' ? 'mr' : best === 'p' ? 'mp' : 'mo');
      if (best === 'r' && !first) { first = row; }
    });
    var box = $('.code', slot);
    if (first && box) { box.scrollTop = Math.max(0, first.offsetTop - box.offsetTop - 60); }
  }

  // Graph ---------------------------------------------------------------------------------------
  var graphNodes = null, graphEdges = null, collapsed = {};
  function graphNode(id) {
    if (!graphNodes) {
      graphNodes = {};
      $$('#graph-svg .node').forEach(function (node) { graphNodes[node.getAttribute('data-id')] = node; });
    }
    return graphNodes[id] || null;
  }
  function edges() {
    if (!graphEdges) { graphEdges = $$('#graph-svg path.edge'); }
    return graphEdges;
  }
  function reach(start, adjacency, seen) {
    var stack = [start];
    while (stack.length) {
      var node = stack.pop();
      (adjacency[node] || []).forEach(function (next) { if (!seen[next]) { seen[next] = true; stack.push(next); } });
    }
  }
  function graphSelect(id) {
    graphMarks.clear();
    var svg = $('#graph-svg');
    if (!id || !graphNode(id)) { svg.classList.remove('focus'); $('#graph-info').textContent = ''; drawMinimap(); return; }
    var seen = {};
    seen[id] = true;
    reach(id, G.succ, seen);
    reach(id, G.pred, seen);
    svg.classList.add('focus');
    Object.keys(seen).forEach(function (node) {
      graphMarks.add(graphNode(node), 'nb');
      var placed = V.nodes[node];
      if (placed && placed[3] && collapsed[placed[3]]) { graphMarks.add($('.grp[data-g="' + placed[3] + '"]'), 'nb'); }
    });
    graphMarks.add(graphNode(id), 'cur');
    edges().forEach(function (edge) {
      if (seen[edge.getAttribute('data-s')] && seen[edge.getAttribute('data-t')]) { graphMarks.add(edge, 'nb'); }
    });
    drawMinimap();
    var info = $('#graph-info');
    info.textContent = '';
    var count = Object.keys(seen).length - 1;
    if (id.indexOf('cs:') === 0) {
      var index = id.slice(3);
      info.appendChild(document.createTextNode('call site #' + index + ' and ' + count + ' connected nodes · '));
      info.appendChild(h('a', { href: '#', 'class': 'chip', 'data-cs': index }, ['open drill-down #' + index]));
    } else if (D.ops[id]) {
      info.appendChild(document.createTextNode(D.ops[id].l + ' · ' + count + ' connected nodes '));
      if (D.ops[id].ln.length) { info.appendChild(h('a', { href: '#', 'class': 'lnk', 'data-k': D.ops[id].ln[0] }, ['show ' + lineName(D.ops[id].ln[0])])); }
    } else {
      info.appendChild(document.createTextNode(id + ' · ' + count + ' connected nodes'));
    }
  }

  function edgePath(x1, y1, x2, y2) {
    var middle = (x1 + x2) / 2;
    return 'M' + x1.toFixed(1) + ',' + y1.toFixed(1) + 'C' + middle.toFixed(1) + ',' + y1.toFixed(1) + ' ' +
      middle.toFixed(1) + ',' + y2.toFixed(1) + ' ' + x2.toFixed(1) + ',' + y2.toFixed(1);
  }
  // Where each group of the shown view sits with the current collapsed set (its shift from the layout
  // and its top); returns the bottom of the groups.
  var groupShift = {}, groupTop = {};
  function placeGroups() {
    var dims = G.dims, y = dims.top;
    V.groups.forEach(function (group) {
      groupShift[group[0]] = y - group[1];
      groupTop[group[0]] = y;
      y += (collapsed[group[0]] ? dims.header : group[2]) + dims.gap;
    });
    return y;
  }
  // [x, y, width, hidden] of a node where the view shows it now; a collapsed group's node is hidden and
  // its edges leave from the group's header.
  function shownBox(id) {
    var placed = V.nodes[id];
    if (!placed) { return null; }
    var group = placed[3];
    if (group && collapsed[group]) { return [placed[0], groupTop[group] + (G.dims.header - G.dims.nodeH) / 2, placed[2], true]; }
    return [placed[0], placed[1] + (group ? groupShift[group] : 0), placed[2], false];
  }
  function relayoutGraph() {
    var dims = G.dims, bottom = placeGroups();
    V.groups.forEach(function (group) {
      var id = group[0], isCollapsed = !!collapsed[id];
      var node = $('.grp[data-g="' + id + '"]');
      node.setAttribute('transform', 'translate(0,' + groupShift[id] + ')');
      node.classList.toggle('collapsed', isCollapsed);
      $('.grp-box', node).setAttribute('height', isCollapsed ? dims.header : group[2]);
      var title = $('.grp-title', node);
      title.textContent = (isCollapsed ? '▸' : '▾') + title.textContent.slice(1);
    });
    edges().forEach(function (edge) {
      var source = shownBox(edge.getAttribute('data-s')), target = shownBox(edge.getAttribute('data-t'));
      if (!source || !target) { return; }
      edge.setAttribute('d', edgePath(source[0] + source[2], source[1] + dims.nodeH / 2, target[0], target[1] + dims.nodeH / 2));
    });
    Object.keys(V.nodes).forEach(function (id) { if (!V.nodes[id][3]) { bottom = Math.max(bottom, V.nodes[id][1] + dims.nodeH + 16); } });
    var svg = $('#graph-svg');
    var box = svg.getAttribute('viewBox').split(' ');
    svg.setAttribute('viewBox', box[0] + ' ' + box[1] + ' ' + box[2] + ' ' + bottom);
    svg.setAttribute('height', String(bottom));
    drawMinimap();
  }
  function setCollapsed(ids, value) {
    ids.forEach(function (id) { collapsed[id] = value; });
    relayoutGraph();
  }

  // Minimap: the whole shown view drawn small beside the graph's scroll box (groups, edges, nodes in
  // their heat colours, a selection's neighbourhood in the accent colour), the visible part framed;
  // clicking or dragging on it scrolls there. A long graph's edges run screens apart; the minimap shows
  // where they land. Its width is fixed and a graph taller than the box is squeezed vertically only, so
  // the four columns stay apart. Drawn from the layout once the graph is first on screen, then on every change.
  var MINIMAP_WIDTH = 120, minimap = null;
  function drawMinimap() {
    var canvas = $('#graph-minimap'), svg = $('#graph-svg'), wrap = $('.graph-wrap');
    if (!minimap || !canvas || !svg) { return; }
    var box = svg.viewBox.baseVal, dims = G.dims;
    var scaleX = MINIMAP_WIDTH / box.width, scaleY = Math.min(scaleX, Math.max(wrap.clientHeight, 100) / box.height);
    var width = MINIMAP_WIDTH, height = Math.max(1, Math.round(box.height * scaleY));
    var ratio = window.devicePixelRatio || 1;
    var base = document.createElement('canvas');
    base.width = Math.round(width * ratio);
    base.height = Math.round(height * ratio);
    var context = base.getContext('2d');
    context.scale(ratio * scaleX, ratio * scaleY);
    var styles = getComputedStyle(document.documentElement), accent = styles.getPropertyValue('--accent').trim();
    var focus = svg.classList.contains('focus'), drawn = 0;
    context.fillStyle = '#eef1f6';
    V.groups.forEach(function (group) {
      context.fillRect(dims.opX - 4, groupTop[group[0]], dims.opW + 8, collapsed[group[0]] ? dims.header : group[2]);
    });
    edges().forEach(function (edge) {
      var source = shownBox(edge.getAttribute('data-s')), target = shownBox(edge.getAttribute('data-t'));
      if (!source || !target) { return; }
      var lit = focus && edge.classList.contains('nb');
      if (focus && !lit) { return; }
      context.strokeStyle = lit ? accent : 'rgba(152,162,179,0.45)';
      context.beginPath();
      context.moveTo(source[0] + source[2], source[1] + dims.nodeH / 2);
      context.lineTo(target[0], target[1] + dims.nodeH / 2);
      context.save();
      context.setTransform(1, 0, 0, 1, 0, 0);  // a one-pixel line whatever the squeeze
      context.lineWidth = ratio;
      context.stroke();
      context.restore();
    });
    Object.keys(V.nodes).forEach(function (id) {
      var shown = shownBox(id), node = graphNode(id);
      if (!shown || shown[3] || !node) { return; }
      var heat = /\bh(\d)\b/.exec($('rect.box', node).getAttribute('class') || '');
      var level = heat ? Number(heat[1]) : 0;
      context.fillStyle = focus ? (node.classList.contains('nb') ? accent : '#d5dae2')
        : level >= 3 ? styles.getPropertyValue('--h' + level).trim() : '#c5ccd6';
      context.fillRect(shown[0], shown[1], shown[2], Math.max(dims.nodeH, 1 / scaleY));
      drawn++;
    });
    minimap = { base: base, scaleX: scaleX, scaleY: scaleY, width: width, height: height };
    canvas.width = base.width;
    canvas.height = base.height;
    canvas.style.width = width + 'px';
    canvas.style.height = height + 'px';
    canvas.setAttribute('data-drawn', String(drawn));
    canvas.setAttribute('data-scale', String(scaleY));
    frameMinimap();
  }
  function frameMinimap() {
    var canvas = $('#graph-minimap'), wrap = $('.graph-wrap');
    if (!minimap || !minimap.base || !canvas) { return; }
    var context = canvas.getContext('2d'), ratio = canvas.width / minimap.width;
    var scaleX = minimap.scaleX * ratio, scaleY = minimap.scaleY * ratio;
    context.setTransform(1, 0, 0, 1, 0, 0);
    context.clearRect(0, 0, canvas.width, canvas.height);
    context.drawImage(minimap.base, 0, 0);
    var x = wrap.scrollLeft * scaleX, y = wrap.scrollTop * scaleY;
    var w = Math.min(wrap.clientWidth * scaleX, canvas.width - x), hgt = wrap.clientHeight * scaleY;
    var accent = getComputedStyle(document.documentElement).getPropertyValue('--accent').trim();
    context.fillStyle = context.strokeStyle = accent;
    context.globalAlpha = 0.12;  // a tint: the nodes under the frame stay visible
    context.fillRect(x, y, w, hgt);
    context.globalAlpha = 1;
    context.lineWidth = 2 * ratio;
    context.strokeRect(x + ratio, y + ratio, Math.max(w - 2 * ratio, 1), Math.max(hgt - 2 * ratio, 1));
  }
  function scrollFromMinimap(event) {
    var canvas = $('#graph-minimap'), wrap = $('.graph-wrap');
    if (!minimap || !minimap.base) { return; }
    var bounds = canvas.getBoundingClientRect();
    wrap.scrollTop = (event.clientY - bounds.top) / minimap.scaleY - wrap.clientHeight / 2;
    wrap.scrollLeft = (event.clientX - bounds.left) / minimap.scaleX - wrap.clientWidth / 2;
  }
  (function startMinimap() {
    var canvas = $('#graph-minimap'), wrap = $('.graph-wrap');
    if (!canvas || !wrap || !V) { return; }
    placeGroups();
    var framing = false;
    wrap.addEventListener('scroll', function () {
      if (framing) { return; }
      framing = true;
      requestAnimationFrame(function () { framing = false; frameMinimap(); });
    });
    canvas.addEventListener('pointerdown', function (event) { canvas.setPointerCapture(event.pointerId); scrollFromMinimap(event); });
    canvas.addEventListener('pointermove', function (event) { if (event.buttons) { scrollFromMinimap(event); } });
    window.addEventListener('resize', function () { drawMinimap(); });
    new IntersectionObserver(function (entries, observer) {
      if (!entries.some(function (entry) { return entry.isIntersecting; })) { return; }
      observer.disconnect();
      minimap = {};
      drawMinimap();
    }).observe(wrap);
  }());

  // Swap the hot subgraph and the full graph; the view not shown is kept aside, unrendered.
  var asideView = null;
  function toggleGraphView(button) { withTemplates(function () { swapGraphView(button); }); }
  function swapGraphView(button) {
    var svg = $('#graph-svg');
    if (!asideView) { asideView = document.getElementById('graph-full-template').content.firstElementChild; }
    var next = asideView;
    asideView = svg;
    graphMarks.clear();
    svg.replaceWith(next);
    graphNodes = null; graphEdges = null; collapsed = {};
    V = G.views[next.getAttribute('data-view')];
    placeGroups();
    drawMinimap();
    button.textContent = button.getAttribute(next.getAttribute('data-view') === 'full' ? 'data-hot' : 'data-full');
    $('#graph-info').textContent = next.getAttribute('data-note');
    var search = $('#graph-search');
    if (search && search.value) { searchGraph(search.value, false); }
  }

  // A node matches by its label, the text it shows (not its tooltip).
  function labelMatches(node, needle) {
    var label = $('text.lb', node);
    return needle !== '' && !!label && label.textContent.toLowerCase().indexOf(needle) >= 0;
  }
  function searchGraph(query, jump) {
    var needle = query.trim().toLowerCase();
    var svg = $('#graph-svg');
    svg.classList.toggle('searching', needle !== '');
    var first = null, count = 0;
    $$('#graph-svg .node').forEach(function (node) {
      var match = labelMatches(node, needle);
      node.classList.toggle('match', match);
      if (match) { count++; if (!first) { first = node; } }
    });
    if (needle === '') { $('#graph-info').textContent = svg.getAttribute('data-note'); }
    if (needle !== '' && svg.getAttribute('data-view') === 'hot') {
      withTemplates(function () {  // how many more the full graph has
        var full = asideView || document.getElementById('graph-full-template').content;
        var elsewhere = $$('.node', full).filter(function (node) { return labelMatches(node, needle); }).length;
        $('#graph-info').textContent = count + ' matching nodes here, ' + elsewhere + ' in the full graph';
      });
    }
    if (jump && first) {
      var placed = V.nodes[first.getAttribute('data-id')];
      if (placed && placed[3] && collapsed[placed[3]]) { setCollapsed([placed[3]], false); }
      first.scrollIntoView({ block: 'center', inline: 'nearest' });
    }
  }

  // Flame graph: zoom into a frame (its ancestors span the width), a dispatch frame opens its drill-down
  var FLAME_CHAR = 6.5;
  function flameZoom(frame) {
    var svg = $('#flame-svg');
    var width = svg.viewBox.baseVal.width;
    var a = Number(frame.getAttribute('data-x0')), b = Number(frame.getAttribute('data-x1'));
    var depth = Number(frame.getAttribute('data-d'));
    $$('g.fr', svg).forEach(function (g) {
      var x0 = Number(g.getAttribute('data-x0')), x1 = Number(g.getAttribute('data-x1'));
      var inside = x0 >= a - 1e-9 && x1 <= b + 1e-9;
      var above = Number(g.getAttribute('data-d')) < depth && x0 <= a + 1e-9 && x1 >= b - 1e-9;
      g.style.display = inside || above ? '' : 'none';
      if (!(inside || above)) { return; }
      var left = above ? 0 : (x0 - a) / (b - a) * width, right = above ? width : (x1 - a) / (b - a) * width;
      var rect = $('rect', g), text = $('text', g), label = g.getAttribute('data-l');
      rect.setAttribute('x', left.toFixed(1));
      rect.setAttribute('width', Math.max(right - left - 0.5, 0.5).toFixed(1));
      text.setAttribute('x', (left + 3).toFixed(1));
      var room = Math.floor((right - left - 6) / FLAME_CHAR);
      text.textContent = label.length <= room ? label : (room > 2 ? label.slice(0, room - 1) + '\u2026' : '');
    });
    svg.setAttribute('data-zoom', frame.getAttribute('data-x0') + ':' + frame.getAttribute('data-x1'));
  }
  function flameClick(frame) {
    if (frame.classList.contains('leaf')) { openDrill(frame.getAttribute('data-cs')); return; }
    flameZoom(frame);
  }

  // Memory: a click on a dispatch of the live-bytes chart says what is live there, by line (its title).
  function showLive(rect) {
    var title = rect.querySelector('title'), shown = document.getElementById('memory-at');
    if (!title || !shown) { return; }
    shown.textContent = title.textContent;
    document.querySelectorAll('#memory-live rect.on').forEach(function (r) { r.classList.remove('on'); });
    rect.classList.add('on');
  }

  // Events --------------------------------------------------------------------------------------
  // Cells of the dispatch table carry no title where it would repeat their text: a cut one gets it on hover.
  document.addEventListener('mouseover', function (event) {
    var cell = event.target instanceof Element ? event.target.closest('#dispatch-table td') : null;
    if (cell && !cell.title && cell.scrollWidth > cell.clientWidth) { cell.title = cell.textContent; }
  });
  document.addEventListener('click', function (event) {
    var target = event.target;
    if (!(target instanceof Element)) { return; }
    var found;
    if ((found = target.closest('#panel-close'))) { closeDrill(); return; }
    if ((found = target.closest('#memory-live rect[data-position]'))) { showLive(found); return; }
    if ((found = target.closest('#flame-svg g.fr'))) { flameClick(found); return; }
    if ((found = target.closest('a.chip[data-cs], rect.d[data-cs], circle.rf[data-cs]'))) {
      event.preventDefault(); openDrill(found.getAttribute('data-cs')); return;
    }
    if ((found = target.closest('a.lnk[data-k]'))) { event.preventDefault(); goLine(found.getAttribute('data-k')); return; }
    if ((found = target.closest('a.opl[data-op]'))) { event.preventDefault(); goOp(found.getAttribute('data-op')); return; }
    if ((found = target.closest('.code.src .ln[data-k]'))) { selectLine(found.getAttribute('data-k'), false); return; }
    if ((found = target.closest('button.tab[data-f]'))) { showFile(found.getAttribute('data-f')); return; }
    if ((found = target.closest('table.sortable th[data-col]'))) { sortBy(found); return; }
    if ((found = target.closest('#dispatch-table tbody tr[data-cs]'))) { openDrill(found.getAttribute('data-cs')); return; }
    if ((found = target.closest('#graph-svg .grp-head'))) {
      var group = found.getAttribute('data-g');
      setCollapsed([group], !collapsed[group]); return;
    }
    if ((found = target.closest('#graph-svg .node'))) { graphSelect(found.getAttribute('data-id')); return; }
    if (target.closest('#graph-svg')) { graphSelect(null); return; }
    if ((found = target.closest('#graph-full'))) { toggleGraphView(found); return; }
    if (target.closest('#graph-collapse')) { setCollapsed(V.groups.map(function (g) { return g[0]; }), true); return; }
    if (target.closest('#graph-expand')) { setCollapsed(V.groups.map(function (g) { return g[0]; }), false); return; }
  });
  document.addEventListener('keydown', function (event) {
    if (event.key === 'Escape') { closeDrill(); return; }
    var target = event.target;
    if (event.key === 'Enter' && target instanceof Element && target.matches('#graph-svg [tabindex], .code.src .ln[data-k]')) {
      target.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    }
  });
  var dispatchFilter = $('#dispatch-filter');
  if (dispatchFilter) { dispatchFilter.addEventListener('input', function () { filterDispatches(dispatchFilter.value); }); }
  var graphSearch = $('#graph-search');
  if (graphSearch) {
    graphSearch.addEventListener('input', function () { searchGraph(graphSearch.value, false); });
    graphSearch.addEventListener('keydown', function (event) { if (event.key === 'Enter') { searchGraph(graphSearch.value, true); } });
  }
  var hash = decodeURIComponent(location.hash || '');
  var match = /^#L-(f\d+)-(\d+)$/.exec(hash);
  if (match && D.lines[match[1] + ':' + match[2]]) { goLine(match[1] + ':' + match[2]); }
  if (codePacked()) {
    addEventListener('load', function () { setTimeout(function () { (window.requestIdleCallback || setTimeout)(function () { withCode(function () {}); }); }); });
  }
  document.body.classList.add('js');
}());
