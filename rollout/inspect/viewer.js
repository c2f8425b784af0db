// agentenvs view: draws the groups embedded as JSON in this page, one at a time.
// Text from the file only ever reaches the page through textContent, never as HTML.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("data").textContent);
  var GROUPS = DATA.groups;
  var PAGE_SIZE = 50;
  // A prompt longer than this many lines is shown folded to a box of them, scrolled to its
  // end (the question and the assistant header), so the first screen reaches a sampled token.
  var PROMPT_LINES = 6;
  var KINDS = { p: "prompt", e: "env", s: "sampled" };
  var state = { page: 0, current: null, list: [] };

  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "text") node.textContent = attrs[k];
        else if (k === "cls") node.className = attrs[k];
        else node.setAttribute(k, attrs[k]);
      });
    }
    (children || []).forEach(function (c) { if (c) node.appendChild(c); });
    return node;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
    return String(v);
  }
  function cell(text, cls) { return el("td", { text: fmt(text), cls: cls || "" }); }
  // One line, the rest on hover: metrics wrapping over several lines pushed the stream off the first screen.
  function metricsCell(text) { return el("td", { text: text, cls: "metrics", title: text }); }
  function numCell(v) { return cell(v, "num"); }
  function headRow(names) { return el("tr", null, names.map(function (n) { return el("th", { text: n }); })); }
  function metricsText(m) {
    return Object.keys(m || {}).map(function (k) { return k + "=" + fmt(m[k]); }).join(" ");
  }

  // ---- summary and controls ---------------------------------------------------------------
  function renderSummary() {
    var s = DATA.summary, box = $("summary");
    var parts = [
      DATA.source ? ["file", DATA.source] : null,
      ["envs", (s.envs || []).join(", ") || "-"],
      ["groups", s.groups + " (" + s.ok + " ok, " + s.failed + " failed)"],
      ["trajectories", s.trajectories],
      ["mean reward", fmt(s.mean_reward)],
      ["advantages", (s.estimators || []).join("; ") || "none stored"],
      ["stop reasons", Object.keys(s.stop_reasons || {}).map(function (k) { return k + ": " + s.stop_reasons[k]; }).join(", ") || "-"],
      s.tool_calls ? ["tool calls", s.tool_calls] : null,
      DATA.tokenizer ? ["decoded with", DATA.tokenizer] : null
    ];
    parts.forEach(function (p) {
      if (!p) return;
      box.appendChild(el("span", null, [el("b", { text: p[0] + " " }), document.createTextNode(String(p[1]))]));
    });
    $("eot").textContent = DATA.eot || "";
  }

  function fillSelect(select, values) {
    values.forEach(function (v) { select.appendChild(el("option", { value: v, text: v })); });
  }

  function setUpControls() {
    var stops = {}, metrics = {};
    GROUPS.forEach(function (g) {
      g.stops.forEach(function (s) { stops[s || "none"] = true; });
      Object.keys(g.metrics).forEach(function (m) { metrics[m] = true; });
    });
    fillSelect($("f-stop"), Object.keys(stops).sort());
    fillSelect($("f-metric"), Object.keys(metrics).sort());
    ["f-status", "f-stop", "f-min", "f-max", "f-metric", "f-key", "sort"].forEach(function (id) {
      $(id).addEventListener(id === "f-key" || id === "f-min" || id === "f-max" ? "input" : "change", function () {
        state.page = 0;
        refresh();
      });
    });
    $("shade").addEventListener("change", function () { if (state.current) renderDetail(state.current); });
    $("hideprompt").addEventListener("change", function (e) { document.body.classList.toggle("hide-prompt", e.target.checked); });
    document.addEventListener("keydown", function (e) {
      if (e.target && /INPUT|SELECT|TEXTAREA/.test(e.target.tagName)) return;
      if (e.key === "j" || e.key === "ArrowDown") { step(1); e.preventDefault(); }
      if (e.key === "k" || e.key === "ArrowUp") { step(-1); e.preventDefault(); }
    });
  }

  // ---- the group list ---------------------------------------------------------------------
  function number(id) { var v = $(id).value; return v === "" ? null : Number(v); }

  function filtered() {
    var status = $("f-status").value, stop = $("f-stop").value, metric = $("f-metric").value;
    var low = number("f-min"), high = number("f-max"), key = $("f-key").value.toLowerCase();
    var list = GROUPS.filter(function (g) {
      if (status && g.status !== status) return false;
      if (stop && g.stops.map(function (s) { return s || "none"; }).indexOf(stop) < 0) return false;
      if (low !== null && !(g.reward !== null && g.reward >= low)) return false;
      if (high !== null && !(g.reward !== null && g.reward <= high)) return false;
      if (key && String(g.key).toLowerCase().indexOf(key) < 0) return false;
      return true;
    });
    var sort = $("sort").value;
    function value(g) {
      if (sort.indexOf("metric") === 0) return metric && metric in g.metrics ? g.metrics[metric] : null;
      return g.reward;
    }
    if (sort !== "index") {
      var sign = /desc$/.test(sort) ? -1 : 1;
      list = list.slice().sort(function (a, b) {
        if (sort === "status") return (a.status === "failed" ? 0 : 1) - (b.status === "failed" ? 0 : 1) || a.i - b.i;
        var x = value(a), y = value(b);
        if (x === null && y === null) return a.i - b.i;
        if (x === null) return 1;  // groups without a value go last either way
        if (y === null) return -1;
        return sign * (x - y) || a.i - b.i;
      });
    }
    return list;
  }

  function renderList() {
    var list = state.list, nav = $("list"), metric = $("f-metric").value;
    var pages = Math.max(1, Math.ceil(list.length / PAGE_SIZE));
    state.page = Math.min(state.page, pages - 1);
    nav.textContent = "";
    var prev = el("button", { id: "prev-page", text: "‹ prev" }), next = el("button", { id: "next-page", text: "next ›" });
    prev.disabled = state.page === 0;
    next.disabled = state.page >= pages - 1;
    prev.addEventListener("click", function () { state.page -= 1; renderList(); });
    next.addEventListener("click", function () { state.page += 1; renderList(); });
    nav.appendChild(el("div", { cls: "pager" }, [
      prev, document.createTextNode(" page " + (state.page + 1) + " of " + pages + " "), next,
      el("span", { id: "shown", cls: "muted", text: " " + list.length + " of " + GROUPS.length + " groups" })
    ]));
    // The metric column only when a metric is chosen: the key needs the room (ALFWorld's
    // keys run to ~90 characters; they wrap, two lines at most, the whole key on hover).
    var table = el("table", null, [headRow(["#", "key", "status", "reward", "per trajectory", "stop"].concat(metric ? [metric] : []))]);
    list.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE).forEach(function (g) {
      var row = el("tr", { cls: "row " + g.status + (state.current === g ? " current" : ""), "data-group": String(g.i) }, [
        numCell(g.i), el("td", { cls: "key" }, [el("div", { text: String(g.key), title: String(g.key) })]),
        el("td", { cls: "status", text: g.status }), el("td", { cls: "num reward", text: fmt(g.reward) }),
        cell(g.rewards.map(fmt).join(" ")), cell(uniq(g.stops).join(", ")),
        metric ? numCell(g.metrics[metric]) : null
      ]);
      row.addEventListener("click", function () { select(g); });
      table.appendChild(row);
    });
    nav.appendChild(table);
  }

  function uniq(items) {
    var seen = {};
    return items.filter(function (x) { x = x || "none"; if (seen[x]) return false; seen[x] = true; return true; })
      .map(function (x) { return x || "none"; });
  }

  function refresh() {
    state.list = filtered();
    renderList();
    if (state.list.length && state.list.indexOf(state.current) < 0) select(state.list[0]);
    if (!state.list.length) {
      state.current = null;
      $("detail").textContent = "";
      $("detail").appendChild(el("p", { cls: "muted", text: GROUPS.length ? "No group matches the filters." : "The file holds no groups." }));
    }
  }

  function step(delta) {
    var at = state.list.indexOf(state.current) + delta;
    if (at >= 0 && at < state.list.length) select(state.list[at]);
  }

  function select(g) {
    state.current = g;
    var at = state.list.indexOf(g);
    if (at >= 0) state.page = Math.floor(at / PAGE_SIZE);
    renderList();
    renderDetail(g);
    if (history.replaceState) history.replaceState(null, "", "#g" + g.i);
  }

  // ---- one group ----------------------------------------------------------------------------
  function estimatorText(est) {
    if (!est || !est.estimator) return "no advantages stored";
    return est.estimator + (est.normalize_std ? ", std-normalised" : "");
  }

  function renderDetail(g) {
    var box = $("detail");
    box.textContent = "";
    box.className = g.status;
    box.dataset.group = String(g.i);
    box.appendChild(el("h2", null, [
      document.createTextNode("group " + g.i + " "),
      // The task only when the key does not already end with it (keys are "index:task").
      el("span", { cls: "muted", text: "key " + g.key + (String(g.key).endsWith(":" + g.task) ? "" : " · task " + g.task) + " · " + g.env }),
      document.createTextNode(" [" + g.status + "]")
    ]));
    box.appendChild(el("div", { cls: "stats" }, [
      el("span", { text: "attempts " + g.attempts }),
      g.reward !== null ? el("span", { text: "mean reward " + fmt(g.reward) }) : null,
      el("span", { text: "advantages: " + estimatorText(g.est) }),
      g.tags.length ? el("span", { text: "tags " + g.tags.join(", ") }) : null
    ]));
    if (g.error) box.appendChild(el("pre", { cls: "error", text: g.error }));
    if (g.traceback) {
      box.appendChild(el("details", { cls: "traceback", open: "" }, [
        el("summary", { text: "traceback of the last attempt" }), el("pre", { cls: "error", text: g.traceback })
      ]));
    }
    var leaves = g.tree && g.tree.leaves ? g.tree.leaves : null;
    if (g.tree) box.appendChild(treeSection(g));
    if (g.trajs.length) {
      var names = ["trajectory", "total reward", "step rewards", "group reward", "advantage", "stop reason", "turns", "sampled tok", "masked tok", "samples", "group metrics"];
      var table = el("table", { cls: "trajectories" }, [headRow(leaves ? names.concat(["forked from", "at turn"]) : names)]);
      g.trajs.forEach(function (t, i) {
        var cells = [numCell(i), numCell(t.reward), numCell(t.step), numCell(t.group), numCell(t.adv), cell(t.stop), numCell(t.turns.length), numCell(t.sampled), numCell(t.masked), numCell(t.samples), metricsCell(metricsText(g.gm[i]))];
        if (leaves) cells.push(numCell(leaves[i].parent), numCell(viewerTurn(leaves[i].branch_turn)));
        table.appendChild(el("tr", null, cells));
      });
      box.appendChild(table);
    }
    g.trajs.forEach(function (t, i) {
      var summary = "trajectory " + i + " · reward " + fmt(t.reward) + " · advantage " + fmt(t.adv) + " · " + (t.stop || "no stop reason") + " · " + t.turns.length + " turn(s)" + (t.tools ? " · " + t.tools : "");
      if (leaves && leaves[i].parent !== null && leaves[i].parent !== undefined) {
        summary += " · forked from trajectory " + leaves[i].parent + " at turn " + viewerTurn(leaves[i].branch_turn);
      }
      var details = el("details", { cls: "traj", id: "g" + g.i + "t" + i }, [el("summary", { text: summary })]);
      var drawn = false;
      function draw() {
        if (drawn || !details.open) return;
        drawn = true;
        details.appendChild(stream(t, leaves ? leaves[i].branch_turns.map(viewerTurn) : []));
        details.appendChild(turnTable(t));
        scrollFoldsToEnd(details);
      }
      details.addEventListener("toggle", draw);
      box.appendChild(details);
      if (i === 0) { details.open = true; draw(); }
    });
    var json = { provenance: DATA.shared[g.prov], env_config: DATA.shared[g.config], extra: DATA.shared[g.extra] };
    box.appendChild(el("details", null, [el("summary", { cls: "muted", text: "provenance and config" }), el("pre", { cls: "json", text: JSON.stringify(json, null, 2) })]));
  }

  // ---- a tree rollout's tree -----------------------------------------------------------------
  // The record counts turns from 1 (branch_turn); the streams and turn tables count from 0.
  function viewerTurn(recordTurn) { return recordTurn === null || recordTurn === undefined ? null : recordTurn - 1; }
  function signed(v) { return v === null || v === undefined ? "-" : (v > 0 ? "+" : "") + fmt(v); }

  function showLeaf(g, j) {
    var details = document.getElementById("g" + g.i + "t" + j);
    if (!details) return;
    Array.prototype.forEach.call(document.querySelectorAll("#detail details.traj.focus"), function (d) { d.classList.remove("focus"); });
    details.classList.add("focus");
    details.open = true;
    details.dispatchEvent(new Event("toggle"));
    $("detail").dataset.leaf = String(j);
    if (details.scrollIntoView) details.scrollIntoView({ block: "start" });
  }

  function leafButton(g, j) {
    var button = el("button", { cls: "leaf-link", "data-leaf": String(j), text: "trajectory " + j });
    button.addEventListener("click", function () { showLeaf(g, j); });
    return button;
  }

  function leafLine(g, j) {
    var info = g.tree.leaves[j];
    var line = el("span", { cls: "leaf", "data-leaf": String(j) }, [document.createTextNode(" → "), leafButton(g, j), document.createTextNode(" reward " + fmt(g.rewards[j]))]);
    if (info.parent !== null && info.parent !== undefined) {
      line.appendChild(document.createTextNode(" · forked from "));
      var parent = leafButton(g, info.parent);
      parent.classList.add("parent-link");
      line.appendChild(parent);
      line.appendChild(document.createTextNode(" at turn " + viewerTurn(info.branch_turn)));
    }
    return line;
  }

  function nodeItem(g, node, label) {
    var nodes = g.tree.nodes;
    var item = el("li", { cls: "node", "data-node": String(node.id) }, [
      el("span", { cls: "node-head" }, [el("b", { text: label }), el("span", { cls: "value", text: " · value " + fmt(node.value) + (node.gain === null ? "" : " (gain " + signed(node.gain) + ")") + " · " + node.leaves + (node.leaves === 1 ? " leaf" : " leaves") })])
    ]);
    if (node.leaf !== null) item.appendChild(leafLine(g, node.leaf));
    if (node.children.length) {
      item.appendChild(el("div", { cls: "branch-point", "data-turn": String(viewerTurn(node.turn)), text: "branch point at turn " + viewerTurn(node.turn) + (node.trigger ? " (" + node.trigger + ")" : "") + ": " + node.children.length + " branches" }));
      item.appendChild(el("ul", null, node.children.map(function (id) {
        var child = nodes[id];
        return nodeItem(g, child, "branch " + child.path[child.path.length - 1]);
      })));
    }
    return item;
  }

  function treeSection(g) {
    var tree = g.tree, section = el("section", { cls: "tree" });
    if (tree.note) {
      section.appendChild(el("p", { cls: "error", text: tree.note }));
      return section;
    }
    section.appendChild(el("h3", { text: "tree: " + tree.roots.length + " root(s), " + tree.branch_points + " branch point(s), " + tree.leaves.length + " leaves" }));
    section.appendChild(el("p", { cls: "muted", text: "value: mean reward of the leaves under a node; gain: its value minus its parent's, what taking that branch gained over the siblings' mean (the tree_segment advantage). Turns are numbered as in the streams below." }));
    section.appendChild(el("ul", { cls: "tree-roots" }, tree.roots.map(function (id) {
      return nodeItem(g, tree.nodes[id], "root " + tree.nodes[id].root);
    })));
    return section;
  }

  function shadeFor(lp) {
    var p = Math.exp(lp);  // certain tokens stay green; unlikely ones turn red
    return "hsl(" + Math.round(120 * p) + ", 70%, 82%)";
  }

  function lineCount(text) { return text.split("\n").length; }

  function foldToggle(seg, lines, tokens) {
    var button = el("button", { cls: "fold-toggle", text: "prompt: " + tokens + " tokens, " + lines + " lines; show all" });
    button.addEventListener("click", function () {
      var folded = seg.classList.toggle("folded");
      button.textContent = "prompt: " + tokens + " tokens, " + lines + " lines; " + (folded ? "show all" : "fold");
      if (folded) seg.scrollTop = seg.scrollHeight;
    });
    return button;
  }

  function scrollFoldsToEnd(root) {
    Array.prototype.forEach.call(root.querySelectorAll(".seg.folded"), function (seg) { seg.scrollTop = seg.scrollHeight; });
  }

  function stream(t, branchTurns) {
    var pre = el("pre", { cls: "stream" }), shade = $("shade").checked, lastTurn = null;
    t.spans.forEach(function (span) {
      if (span.restart) pre.appendChild(el("span", { cls: "restart", text: "new training sample: the template did not extend the conversation" }));
      if (span.turn !== undefined && span.turn !== lastTurn) {
        pre.appendChild(el("span", { cls: "turn", text: "turn " + span.turn }));
        lastTurn = span.turn;
      }
      // Siblings share everything up to here (the turn's observation); their actions differ.
      if (span.k === "s" && branchTurns.indexOf(span.turn) >= 0) pre.appendChild(el("span", { cls: "turn branch", text: "branch point: siblings differ from here" }));
      var seg = el("span", { cls: "seg " + KINDS[span.k] });
      var lines = span.k === "p" ? lineCount(span.t) : 0;
      if (lines > PROMPT_LINES) {
        seg.classList.add("folded");
        pre.appendChild(foldToggle(seg, lines, span.ids.length));
      }
      var start = 0, token = 0, special = {}, pictures = {}, skipTo = -1;
      (span.sp || []).forEach(function (i) { special[i] = true; });
      (span.img || []).forEach(function (m) { pictures[m[0]] = m; });
      span.e.forEach(function (end, i) {
        var count = span.n ? span.n[i] : 1;
        if (pictures[token] || token < skipTo) {  // an image: drawn once where its run starts
          if (pictures[token]) { seg.appendChild(picture(pictures[token])); skipTo = token + pictures[token][1]; }
          start = end;
          token += count;
          return;
        }
        var piece = el("span", { text: span.t.slice(start, end) });
        piece.dataset.first = String(token);
        piece.dataset.count = String(count);
        if (special[i]) piece.className = "sp";
        if (span.lp && span.k === "s") {
          var low = null;
          for (var j = token; j < token + count; j++) if (span.lp[j] !== null && (low === null || span.lp[j] < low)) low = span.lp[j];
          if (low !== null) {
            piece.dataset.lp = String(low);
            if (shade) piece.style.background = shadeFor(low);
          }
        }
        seg.appendChild(piece);
        start = end;
        token += count;
      });
      seg.spanData = span;
      pre.appendChild(seg);
    });
    pre.addEventListener("mouseover", function (e) {
      var piece = e.target, span = piece.parentNode && piece.parentNode.spanData;
      if (!span || piece.title) return;
      var first = Number(piece.dataset.first), count = Number(piece.dataset.count), lines = [];
      for (var j = first; j < first + count; j++) {
        var lp = span.lp ? span.lp[j] : null;
        lines.push("id " + span.ids[j] + (lp === null || lp === undefined ? "" : "  logprob " + lp.toFixed(4)));
      }
      piece.title = lines.join("\n");
    });
    return pre;
  }

  function picture(m) {
    var image = (DATA.images || [])[m[2]] || {}, label = m[1] + " image tokens, pixels " + String(image.sha256).slice(0, 12);
    if (!image.src) return el("span", { cls: "obs-image missing", text: "[image not stored: " + label + "]" });
    return el("img", { cls: "obs-image", src: image.src, alt: label, title: label });
  }

  function turnTable(t) {
    var table = el("table", { cls: "turns" }, [headRow(["turn", "action tok", "obs tok", "sampler stop", "mean logprob", "reward", "metrics"])]);
    t.turns.forEach(function (row) {
      table.appendChild(el("tr", null, [numCell(row[0]), numCell(row[1]), cell(row[2] + (row[6] ? " (restart)" : ""), "num"), cell(row[3]), numCell(row[7]), numCell(row[4]), cell(metricsText(row[5]))]));
    });
    return table;
  }

  // ---- start ----------------------------------------------------------------------------------
  renderSummary();
  setUpControls();
  refresh();
  var wanted = /^#g(\d+)/.exec(location.hash);
  if (wanted) {
    var found = GROUPS.filter(function (g) { return g.i === Number(wanted[1]); })[0];
    if (found) select(found);
  }
  document.body.dataset.ready = "1";
})();
