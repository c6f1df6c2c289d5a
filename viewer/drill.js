/* tracelink report viewer, first part: a call site's drill-down, and what report.js builds its own
 * markup with (h(), chips, role badges, line links, numbers).
 *
 * A drill-down is built when it is opened, from the page's data (tracelink/report/viewer_contract.py:
 * the call site's record in `cs` with its texts in `tx`, its export's in `ex`, its executable's in
 * `exe`, its ops' in `ops`): building them all in the page was most of a big report's elements and of
 * its build time. It shows what the page's Python would write: numbers as tracelink/report/fmt.py
 * formats them, the charts of tracelink/report/svg.py. A hook profile's workgroups and the executable
 * source are templates of the page, added to it. Program text only reaches the page through
 * textContent and attribute values. Loaded before report.js, in the same script element:
 * tracelinkDrill(data) gives report.js its kit.
 */
function tracelinkDrill(D) {
  'use strict';
  var SVG_NS = 'http://www.w3.org/2000/svg';
  var ROLE = { r: 'root', p: 'producer', i: 'init', a: 'absorbed' };
  var filesById = {};
  D.files.forEach(function (file) { filesById[file.id] = file; });

  // h('a', {class: 'chip'}, ['text', child]): an element whose text is set safely (null attributes left out).
  function fill(node, attrs, children) {
    Object.keys(attrs || {}).forEach(function (key) {
      if (attrs[key] !== null && attrs[key] !== undefined) { node.setAttribute(key, attrs[key]); }
    });
    (children || []).forEach(function (child) {
      node.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
    });
    return node;
  }
  function h(tag, attrs, children) { return fill(document.createElement(tag), attrs, children); }
  function svg(tag, attrs, children) { return fill(document.createElementNS(SVG_NS, tag), attrs, children); }

  // Numbers as Python formats them (format(x, '.2f'), format(x, '.3g')): the exact value rounded half
  // to even. toFixed and toPrecision round ties up (1.125 → "1.13", Python "1.12") and toPrecision keeps
  // trailing zeros ("1.50", Python "1.5").
  function exactDigits(x) {  // |x| (finite, not 0) = digits × 10^power; 101 digits hold the values a report has
    var text = Math.abs(x).toExponential(100), e = text.indexOf('e');
    return { digits: text[0] + text.slice(2, e), power: Number(text.slice(e + 1)) - 100 };
  }
  function increment(digits) {
    var i = digits.length - 1;
    while (i >= 0 && digits[i] === '9') { i--; }
    return i < 0 ? '1' + '0'.repeat(digits.length) : digits.slice(0, i) + (Number(digits[i]) + 1) + '0'.repeat(digits.length - i - 1);
  }
  function dropDigits(digits, drop) {  // the integer `digits` without its last `drop` digits, rounded half to even
    if (drop <= 0) { return digits + '0'.repeat(-drop); }
    if (drop >= digits.length) { digits = '0'.repeat(drop - digits.length + 1) + digits; }
    var kept = digits.slice(0, digits.length - drop), rest = digits.slice(digits.length - drop);
    var half = '5' + '0'.repeat(drop - 1);
    return rest > half || (rest === half && Number(kept[kept.length - 1]) % 2 === 1) ? increment(kept) : kept;
  }
  function fixed(x, places) {  // format(x, '.<places>f')
    var sign = x < 0 || Object.is(x, -0) ? '-' : '';
    var exact = x === 0 ? null : exactDigits(x);
    var n = (exact ? dropDigits(exact.digits, -places - exact.power) : '0').replace(/^0+/, '');
    n = '0'.repeat(Math.max(places + 1 - n.length, 0)) + n;
    return sign + (places ? n.slice(0, n.length - places) + '.' + n.slice(n.length - places) : n);
  }
  function general(x, precision) {  // format(x, '.<precision>g')
    if (x === 0) { return Object.is(x, -0) ? '-0' : '0'; }
    var exact = exactDigits(x), kept = dropDigits(exact.digits, exact.digits.length - precision);
    var exponent = exact.power + exact.digits.length - 1 + (kept.length > precision ? 1 : 0);
    kept = kept.slice(0, precision);
    var sign = x < 0 ? '-' : '', whole, fraction;
    if (exponent < -4 || exponent >= precision) {
      fraction = kept.slice(1).replace(/0+$/, '');
      var power = Math.abs(exponent);
      return sign + kept[0] + (fraction ? '.' + fraction : '') + 'e' + (exponent < 0 ? '-' : '+') + (power < 10 ? '0' : '') + power;
    }
    whole = exponent >= 0 ? kept.slice(0, exponent + 1) : '0';
    fraction = (exponent >= 0 ? kept.slice(exponent + 1) : '0'.repeat(-exponent - 1) + kept).replace(/0+$/, '');
    return sign + whole + (fraction ? '.' + fraction : '');
  }
  function missing(value) { return value === null || value === undefined || Number.isNaN(value); }
  function ns(value) {  // fmt.ns
    if (missing(value)) { return '–'; }
    var units = [[1e9, 's'], [1e6, 'ms'], [1e3, 'µs']];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(value) >= units[i][0]) {
        var scaled = value / units[i][0];
        return (scaled < 100 ? general(scaled, 3) : fixed(scaled, 0)) + ' ' + units[i][1];
      }
    }
    return fixed(value, 0) + ' ns';
  }
  function pct(value) {  // fmt.pct
    if (missing(value)) { return '–'; }
    if (value === 0) { return '0%'; }
    return value >= 0.001 ? fixed(value * 100, 1) + '%' : '<0.1%';
  }
  function rate(value, unit) {  // fmt.rate
    return missing(value) || !isFinite(value) ? '–' : general(value, 3) + ' ' + unit;
  }
  function heat(share) {  // fmt.heat
    return !share || share <= 0 ? 0 : Math.max(1, Math.min(6, Math.ceil(Math.sqrt(Math.min(share, 1)) * 6)));
  }

  // Pieces of markup the page's Python writes too (widgets.py, cells.py) -----------------------------
  function shortExport(name) {
    var at = name.indexOf('dispatch_');
    return at > 0 ? name.slice(at) : name;
  }
  function roleName(code) { return ROLE[code] || code; }  // a role without a code keeps its name
  function chip(index, role) {
    return h('a', { href: '#', 'class': 'chip' + (role ? ' ' + roleName(role) : ''), 'data-cs': String(index),
      title: 'call site #' + index + (role ? ' (' + roleName(role) + ')' : '') }, ['#' + index]);
  }
  function badge(role) { return h('span', { 'class': 'role ' + roleName(role) }, [roleName(role)]); }
  function lineName(key) {
    var parts = key.split(':');
    return filesById[parts[0]].name + ':' + parts[1];
  }
  function lineLink(key) {
    return h('a', { href: '#', 'class': 'lnk', 'data-k': key, title: filesById[key.split(':')[0]].path }, [lineName(key)]);
  }
  function bar(share) {
    var width = Math.min(Math.max(share || 0, 0), 1) * 100;
    return h('span', { 'class': 'heat h' + heat(share), style: '--w:' + fixed(width, 1) + '%' }, [pct(share)]);
  }
  function card(value, label) {
    return h('div', { 'class': 'card' }, [h('div', { 'class': 'big' }, [value]), h('div', { 'class': 'muted' }, [label])]);
  }
  function cards(items) {
    return h('div', { 'class': 'cards small' }, items.map(function (item) { return card(item[0], item[1]); }));
  }
  function verdictBadge(verdict) {
    return h('span', { 'class': 'bound ' + (verdict.split('-')[0] || 'none') }, [verdict ? verdict.replace(/-bound$/, '') : '–']);
  }

  // The drill-down -------------------------------------------------------------------------------------
  function drill(index) {
    var site = D.cs[index], ex = D.ex[site.e], exe = ex.x !== null ? D.exe[ex.x] : null;
    var box = h('div', { 'class': 'drill', 'data-cs': String(index) }, [h('h3', null, ['Call site #' + index])]);
    box.appendChild(facts(site, ex, exe));
    box.appendChild(timingCards(site));
    whyBlock(box, site.c);
    sourceOps(box, site);
    box.appendChild(h('div', { 'class': 'charts' }, [
      h('figure', null, [histogram(site.h), h('figcaption', null, ['execution times'])]),
      h('figure', null, [perIteration(site.it), h('figcaption', null, ['time per iteration (run order)'])])
    ]));
    var workgroups = document.getElementById('t-wg-' + index);
    if (workgroups) { box.appendChild(workgroups.content.cloneNode(true)); }
    executableNote(box, Number(index), ex.x, exe);
    return box;
  }

  function facts(site, ex, exe) {
    var where = site.f;  // SiteFacts: loc, root_op, phase, workgroups, workgroup_count
    var list = h('dl', { 'class': 'kv' });
    [['export', site.e], ['executable', exe ? exe.name : ''], ['source', D.tx[where[0]]], ['root op', where[1]], ['shapes', ex.sh],
      ['workgroups', where[3] + ' (' + where[4] + ' workgroups)'], ['workgroup size', ex.ws], ['lowering config', ex.lc],
      ['phase', where[2] === 'run' ? 'run (each call)' : where[2] + ' (runs once, at load: not timed)'],
      ['dumped source', ex.src ? 'artifacts/' + ex.src : ''], ['target code', ex.tgt ? 'artifacts/' + ex.tgt : '']
    ].forEach(function (fact) {
      if (!fact[1]) { return; }
      list.appendChild(h('dt', null, [fact[0]]));
      list.appendChild(h('dd', { 'class': fact[0] === 'phase' || fact[0] === 'workgroups' ? null : 'mono' }, [fact[1]]));
    });
    if (exe && exe.cs.length > 1) {
      var shared = h('dd');
      exe.cs.slice(0, 24).forEach(function (other) { shared.appendChild(chip(other)); });
      if (exe.cs.length > 24) { shared.appendChild(h('span', { 'class': 'more' }, ['+' + (exe.cs.length - 24)])); }
      list.appendChild(h('dt', null, ['shared by']));
      list.appendChild(shared);
    }
    return list;
  }

  function timingCards(site) {
    var t = site.t;  // SiteTimes: count, total, median, p10, p90, ci_low, ci_high, tiles, tile_ns
    var busy = t[8] && site.m ? t[8] / site.m : null;
    var shown = [
      [String(t[0]), 'executions'], [ns(site.m), 'mean'], [ns(t[2]), 'p50'], [ns(t[3]) + ' – ' + ns(t[4]), 'p10 – p90'],
      [ns(t[5]) + ' – ' + ns(t[6]), '95% CI of the mean'], [ns(t[1]), 'total'], [pct(site.s), 'of dispatch time'],
      [t[7] !== null ? fixed(t[7], 0) + ' / ' + site.f[4] : '–', 'tiles run / workgroups'],
      [busy !== null ? fixed(busy, 2) : '–', 'busy cores (tile time ÷ wall)']
    ];
    var counters = site.k || {};
    Object.keys(counters).forEach(function (name) { shown.push([counters[name] !== null ? general(counters[name], 4) : '–', name]); });
    return cards(shown);
  }

  function whyBlock(box, cost) {
    box.appendChild(h('h4', null, ['Why it takes this long']));
    if (!cost) {
      box.appendChild(h('p', { 'class': 'muted' }, ['No verdict: the call site was not timed, or its dispatch region (and so its cost model) was not found.']));
      return;
    }
    // SiteCost: verdict, next_step, lower_bound, flops, bytes, intensity, gflops_s, flops_peak_share, gbytes_s, bandwidth_peak_share
    var bound = cost[2] ? '≥' : '';  // FLOPs and bytes are lower bounds: so are the rates
    var count = function (value) { return missing(value) ? '–' : general(value, 4); };
    box.appendChild(h('p', { 'class': 'why' }, [verdictBadge(cost[0]), ' next step: ' + D.tx[cost[1]]]));
    box.appendChild(cards([
      [bound + count(cost[3]), 'FLOPs per execution'], [bound + count(cost[4]), 'bytes moved (compulsory)'],
      [rate(cost[5], 'FLOP/B'), 'arithmetic intensity'],
      [bound + rate(cost[6], 'GFLOP/s') + ' (' + bound + pct(cost[7]) + ')', 'achieved (of compute peak)'],
      [bound + rate(cost[8], 'GB/s') + ' (' + bound + pct(cost[9]) + ')', 'achieved (of bandwidth)']
    ]));
  }

  function sourceOps(box, site) {
    box.appendChild(h('h4', null, ['Source ops']));
    var body = h('tbody');
    var head = ['role', 'op', 'op names', 'share of this dispatch', 'lines'].map(function (label) { return h('th', null, [label]); });
    box.appendChild(h('table', { 'class': 'grid ops-table' }, [h('thead', null, [h('tr', null, head)]), body]));
    site.ops.forEach(function (entry) {  // SiteOp: op, role, share
      var op = entry[0], info = D.ops[op];
      var lines = h('td', { 'class': 'mono' });
      (info ? info.ln : []).slice(0, 6).forEach(function (key) { lines.appendChild(lineLink(key)); lines.appendChild(h('br')); });
      body.appendChild(h('tr', { 'data-op': op }, [
        h('td', null, [badge(entry[1])]),
        h('td', { 'class': 'mono' }, [
          h('a', { href: '#', 'class': 'opl', 'data-op': op, title: info ? info.l : op }, [info ? info.nm : op]),
          h('div', { 'class': 'muted small' }, [info ? info.l : ''])
        ]),
        h('td', { 'class': 'mono' }, [info ? info.n : '']),
        h('td', null, [bar(entry[2])]),
        lines
      ]));
    });
    if (!site.ops.length) { box.appendChild(h('p', { 'class': 'muted' }, ["No source op: the dispatch's location is unknown."])); }
  }

  function executableNote(box, index, exeId, exe) {
    box.appendChild(h('h4', null, ['Executable source']));
    if (!exe || !exe.source) {
      box.appendChild(h('p', { 'class': 'muted' }, ["The executable's dumped source is not in the profile directory."]));
      return;
    }
    var note = 'Locations removed for reading; each marked line names the source op its op came from — root op, fused producer, or another op (e.g. an input\'s producer).';
    if (exe.cs.length > 1 && exe.dumped !== null && exe.dumped !== index) {
      note += ' This executable is shared by ' + exe.cs.length + ' call sites; IREE dumps it once, with the locations of call site #' + exe.dumped + '.';
    }
    box.appendChild(h('p', { 'class': 'note' }, [note]));
    box.appendChild(h('div', { 'class': 'exe-slot', 'data-x': exeId }));  // report.js puts the executable's template here
  }

  // Charts: 400 × 150, as tracelink/report/svg.py draws them ----------------------------------------
  var LEFT = 54, TOP = 16, PLOT_W = 336, PLOT_H = 106, BELOW = 142;
  function chart(label, empty) {
    var root = svg('svg', { viewBox: '0 0 400 150', width: '400', height: '150', role: 'img', 'aria-label': label, 'class': 'chart' });
    if (empty) { root.appendChild(svg('text', { x: 200, y: 75, 'text-anchor': 'middle', 'class': 'muted' }, [empty])); }
    return root;
  }
  function axis() { return svg('line', { x1: LEFT, y1: TOP + PLOT_H, x2: LEFT + PLOT_W, y2: TOP + PLOT_H, 'class': 'axis' }); }
  function tick(x, y, anchor, text, cls) { return svg('text', { x: x, y: y, 'text-anchor': anchor, 'class': cls || 'tick' }, [text]); }
  function barRect(x, height, width, title, count) {
    return svg('rect', { x: fixed(x, 1), y: fixed(TOP + PLOT_H - height, 1), width: fixed(width, 1), height: fixed(height, 1), 'class': 'hb',
      'data-n': count }, [svg('title', null, [title])]);
  }

  function histogram(bins) {  // Histogram: low, high, median, counts (numpy's equal bins)
    if (!bins) { return chart('histogram of execution times', 'no executions recorded'); }
    var root = chart('histogram of execution times'), low = bins[0], high = bins[1], median = bins[2], counts = bins[3];
    var peak = Math.max(Math.max.apply(null, counts), 1), width = PLOT_W / counts.length, step = (high - low) / counts.length;
    var edge = function (i) { return i === counts.length ? high : i * step + low; };  // as numpy.linspace computes them
    root.appendChild(axis());
    counts.forEach(function (count, i) {
      if (!count) { return; }
      var title = ns(edge(i)) + ' – ' + ns(edge(i + 1)) + ': ' + count + ' execution' + (count !== 1 ? 's' : '');
      root.appendChild(barRect(LEFT + i * width + 0.5, PLOT_H * count / peak, Math.max(width - 1, 1), title, count));
    });
    root.appendChild(tick(LEFT, BELOW, 'start', ns(low)));
    root.appendChild(tick(LEFT + PLOT_W, BELOW, 'end', ns(high)));
    var x = LEFT + PLOT_W * (median - low) / (high - low), before = x < LEFT + PLOT_W * 0.7;
    root.appendChild(svg('line', { x1: fixed(x, 1), y1: TOP, x2: fixed(x, 1), y2: TOP + PLOT_H, 'class': 'marker' }));
    root.appendChild(tick(fixed(x + (before ? 4 : -4), 1), TOP + 10, before ? 'start' : 'end', 'p50 ' + ns(median), 'tick strong'));
    root.appendChild(tick(LEFT - 4, TOP + 8, 'end', String(peak)));
    root.appendChild(tick(LEFT - 4, TOP + PLOT_H, 'end', '0'));
    return root;
  }

  function perIteration(series) {  // Iterations: count, bars of [first, last, mean]
    if (!series) { return chart('time per iteration', 'no iterations recorded'); }
    var root = chart('time per iteration'), count = series[0], bars = series[1];
    var peak = Math.max.apply(null, bars.map(function (b) { return b[2]; })) || 1, step = PLOT_W / bars.length;
    root.appendChild(axis());
    bars.forEach(function (b, position) {
      var title = b[0] === b[1] ? 'iteration ' + b[0] + ': ' + ns(b[2]) : 'iterations ' + b[0] + '–' + b[1] + ': ' + ns(b[2]) + ' on average';
      root.appendChild(barRect(LEFT + position * step + 0.5, Math.max(PLOT_H * b[2] / peak, 1), Math.max(step - 1.5, 1), title, null));
    });
    root.appendChild(tick(LEFT, BELOW, null, 'iteration ' + bars[0][0]));
    if (bars.length < count) { root.appendChild(tick(LEFT + PLOT_W / 2, BELOW, 'middle', 'mean of every ' + Math.floor(count / bars.length) + '+')); }
    root.appendChild(tick(LEFT + PLOT_W, BELOW, 'end', String(bars[bars.length - 1][1])));
    root.appendChild(tick(LEFT - 4, TOP + 8, 'end', ns(peak)));
    root.appendChild(tick(LEFT - 4, TOP + PLOT_H, 'end', '0'));
    return root;
  }

  return {
    drill: drill, h: h, files: filesById, shortExport: shortExport, chip: chip, badge: badge, lineName: lineName, lineLink: lineLink,
    format: { ns: ns, pct: pct, rate: rate, fixed: fixed, general: general }  // all of them for the tests, which check them against fmt.py
  };
}
