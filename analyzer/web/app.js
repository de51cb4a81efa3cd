// The redrive analyzer dashboard: plain JavaScript, no build step. It reads
// GET api/stats, GET api/pipelines (the flow, the processors' lines and callbacks),
// GET api/control (every replica, the operator's pause) and GET api/deadletters
// every 5 seconds and posts api/replay, api/control/{pipeline}/pause|resume (and,
// under redrive dev, api/dev/outage). Everything from the API is put into the page as text
// (textContent, never innerHTML): dead letters carry whatever producers
// wrote. When the analyzer has a token (analyzer.token or
// analyzer.read_token), the API answers 401: the page asks for the token
// once, keeps it in sessionStorage (this tab, until it is closed), sends it
// as "Authorization: Bearer" with every call, and asks again on a 401.
"use strict";

(function () {
  const REFRESH_MS = 5000;
  const DEADLETTERS_LIMIT = 50;
  const TOKEN_KEY = "redrive.analyzer.token"; // the token the page was given: every call
  const REPLAY_TOKEN_KEY = "redrive.analyzer.replay-token"; // the replay form's, when another
  const CHART_HEIGHT = 220;
  const VALUE_PREVIEW = 4096; // characters of a value shown in the details

  const state = {
    stats: null, // the last GET api/stats
    flows: null, // the last GET api/pipelines
    control: null, // the last GET api/control
    selected: "", // the pipeline shown in detail
    filters: {}, // the dead-letter filters last submitted
    open: new Set(), // expanded dead letters, by topic/partition/offset
    chart: null,
    loaded: false,
    timer: 0,
    busy: false,
    again: false, // refresh was asked for while busy
    dlSeq: 0,
    token: "", // the session's token (also in sessionStorage)
    asking: false, // the token prompt is shown: no refresh until it is answered
    asked: 0, // how many times the prompt was shown
  };

  const $ = (id) => document.getElementById(id);

  // el builds an element: attrs set attributes ("text" the text content,
  // "class" the class), children are nodes or text.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") e.textContent = String(v);
      else if (k === "class") e.className = v;
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  // ---- formatting ----

  const nf = new Intl.NumberFormat("en-US");
  const fmtInt = (n) => nf.format(n);

  function fmtAge(seconds) {
    let s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + "s";
    const d = Math.floor(s / 86400);
    s -= d * 86400;
    const h = Math.floor(s / 3600);
    s -= h * 3600;
    const m = Math.floor(s / 60);
    s -= m * 60;
    if (d > 0) return `${d}d ${h}h`;
    if (h > 0) return `${h}h ${m}m`;
    return `${m}m ${s}s`;
  }

  // fmtTime shows an RFC 3339 UTC time as "2006-01-02 15:04:05".
  function fmtTime(iso) {
    if (!iso) return "—";
    const t = new Date(iso);
    if (isNaN(t)) return iso;
    return t.toISOString().slice(0, 19).replace("T", " ");
  }

  function ago(iso) {
    if (!iso) return "";
    const now = state.stats ? Date.parse(state.stats.now) : Date.now();
    const s = (now - Date.parse(iso)) / 1000;
    return isNaN(s) ? "" : fmtAge(s) + " ago";
  }

  const share = (n, total) => (total > 0 ? ((100 * n) / total).toFixed(1) + "%" : "–");

  // byCount sorts a {name: count} map, most first, then by name.
  function byCount(m) {
    return Object.entries(m || {}).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  function splitList(s) {
    return String(s || "")
      .split(",")
      .map((x) => x.trim())
      .filter((x) => x !== "");
  }

  // ---- the API ----

  // api calls the API with the session's token, if any (an Authorization
  // in opts.headers wins: the replay form's token).
  async function api(path, opts) {
    opts = Object.assign({ cache: "no-store", credentials: "same-origin" }, opts);
    const headers = Object.assign({}, opts.headers);
    if (state.token && !headers.Authorization) headers.Authorization = "Bearer " + state.token;
    opts.headers = headers;
    const resp = await fetch(path, opts);
    const text = await resp.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (e) {
      body = null;
    }
    if (!resp.ok) {
      // The API answers {"error": "..."}; anything else (a proxy's page) is
      // shown by its status, with a short plain text answer.
      let msg = body && typeof body.error === "string" ? body.error : "";
      if (!msg) {
        const plain = text.replace(/\s+/g, " ").trim();
        msg = plain && plain.length <= 200 && !plain.startsWith("<") ? plain : "";
      }
      const status = `${resp.status} ${resp.statusText}`.trim();
      const err = new Error(msg && msg !== resp.statusText ? `${status}: ${msg}` : status);
      err.status = resp.status;
      err.detail = msg || status;
      err.sentToken = !!headers.Authorization;
      throw err;
    }
    if (body === null) throw new Error(`${path}: the answer is not JSON`);
    return body;
  }

  // ---- the status line ----

  function setStatus(text, isError) {
    const s = $("status");
    s.textContent = text;
    s.classList.toggle("error", !!isError);
  }

  // ---- pipelines ----

  function pipelines() {
    return (state.stats && state.stats.pipelines) || [];
  }

  function current() {
    return pipelines().find((p) => p.name === state.selected) || null;
  }

  function hashPipeline() {
    const m = /^#pipeline=(.*)$/.exec(location.hash);
    if (!m) return "";
    try {
      return decodeURIComponent(m[1]);
    } catch (e) {
      return "";
    }
  }

  function choosePipeline() {
    const ps = pipelines();
    const want = hashPipeline() || state.selected;
    const p = ps.find((x) => x.name === want) || ps[0];
    if (p && p.name !== state.selected) {
      state.selected = p.name;
      state.open.clear();
      return true;
    }
    return false;
  }

  function renderCards() {
    const nav = $("pipelines");
    const cards = pipelines().map((p) => {
      const s = p.stats;
      const stat = (label, id, value, text, title) =>
        el("div", { class: "stat" }, el("span", { class: "label", text: label }), el("span", { class: "value", id, "data-value": value, title, text }));
      return el(
        "a",
        {
          class: "card" + (p.name === state.selected ? " selected" : "") + (p.ready ? "" : " rebuilding"),
          href: "#pipeline=" + encodeURIComponent(p.name),
          "data-pipeline": p.name,
          id: "card-" + p.name,
          "aria-current": p.name === state.selected ? "true" : null,
        },
        el(
          "div",
          { class: "card-head" },
          el("h2", { text: p.name }),
          el("span", { class: "badge " + (p.ready ? "ok" : "warn"), id: "ready-" + p.name, "data-ready": p.ready ? "1" : "0", text: p.ready ? "live" : "rebuilding…" })
        ),
        el("div", { class: "dlq" }, "DLQ ", el("code", { id: "dlq-" + p.name, text: p.dlq })),
        el(
          "div",
          { class: "stats" },
          stat("dead letters", "total-" + p.name, s.total, fmtInt(s.total)),
          stat("depth", "depth-" + p.name, p.depth, fmtInt(p.depth), "dead letters the rule worker has not handled yet"),
          stat(
            "oldest unhandled",
            "oldest-" + p.name,
            p.oldest_unhandled_seconds,
            p.oldest_unhandled_seconds > 0 ? fmtAge(p.oldest_unhandled_seconds) : "none",
            "age of the oldest dead letter the rule worker has not handled yet"
          ),
          stat("newest", "newest-" + p.name, s.newest || "", s.newest ? ago(s.newest) : "—", s.newest ? fmtTime(s.newest) + " UTC" : null)
        )
      );
    });
    nav.replaceChildren(...cards);
  }

  // ---- the flow: main → tiers → results / DLQ ----

  // fmtRate shows records per second: "0/s", "0.4/s", "12.5/s", "1,204/s".
  function fmtRate(r) {
    if (!r) return "0/s";
    if (r >= 100) return fmtInt(Math.round(r)) + "/s";
    return r.toFixed(1) + "/s";
  }

  const ROLE_TITLE = { main: "main topic", tier: "retry", results: "results", dlq: "dead letters" };
  const WAITING_LABEL = { main: "lag", tier: "waiting", dlq: "unhandled" };

  // flowNode is one topic's box: what waits in it (end offsets minus the
  // group's commits) and how fast records come in and are finished.
  // fmtSeconds shows a latency: "0 ms", "12 ms", "1.25 s".
  function fmtSeconds(s) {
    if (s < 1) return Math.round(s * 1000) + " ms";
    return s.toFixed(2) + " s";
  }

  // flowNode is one topic's box; extra are the reachable processors'
  // numbers for it ([label, metric, value, text, title]).
  function flowNode(pipeline, t, extra) {
    const id = `flow-${pipeline}-${t.role}-${t.name}`;
    const consumed = !!t.group;
    const busy = consumed && t.waiting > 0;
    const metric = (label, cls, value, text, title) =>
      el("div", { class: "fm " + cls, title }, el("span", { class: "label", text: label }), el("span", { class: "value", "data-metric": cls.split(" ")[0], "data-value": value, text }));
    return el(
      "div",
      {
        class: `fnode ${t.role}` + (busy ? " busy" : "") + (t.role === "dlq" && t.in_per_second > 0 ? " hot" : ""),
        id,
        "data-role": t.role,
        "data-name": t.name,
        "data-topic": t.topic,
        "data-end": t.end,
        "data-waiting": consumed ? t.waiting : null,
        "data-committed": consumed ? t.committed : null,
        "data-in": t.in_per_second,
        "data-done": consumed ? t.done_per_second : null,
      },
      el("div", { class: "fhead" }, el("span", { class: "ftitle", text: ROLE_TITLE[t.role] + (t.role === "tier" ? " " + t.name : "") + (t.share ? " · share group" : "") })),
      el("code", { class: "ftopic", title: t.topic, text: t.topic }),
      consumed
        ? metric(WAITING_LABEL[t.role], "waiting big", t.waiting, fmtInt(t.waiting), t.share
            ? `records written to ${t.topic} and not yet acknowledged by the share group ${t.group} (after its start offsets; acquired ones included)`
            : `records written to ${t.topic} and not yet finished by ${t.group} (consumer lag)`)
        : metric("written", "end big", t.end, fmtInt(t.end), `records in ${t.topic} (sum of end offsets)`),
      el(
        "div",
        { class: "frates" },
        metric("in", "in", t.in_per_second, fmtRate(t.in_per_second), `records written to ${t.topic} per second`),
        consumed ? metric("done", "done", t.done_per_second, fmtRate(t.done_per_second), `records ${t.group} finished (committed) per second`) : null
      ),
      extra && extra.length ? el("div", { class: "fproc" }, ...extra.map(([label, m, value, text, title]) => metric(label, m, value, text, title))) : null
    );
  }

  // flowArrow is an arrow labelled with the rate of records it carries.
  function flowArrow(rate, title, cls) {
    return el(
      "div",
      { class: "farrow" + (cls ? " " + cls : "") + (rate > 0 ? " moving" : ""), title, "data-rate": rate },
      el("span", { class: "rate", text: fmtRate(rate) }),
      el("span", { class: "line" })
    );
  }

  // ---- the line: whether the processors' handler calls may start ----

  // LINE_CLASS colours a line state's badge; a state this page does not
  // know gets the plain badge (and is shown as text).
  const LINE_CLASS = { running: "ok", probing: "warn", stopped: "bad" };
  const BREAKER_CLASS = { closed: "ok", "half-open": "warn", open: "bad", disabled: "" };
  const REASON_TITLE = { breaker: "circuit breaker open", pause_code: "pause code", guard: "guard tripped", manual: "paused by hand" };

  const lineBadge = (stateName, attrs) =>
    el("span", Object.assign({ class: "badge line " + (LINE_CLASS[stateName] || ""), "data-line": stateName, text: stateName || "?" }, attrs || {}));

  // rel shows an RFC 3339 time against the analyzer's clock: "12s ago",
  // "in 25s".
  function rel(iso) {
    const now = state.flows && state.flows.now ? Date.parse(state.flows.now) : Date.now();
    const s = (Date.parse(iso) - now) / 1000;
    if (isNaN(s)) return "";
    return s >= 0 ? "in " + fmtAge(s) : fmtAge(-s) + " ago";
  }

  // renderLine is one processor's line of a pipeline: its state, the
  // breaker, the reasons it is stopped with since, until and detail.
  function renderLine(p) {
    const l = p.line;
    const who = p.instance || p.url;
    const breaker =
      l.breaker === "disabled"
        ? "breaker off"
        : `breaker ${l.breaker}` + (l.breaker === "open" && l.open_for ? ` for ${l.open_for}` : "") + (l.breaker_since ? ` since ${fmtTime(l.breaker_since).slice(11)} UTC` : "");
    const facts = [];
    // What the breaker counted: an outage shows counted failures, a few
    // bad requests show failures not counted (their own, again).
    const c = l.counts;
    const counts = c
      ? el("span", {
          class: "hint breaker-counts",
          "data-calls": String(c.calls),
          "data-failures": String(c.failures),
          "data-in-a-row": String(c.in_a_row),
          "data-not-counted": String(c.not_counted),
          title: "transient failures the breaker counted against the service, and those it put on the requests (a code they failed with before, or a request_fault code)",
          text:
            `counted ${c.calls} calls, ${c.failures} failed (${c.in_a_row} in a row), ${c.not_counted} not counted in ${c.window}` +
            (c.probes ? `; probes ${c.probes_ok} ok, ${c.probes_failed} failed of ${c.probes}` : "") +
            (l.why ? ` · ${l.why}` : ""),
        })
      : null;
    facts.push(l.guard ? "guard on" : "guard off");
    if (l.rate_limit) facts.push(`rate limit ${l.rate_limit}/s`);
    if (l.learned_rate) facts.push(`learned rate ${fmtRate(l.learned_rate)} (from 429s)`);
    if (l.failover_to) facts.push(`fails over to ${l.failover_to}`);
    const reasons = l.reasons || [];
    return el(
      "div",
      { class: "fline", "data-processor": p.url, "data-instance": p.instance || "", "data-state": l.state, "data-breaker": l.breaker },
      el(
        "div",
        { class: "fline-head" },
        lineBadge(l.state, { title: l.state === "probing" ? "the breaker is half-open: a few calls go through" : null }),
        el("span", { class: "fline-who mono", title: p.url, text: who }),
        el("span", { class: "badge breaker " + (BREAKER_CLASS[l.breaker] || ""), "data-breaker": l.breaker, title: l.breaker_since ? fmtTime(l.breaker_since) + " UTC" : null, text: breaker }),
        el("span", { class: "hint", text: facts.join(" · ") }),
        counts
      ),
      reasons.length
        ? el(
            "ul",
            { class: "fline-reasons" },
            ...reasons.map((r) =>
              el(
                "li",
                { "data-reason": r.reason, "data-since": r.since || "", "data-until": r.until || "" },
                el("span", { class: "reason", title: REASON_TITLE[r.reason] || null, text: r.reason }),
                el("span", { class: "when", title: r.since ? r.since : null, text: r.since ? `since ${fmtTime(r.since).slice(11)} UTC (${rel(r.since)})` : "" }),
                el("span", { class: "when", title: r.until ? r.until : null, text: r.until ? `until ${fmtTime(r.until).slice(11)} UTC (${rel(r.until)})` : "until resumed" }),
                el("span", { class: "detail", text: r.detail || "" })
              )
            )
          )
        : null
    );
  }

  // ---- callbacks: a job API's pingbacks (handler.callback) ----

  // CALLBACK_COUNTS are the numbers of the Callbacks panel: [label, key in
  // the API's callbacks, title].
  const CALLBACK_COUNTS = [
    ["held", "held", "callbacks the processors hold in memory now, to match and to spot duplicates"],
    ["received", "received", "callback records read from the callbacks topic"],
    ["matched", "matched", "waiting records finished by their callback, with no poll"],
    ["duplicate", "duplicate", "callbacks for a job already called back: deduplicated by job id, they change nothing"],
    ["late", "late", "callbacks for a job already finished by a poll"],
    ["polls", "polls", "handler calls that polled a job, fallback polls included"],
    ["via callback", "via_callback", "jobs finished by their callback"],
    ["via poll", "via_poll", "jobs finished by a poll: no callback came within the wait"],
  ];

  // renderCallbacks is a pipeline's Callbacks panel: the reachable
  // processors' callbacks summed, and each processor's when there are
  // several. None for a pipeline without callbacks.
  function renderCallbacks(f, procs) {
    const c = f.callbacks;
    if (!c) return null;
    const n = (k) => (typeof c[k] === "number" && c[k] > 0 ? c[k] : 0);
    const done = n("via_callback") + n("via_poll");
    const metric = (label, key, title) =>
      el(
        "div",
        { class: "fm", title },
        el("span", { class: "label", text: label }),
        el("span", { class: "value", "data-metric": "cb-" + key, "data-value": n(key), text: fmtInt(n(key)) })
      );
    const reporting = procs.filter((p) => !p.error && p.callbacks);
    let table = null;
    if (reporting.length > 1) {
      table = el(
        "table",
        { class: "small fcb-procs" },
        el("thead", {}, el("tr", {}, el("th", { text: "processor" }), ...CALLBACK_COUNTS.map(([label]) => el("th", { text: label })))),
        el(
          "tbody",
          {},
          ...reporting.map((p) =>
            el(
              "tr",
              { "data-processor": p.url, "data-instance": p.instance || "" },
              el("td", { class: "mono", title: p.url, text: p.instance || p.url }),
              ...CALLBACK_COUNTS.map(([, key]) => el("td", { class: "num", "data-metric": "cb-" + key, text: fmtInt(p.callbacks[key] || 0) }))
            )
          )
        )
      );
    }
    const facts = [`topic ${c.topic || "?"}`, `a job waits ${c.wait || "?"} for its callback, then is polled`];
    if (done > 0) facts.push(`${share(n("via_callback"), done)} of ${fmtInt(done)} jobs finished via callback`);
    return el(
      "div",
      { class: "fcallbacks", id: "callbacks-" + f.name, "data-topic": c.topic || "", "data-wait": c.wait || "", "data-processors": reporting.length },
      el("div", { class: "fcb-head" }, el("h3", { text: "Callbacks" }), el("span", { class: "hint", text: facts.join(" · ") })),
      el("div", { class: "fcb-counts" }, ...CALLBACK_COUNTS.map(([label, key, title]) => metric(label, key, title))),
      table
    );
  }

  // renderDev shows the dev tools when the analyzer runs in redrive dev.
  function renderDev() {
    $("dev").hidden = !(state.flows && state.flows.dev_outage === true);
  }

  async function devOutage() {
    const button = $("dev-outage");
    const out = $("dev-outage-result");
    button.disabled = true;
    out.classList.remove("error");
    out.textContent = "asking the demo solver…";
    try {
      const r = await api("api/dev/outage?for=30s", { method: "POST" });
      out.dataset.until = r.until || "";
      out.textContent = `The demo solver answers 503 to every call until ${fmtTime(r.until).slice(11)} UTC: watch the processors' breaker open, probe and close.`;
      refresh();
    } catch (e) {
      out.classList.add("error");
      out.textContent = "outage: " + e.message;
    } finally {
      button.disabled = false;
    }
  }

  function renderFlows() {
    const box = $("flows");
    const flows = (state.flows && state.flows.pipelines) || [];
    box.replaceChildren(
      ...flows.map((f) => {
        const procs = f.processors || [];
        const reached = procs.filter((p) => !p.error).length;
        const mainExtra = reached
          ? [
              ["in flight", "inflight", f.inflight, fmtInt(f.inflight), "records with a handler or being written, summed over the reachable processors"],
              ["handler p99", "handler-p99", f.handler_p99_seconds, fmtSeconds(f.handler_p99_seconds), "largest p99 handler call over the last minute"],
            ]
          : null;
        const chain = [flowNode(f.name, f.main, mainExtra)];
        for (const t of f.tiers) {
          const extra = reached
            ? [
                ["held", "held", t.held || 0, fmtInt(t.held || 0), "tier records the processors hold in memory until due"],
                ["late p99", "lateness-p99", t.lateness_p99_seconds || 0, fmtSeconds(t.lateness_p99_seconds || 0), "how late past due (p99, last minute) the tier's records were handled"],
              ]
            : null;
          chain.push(flowArrow(t.in_per_second, `retries written to ${t.topic}`, "tier"), flowNode(f.name, t, extra));
        }
        const sinks = [];
        if (f.results) sinks.push(el("div", { class: "fsink" }, flowArrow(f.results.in_per_second, "results written", "ok"), flowNode(f.name, f.results)));
        sinks.push(el("div", { class: "fsink" }, flowArrow(f.dlq.in_per_second, "dead letters written", "bad"), flowNode(f.name, f.dlq)));
        let note = f.error
          ? "offsets: " + f.error
          : f.window_seconds > 0
            ? `rates over the last ${Math.round(f.window_seconds)} s · group ${f.group}`
            : `first sample · group ${f.group}`;
        if (procs.length) note += ` · ${reached} of ${procs.length} processors reached`;
        const unreachable = procs.filter((p) => p.error).map((p) => `${p.url}: ${p.error}`).join("\n");
        const lines = procs.filter((p) => !p.error && p.line);
        return el(
          "div",
          {
            class: "panel wide flow",
            id: "flow-" + f.name,
            "data-pipeline": f.name,
            "data-sampled-at": f.sampled_at || "",
            "data-window": f.window_seconds,
          },
          el(
            "div",
            { class: "panel-head" },
            el(
              "h2",
              {},
              f.name + " ",
              el("small", { text: "flow" }),
              f.line ? " " : null,
              f.line ? lineBadge(f.line, { id: "line-" + f.name, title: "the processors' line: the furthest from running of their states" }) : null
            ),
            el("span", { class: "hint" + (f.error ? " error" : ""), id: "flow-note-" + f.name, "data-processors": procs.length, "data-reached": reached, title: unreachable || null, text: note })
          ),
          el("div", { class: "fchain" }, ...chain, el("div", { class: "fsinks" }, ...sinks)),
          lines.length ? el("div", { class: "flines", id: "flines-" + f.name }, ...lines.map((p) => renderLine(p))) : null,
          renderCallbacks(f, procs)
        );
      })
    );
  }

  // ---- replicas: the control topic (GET api/control) ----

  // ctlPanels are the Replicas panels by pipeline, made once: a refresh
  // updates them and leaves the reason typed and the last result alone.
  const ctlPanels = new Map();

  // fmtWhen shows an RFC 3339 time against the analyzer's clock: "12:04:05
  // UTC (3m 2s ago)".
  function fmtWhen(iso) {
    if (!iso) return "";
    const now = state.control ? Date.parse(state.control.now) : Date.now();
    const s = (Date.parse(iso) - now) / 1000;
    if (isNaN(s)) return iso;
    // Within a second is now: the writers' clocks are not the analyzer's.
    return `${fmtTime(iso).slice(11)} UTC (${s >= 1 ? "in " + fmtAge(s) : fmtAge(Math.max(0, -s)) + " ago"})`;
  }

  // STOPS are the line's shared stops: [key in the API's line, name shown].
  const STOPS = [
    ["breaker", "breaker"],
    ["pause_code", "pause code"],
    ["guard", "guard"],
  ];

  function controlPanel(name) {
    let c = ctlPanels.get(name);
    if (c) return c;
    const badge = el("span", { class: "badge line", id: "paused-" + name });
    const reason = el("input", { id: "pause-reason-" + name, placeholder: "reason (optional)", maxlength: "1024", autocomplete: "off", "aria-label": "reason" });
    const pause = el("button", { type: "button", class: "danger", id: "pause-" + name, text: "Pause", title: "stop every replica of this pipeline from starting handler calls, until resumed" });
    const resume = el("button", { type: "button", class: "secondary", id: "resume-" + name, text: "Resume", title: "let every replica start handler calls again; also clears the breaker, pause code and guard stops" });
    const result = el("span", { class: "rresult", id: "control-result-" + name, role: "status" });
    const facts = el("ul", { class: "rfacts", id: "control-facts-" + name });
    const tbody = el("tbody");
    const table = el(
      "table",
      { class: "small", id: "replicas-" + name },
      el("thead", {}, el("tr", {}, ...["instance", "line", "partitions", "share", "calls/s", "in flight", "last seen"].map((h, i) => el("th", { class: i >= 2 && i <= 5 ? "num" : null, text: h })))),
      tbody
    );
    const panel = el(
      "div",
      { class: "panel wide replicas", id: "control-" + name, "data-pipeline": name },
      el("div", { class: "panel-head" }, el("h2", {}, name + " ", el("small", { text: "replicas" }), " ", badge)),
      facts,
      el("div", { class: "form-row" }, reason, pause, resume, result),
      el("div", { class: "table-wrap short" }, table)
    );
    c = { panel, badge, reason, pause, resume, result, facts, tbody, table };
    pause.addEventListener("click", () => setPause(name, true, c));
    resume.addEventListener("click", () => setPause(name, false, c));
    ctlPanels.set(name, c);
    return c;
  }

  function renderControl() {
    const box = $("replicas");
    const ctl = state.control;
    if (!ctl) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    box.dataset.topic = ctl.topic;
    box.dataset.ready = ctl.ready ? "1" : "0";
    const err = $("control-error");
    err.hidden = !ctl.control;
    err.textContent = ctl.control ? `control topic ${ctl.topic}: ${ctl.control}. The replicas cannot be shown, and a pause may not reach them.` : "";
    const panels = (ctl.pipelines || []).map((p) => {
      const c = controlPanel(p.name);
      updateControl(c, p, ctl);
      return c.panel;
    });
    const now = Array.from(box.children).filter((e) => e !== err);
    if (now.length !== panels.length || now.some((e, i) => e !== panels[i])) box.replaceChildren(err, ...panels);
  }

  function updateControl(c, p, ctl) {
    c.panel.dataset.paused = p.paused ? "1" : "0";
    c.badge.className = "badge line " + (p.paused ? "bad" : "ok");
    c.badge.dataset.paused = p.paused ? "1" : "0";
    c.badge.textContent = p.paused ? "paused" : "not paused";
    const facts = [];
    if (p.by) {
      facts.push(
        el(
          "li",
          { "data-fact": "pause" },
          `${p.paused ? "Paused" : "Resumed"} by `,
          el("span", { class: "mono", text: p.by }),
          ` at ${fmtWhen(p.since)}`,
          p.reason ? `: ${p.reason}` : ""
        )
      );
    } else facts.push(el("li", { class: "muted", "data-fact": "pause", text: "never paused by an operator" }));
    for (const [key, label] of STOPS) {
      const s = p.line && p.line[key];
      if (!s) continue;
      const until = s.until ? `until ${fmtWhen(s.until)}` : key === "breaker" ? "" : "until resumed";
      facts.push(
        el(
          "li",
          { "data-stop": key, "data-state": s.state },
          el("span", { class: "stop", text: `${label} ${s.state}` }),
          s.code ? ` ${s.code}` : "",
          until ? ` ${until}` : "",
          s.why ? ` · ${s.why}` : "",
          ` · by ${s.by}`
        )
      );
    }
    c.facts.replaceChildren(...facts);
    const rs = p.replicas || [];
    c.table.dataset.count = String(rs.length);
    c.table.dataset.stale = String(rs.filter((r) => r.stale).length);
    if (!rs.length) {
      const why = ctl.control ? "the control topic cannot be read" : ctl.ready ? `no processor has published its status to ${ctl.topic}` : `reading ${ctl.topic}…`;
      c.tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: 7, text: why })));
      return;
    }
    c.tbody.replaceChildren(
      ...rs.map((r) =>
        el(
          "tr",
          { class: r.stale ? "stale" : null, "data-instance": r.instance, "data-stale": r.stale ? "1" : "0", "data-line": r.line },
          el("td", { class: "mono", text: r.instance }),
          el("td", {}, lineBadge(r.line, { title: r.why || null }), r.breaker ? el("span", { class: "hint", text: ` breaker ${r.breaker}` }) : null),
          el("td", { class: "num", title: `${r.main_partitions} of the main topic; ${r.scope} scope`, text: `${r.partitions} of ${r.total_partitions}` }),
          el("td", { class: "num", title: [r.rate_limit ? `rate limit ${r.rate_limit}/s` : "", r.learned_rate ? `learned rate ${fmtRate(r.learned_rate)} (from 429s)` : ""].filter(Boolean).join("; ") || null, text: (100 * (r.share || 0)).toFixed(0) + "%" }),
          el("td", { class: "num", text: fmtRate(r.calls_per_second) }),
          el("td", { class: "num", title: `${r.inflight} records polled and not finished, ${r.calls_in_flight} handler calls running`, text: `${fmtInt(r.inflight)} · ${fmtInt(r.calls_in_flight)} calls` }),
          el("td", { class: "when", title: r.last_seen }, fmtWhen(r.last_seen), r.stale ? " " : null, r.stale ? el("span", { class: "badge warn", title: "no status for three of its intervals: killed, or cut off from the control topic", text: "stale" }) : null)
        )
      )
    );
  }

  // setPause writes the operator's pause (paused) or resume of a pipeline,
  // with the replay form's token when given (the page's may be the
  // read-only one), else the page's.
  async function setPause(name, paused, c) {
    const what = paused ? "pause" : "resume";
    const ok = window.confirm(
      paused
        ? `Pause pipeline ${name} on every replica? None starts a handler call until it is resumed.`
        : `Resume pipeline ${name} on every replica? This also clears its breaker, pause code and guard stops.`
    );
    if (!ok) return;
    const token = $("replay-token").value;
    const headers = { "Content-Type": "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    const reason = c.reason.value.trim();
    c.pause.disabled = c.resume.disabled = true;
    c.result.className = "rresult";
    delete c.result.dataset.done;
    delete c.result.dataset.error;
    c.result.textContent = `writing the ${what} to the control topic…`;
    try {
      const r = await api(`api/control/${encodeURIComponent(name)}/${what}`, { method: "POST", headers, body: JSON.stringify(reason ? { reason } : {}) });
      c.result.className = "rresult done";
      c.result.dataset.done = what;
      c.result.textContent =
        `${paused ? "Paused" : "Resumed"} by ${r.by}: every replica ${paused ? "stops starting calls" : "starts calls again"} as it reads it.` +
        (r.seen ? "" : " (not read back yet: the view may lag)");
      c.reason.value = "";
      refresh();
    } catch (e) {
      c.result.className = "rresult error";
      c.result.dataset.error = e.message;
      const hint = e.status === 401 || e.status === 403 ? " (put analyzer.token in the Replay form's token field)" : "";
      c.result.textContent = `${what}: ${e.message}${hint}`;
    } finally {
      c.pause.disabled = c.resume.disabled = false;
    }
  }

  // ---- the per-minute chart ----

  const intIncrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7];

  // utcTick labels a time axis tick: "15:04", or "01-02" at midnight.
  function utcTick(ts) {
    if (ts === null || ts === undefined) return "";
    const iso = new Date(ts * 1000).toISOString();
    const hm = iso.slice(11, 16);
    return hm === "00:00" ? iso.slice(5, 10) : hm;
  }

  function chartWidth() {
    return Math.max(300, $("chart-minutes").clientWidth);
  }

  function makeChart(data) {
    const axis = { stroke: "#5b6470", grid: { stroke: "#e6e9ee", width: 1 }, ticks: { stroke: "#e6e9ee", width: 1 } };
    const opts = {
      width: chartWidth(),
      height: CHART_HEIGHT,
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
      cursor: { drag: { x: false, y: false }, points: { show: false } },
      legend: { show: true },
      scales: {
        x: { time: true, range: (u, min, max) => [min, max + 60] }, // room for the last minute's bar
        y: { range: (u, min, max) => [0, Math.max(4, Math.ceil(max * 1.15))] },
      },
      axes: [
        Object.assign({}, axis, { values: (u, splits) => splits.map(utcTick) }),
        Object.assign({}, axis, { incrs: intIncrs, size: 50, values: (u, vals) => vals.map((v) => fmtInt(v)) }),
      ],
      series: [
        { label: "minute (UTC)", value: "{YYYY}-{MM}-{DD} {HH}:{mm}" },
        {
          label: "dead letters",
          stroke: "#b8322a",
          fill: "rgba(184, 50, 42, 0.35)",
          width: 1,
          paths: uPlot.paths.bars({ size: [0.85, 40], align: 1 }),
          points: { show: false },
          value: (u, v, si, i) => (i === null || i === undefined ? "–" : fmtInt(v || 0)),
        },
      ],
    };
    return new uPlot(opts, data, $("chart-minutes"));
  }

  // chartMinutes is how many minutes the chart draws, and so how many
  // GET api/stats is asked for (all 1440 every 5 s would be 64 KB a
  // pipeline).
  function chartMinutes() {
    return parseInt($("chart-range").value, 10) || 60;
  }

  function renderChart(p) {
    const box = $("chart-minutes");
    const n = chartMinutes();
    const pts = (p.stats.per_minute || []).slice(-n);
    const xs = pts.map((m) => Date.parse(m.minute) / 1000);
    const counts = pts.map((m) => m.count);
    const ys = counts.map((c) => c || null); // no bar for an empty minute
    box.dataset.points = String(pts.length);
    box.dataset.sum = String(counts.reduce((a, b) => a + b, 0));
    box.dataset.pipeline = p.name;
    if (typeof uPlot !== "function") throw new Error("uPlot did not load");
    if (!state.chart) state.chart = makeChart([xs, ys]);
    else state.chart.setData([xs, ys]);
  }

  // ---- bar lists ----

  // renderBars fills ul with one row per entry of counts, most first: name,
  // a bar scaled to the largest, the count and its share of total. attr
  // names the data attribute holding the name (data-code, data-reason);
  // onPick, when given, is called with a name that can be filtered on.
  function renderBars(ul, counts, attr, total, onPick) {
    const entries = byCount(counts);
    if (!entries.length) {
      ul.replaceChildren(el("li", { class: "empty", text: "none yet" }));
      return;
    }
    const max = entries[0][1] || 1;
    ul.replaceChildren(
      ...entries.map(([name, n]) => {
        const pickable = onPick && name !== "" && name !== "(other)";
        const fill = el("span", { class: "fill" });
        fill.style.width = Math.max(0.5, (100 * n) / max).toFixed(2) + "%";
        const li = el(
          "li",
          {
            ["data-" + attr]: name,
            "data-count": n,
            class: pickable ? "pickable" : null,
            tabindex: pickable ? "0" : null,
            role: pickable ? "button" : null,
            title: pickable ? `list the dead letters with ${attr} ${name}` : null,
          },
          el("span", { class: "name" + (name === "" ? " none" : ""), title: name || "no code", text: name === "" ? "(none)" : name }),
          el("span", { class: "track" }, fill),
          el("span", { class: "count", text: fmtInt(n) }),
          el("span", { class: "share", text: share(n, total) })
        );
        if (pickable) {
          li.addEventListener("click", () => onPick(name));
          li.addEventListener("keydown", (e) => {
            if (e.key === "Enter" || e.key === " ") {
              e.preventDefault();
              onPick(name);
            }
          });
        }
        return li;
      })
    );
  }

  function renderRules(rules) {
    const tbody = $("rules").tBodies[0];
    const names = Object.keys(rules || {}).sort();
    if (!names.length) {
      tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: 5, text: "no rule has decided yet" })));
      return;
    }
    tbody.replaceChildren(
      ...names.map((name) => {
        const c = rules[name];
        return el(
          "tr",
          { "data-rule": name },
          el("td", { text: name }),
          el("td", { class: "num", text: fmtInt(c.republished) }),
          el("td", { class: "num", text: fmtInt(c.parked) }),
          el("td", { class: "num", text: fmtInt(c.kept) }),
          el("td", { class: "num", text: fmtInt(c.dropped) })
        );
      })
    );
  }

  function renderTopKeys(keys) {
    const tbody = $("topkeys").tBodies[0];
    if (!keys || !keys.length) {
      tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: 2, text: "no keys yet" })));
      return;
    }
    tbody.replaceChildren(
      ...keys.map((k) => {
        const key = el("td", { class: "mono key" }, k.base64 ? el("span", { class: "enc", text: "b64" }) : null, k.key, k.truncated ? "…" : null);
        const count = fmtInt(k.count) + (k.overestimate ? ` (±${fmtInt(k.overestimate)})` : "");
        return el("tr", { "data-key": k.key }, key, el("td", { class: "num", text: count }));
      })
    );
  }

  function renderPipeline(p) {
    const sec = $("pipeline");
    sec.hidden = false;
    sec.dataset.pipeline = p.name;
    renderChart(p);
    const total = p.stats.total;
    renderBars($("codes"), p.stats.by_code, "code", total, (code) => pickFilter("code", code));
    renderBars($("reasons"), p.stats.by_reason, "reason", total, (reason) => pickFilter("reason", reason));
    renderBars($("origins"), p.stats.by_origin, "origin", total, null);
    renderRules(p.stats.rules);
    renderTopKeys(p.stats.top_keys);
  }

  // ---- dead letters ----

  function filterQuery() {
    const q = new URLSearchParams();
    q.set("pipeline", state.selected);
    for (const k of ["code", "reason", "since", "until", "key"]) {
      if (state.filters[k]) q.set(k, state.filters[k]);
    }
    q.set("limit", String(DEADLETTERS_LIMIT));
    return q.toString();
  }

  // loadDeadLetters fetches and shows the dead letters; a filter the API
  // refuses (400) is shown next to the filters, anything else is thrown.
  async function loadDeadLetters() {
    const seq = ++state.dlSeq;
    const ferr = $("filter-error");
    let resp;
    try {
      resp = await api("api/deadletters?" + filterQuery());
    } catch (e) {
      if (seq !== state.dlSeq) return;
      if (e.status === 503) return; // the analyzer is busy: keep what is shown, the next refresh asks again
      if (e.status === 400) {
        ferr.textContent = e.detail;
        ferr.hidden = false;
        renderDeadLetters([], "the filter was refused");
        return;
      }
      throw e;
    }
    if (seq !== state.dlSeq) return; // a newer query is under way
    ferr.hidden = true;
    ferr.textContent = "";
    renderDeadLetters(resp.dead_letters || [], null, resp.truncated === true);
  }

  function position(v) {
    return `${v.topic}/${v.partition}/${v.offset}`;
  }

  function bytesCell(s, encoding, cls) {
    if (s === null || s === undefined) return el("td", { class: cls + " muted", text: "null" });
    return el("td", { class: cls, title: s.length > 40 ? s.slice(0, 500) : null }, encoding === "base64" ? el("span", { class: "enc", text: "b64" }) : null, s);
  }

  // truncated: the API stopped at its byte bound (analyzer.response_bytes).
  function renderDeadLetters(list, emptyText, truncated) {
    const table = $("deadletters");
    const tbody = table.tBodies[0];
    table.dataset.count = String(list.length);
    table.dataset.pipeline = state.selected;
    const filtered = Object.values(state.filters).some((v) => v);
    $("deadletters-count").textContent = truncated
      ? `(the newest ${list.length}${filtered ? " matching" : ""}: all that fit in one answer)`
      : list.length === DEADLETTERS_LIMIT ? `(the newest ${DEADLETTERS_LIMIT}${filtered ? " matching" : ""})` : `(${list.length}${filtered ? " matching" : ""}, newest first)`;
    if (!list.length) {
      tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colspan: 8, text: emptyText || (filtered ? "no dead letter matches the filter" : "no dead letters") })));
      return;
    }
    const rows = [];
    const seen = new Set();
    for (const v of list) {
      const pos = position(v);
      seen.add(pos);
      const open = state.open.has(pos);
      const toggle = el("button", { type: "button", class: "toggle", "aria-expanded": open ? "true" : "false", title: "headers and details", text: open ? "▾" : "▸" });
      const origin = v.origin ? `${v.origin.topic}[${v.origin.partition}]@${v.origin.offset}` : "—";
      const tr = el(
        "tr",
        { class: "dl", "data-id": v.id, "data-pos": pos },
        el("td", {}, toggle),
        el("td", { class: "time", title: v.timestamp ? `${v.timestamp} (${ago(v.timestamp)})` : null, text: fmtTime(v.timestamp) }),
        el("td", {}, el("span", { class: "badge reason-" + v.reason, text: v.reason || "?" })),
        el("td", { class: "mono" + (v.code ? "" : " muted"), text: v.code || "(none)" }),
        el("td", { class: "num", title: `attempts ${v.attempt}, polls ${v.polls}, redrives ${v.redrives}`, text: String(v.attempt) }),
        el("td", { class: "mono", title: v.origin && v.origin.timestamp ? "entered " + v.origin.timestamp : null, text: origin }),
        bytesCell(v.key, v.key_encoding, "mono key"),
        el("td", { class: "errtext", title: v.error, text: v.error })
      );
      const detail = el("tr", { class: "detail", "data-detail-for": pos }, el("td", { colspan: 8 }, details(v)));
      detail.hidden = !open;
      const flip = () => {
        const nowOpen = detail.hidden;
        detail.hidden = !nowOpen;
        toggle.textContent = nowOpen ? "▾" : "▸";
        toggle.setAttribute("aria-expanded", nowOpen ? "true" : "false");
        if (nowOpen) state.open.add(pos);
        else state.open.delete(pos);
      };
      toggle.addEventListener("click", (e) => {
        e.stopPropagation();
        flip();
      });
      tr.addEventListener("click", () => {
        if (!String(window.getSelection() || "")) flip();
      });
      rows.push(tr, detail);
    }
    for (const pos of state.open) if (!seen.has(pos)) state.open.delete(pos);
    tbody.replaceChildren(...rows);
  }

  function details(v) {
    const dl = el("dl", { class: "meta" });
    const add = (k, val) => {
      if (val === null || val === undefined || val === "") return;
      dl.append(el("dt", { text: k }), el("dd", { text: String(val) }));
    };
    add("id", v.id);
    add("dead letter", `${position(v)} at ${v.timestamp || "?"}`);
    add("class", v.class);
    add("attempts / polls / redrives", `${v.attempt} / ${v.polls} / ${v.redrives}`);
    add("first error", v.first_error_at);
    add("last error", v.last_error_at);
    if (v.origin) add("origin", `${v.origin.topic} partition ${v.origin.partition} offset ${v.origin.offset}${v.origin.timestamp ? " at " + v.origin.timestamp : ""}`);
    add("group", v.group);
    add("instance", v.instance);
    if (v.truncated) add("truncated", `the value was cut from ${fmtInt(v.truncated)} bytes`);
    if (v.deliveries) add("deliveries", `delivered ${fmtInt(v.deliveries)} times by the share group; the earlier ones ended without an outcome`);

    const hs = v.headers || [];
    const headers = hs.length
      ? el(
          "table",
          { class: "small headers" },
          el("thead", {}, el("tr", {}, el("th", { text: "header" }), el("th", { text: "value" }))),
          el(
            "tbody",
            {},
            ...hs.map((h) =>
              el(
                "tr",
                { "data-header": h.key },
                el("td", { class: "mono", text: h.key }),
                el("td", { class: "mono" }, h.encoding === "base64" ? el("span", { class: "enc", text: "b64" }) : null, h.value)
              )
            )
          )
        )
      : el("p", { class: "muted", text: "no user headers" });

    let value;
    if (v.value_encoding === "hidden")
      value = el(
        "p",
        { class: "value-hidden", "data-sha256": v.value_sha256 || "" },
        el("span", { class: "enc", text: "hidden" }),
        ` ${fmtInt(v.value_size)} bytes, ${v.value_sha256 || ""} (analyzer.hide_values)`
      );
    else if (v.value === null || v.value === undefined) value = el("p", { class: "muted", text: "null value" });
    else {
      const cut = v.value.length > VALUE_PREVIEW;
      value = el(
        "pre",
        { class: "value" },
        v.value_encoding === "base64" ? el("span", { class: "enc", text: "b64" }) : null,
        cut ? v.value.slice(0, VALUE_PREVIEW) : v.value,
        cut ? el("span", { class: "muted", text: `\n… ${fmtInt(v.value.length - VALUE_PREVIEW)} more characters` }) : null
      );
    }
    // The recent list keeps only the first bytes of a value (value_cut);
    // the whole dead letter is read from the DLQ by its offset.
    // (Fetched with the token and shown here: a link could not send it.)
    let whole = null;
    if (v.value_cut) {
      const out = el("pre", { class: "value whole", hidden: "" });
      const load = el("button", { type: "button", class: "secondary", text: "the whole dead letter (JSON)" });
      load.addEventListener("click", async (e) => {
        e.stopPropagation();
        load.disabled = true;
        try {
          const r = await api(`api/deadletters/${v.partition}/${v.offset}?pipeline=${encodeURIComponent(state.selected)}`);
          out.textContent = JSON.stringify(r.dead_letter, null, 2);
        } catch (err) {
          out.textContent = "could not read it: " + err.message;
          if (err.status === 401) showError(err);
        } finally {
          out.hidden = false;
          load.disabled = false;
        }
      });
      whole = el("div", { class: "muted value-cut" }, `the first bytes of ${fmtInt(v.value_size)}: `, load, out);
    }
    return el(
      "div",
      { class: "details" },
      el("div", {}, el("h3", { text: "Error" }), el("pre", { class: "error-full", text: v.error || "" }), dl),
      el("div", {}, el("h3", { text: "Headers" }), headers, el("h3", { text: "Value" }), value, whole)
    );
  }

  function readFilters() {
    const f = {};
    for (const k of ["code", "reason", "since", "until", "key"]) {
      const v = $("filter-" + k).value.trim();
      if (v) f[k] = v;
    }
    return f;
  }

  function pickFilter(k, v) {
    $("filter-" + k).value = v;
    state.filters = readFilters();
    loadDeadLetters().catch(showError);
    $("deadletters").scrollIntoView({ behavior: "smooth", block: "start" });
  }

  // ---- the token ----

  function storageGet(k) {
    try {
      return sessionStorage.getItem(k) || "";
    } catch (e) {
      return ""; // storage off: the page keeps the token in memory only
    }
  }

  function storageSet(k, v) {
    try {
      if (v) sessionStorage.setItem(k, v);
      else sessionStorage.removeItem(k);
    } catch (e) {
      /* storage off */
    }
  }

  // askToken shows the token prompt and stops the refreshes until it is
  // answered; wrong says the token sent was refused (it is forgotten).
  function askToken(wrong) {
    if (wrong) {
      state.token = "";
      storageSet(TOKEN_KEY, "");
    }
    const form = $("auth");
    const msg = $("auth-error");
    msg.textContent = wrong ? "The analyzer did not accept that token: enter it again." : "";
    msg.hidden = !wrong;
    form.hidden = false;
    state.asking = true;
    state.asked++;
    document.body.dataset.auth = "required";
    document.body.dataset.authAsked = String(state.asked);
    setStatus(wrong ? "the token was refused" : "this analyzer needs a token", true);
    clearTimeout(state.timer);
    state.timer = 0;
    $("auth-token").focus();
  }

  function submitToken(ev) {
    ev.preventDefault();
    const input = $("auth-token");
    const v = input.value.trim();
    if (!v) return;
    input.value = "";
    state.token = v;
    storageSet(TOKEN_KEY, v);
    state.asking = false;
    $("auth").hidden = true;
    document.body.dataset.auth = "given";
    setStatus("loading…", false);
    refresh();
  }

  // ---- replay ----

  function loadToken() {
    state.token = storageGet(TOKEN_KEY);
    $("replay-token").value = storageGet(REPLAY_TOKEN_KEY);
  }

  function saveToken() {
    storageSet(REPLAY_TOKEN_KEY, $("replay-token").value);
  }

  function replayRequest() {
    const val = (id) => $(id).value.trim();
    const req = { pipeline: state.selected, dry_run: $("replay-dryrun").checked };
    const codes = splitList(val("replay-code"));
    const reasons = splitList(val("replay-reason"));
    if (codes.length) req.codes = codes;
    if (reasons.length) req.reasons = reasons;
    for (const k of ["since", "until", "key", "to"]) {
      const v = val("replay-" + k);
      if (v) req[k] = v;
    }
    const limit = val("replay-limit");
    if (limit) {
      if (!/^[0-9]+$/.test(limit) || +limit < 1) throw new Error("limit: want a whole number of at least 1, or nothing for all");
      req.limit = +limit;
    }
    return req;
  }

  async function submitReplay(ev) {
    ev.preventDefault();
    const out = $("replay-result");
    const button = $("replay-submit");
    let req;
    try {
      req = replayRequest();
    } catch (e) {
      showReplayError(e.message);
      return;
    }
    if (!req.dry_run) {
      const noFilter = !req.codes && !req.reasons && !req.since && !req.until && !req.key;
      const ok = window.confirm(
        (noFilter
          ? `No filter: republish EVERY dead letter of pipeline ${req.pipeline} to ${req.to || "its main topic"}? `
          : `Republish the matching dead letters of pipeline ${req.pipeline} to ${req.to || "its main topic"}? `) +
          "This writes to Kafka; a dry run shows what would be republished."
      );
      if (!ok) return;
      if (noFilter) req.all = true; // the API asks for it explicitly
    }
    // The replay form's token when given (the page's may be the read-only
    // one), else the page's (api adds it).
    const token = $("replay-token").value;
    const headers = { "Content-Type": "application/json" };
    if (token) headers.Authorization = "Bearer " + token;
    button.disabled = true;
    out.hidden = false;
    out.className = "running";
    out.removeAttribute("data-error");
    out.replaceChildren(el("p", { text: req.dry_run ? "dry run: scanning the DLQ…" : "replaying: scanning the DLQ and republishing…" }));
    try {
      const resp = await api("api/replay", { method: "POST", headers, body: JSON.stringify(req) });
      showReplay(resp);
      if (!req.dry_run) refresh();
    } catch (e) {
      showReplayError(e.message);
    } finally {
      button.disabled = false;
    }
  }

  function showReplayError(msg) {
    const out = $("replay-result");
    out.hidden = false;
    out.className = "failed";
    out.dataset.error = msg;
    out.replaceChildren(el("p", { class: "error", id: "replay-error", text: msg }));
  }

  function showReplay(r) {
    const out = $("replay-result");
    out.hidden = false;
    out.className = "done";
    out.removeAttribute("data-error");
    out.dataset.scanned = r.scanned;
    out.dataset.matched = r.matched;
    out.dataset.republished = r.republished;
    out.dataset.dryRun = r.dry_run ? "1" : "0";
    const summary = r.dry_run
      ? `Dry run: ${fmtInt(r.matched)} of ${fmtInt(r.scanned)} dead letters scanned match and would be republished to ${r.to}. Nothing was written.`
      : `Republished ${fmtInt(r.republished)} of ${fmtInt(r.matched)} matching dead letters (${fmtInt(r.scanned)} scanned) to ${r.to}.`;
    const parts = [
      el(
        "div",
        { class: "summary" },
        el("span", { class: "stat" }, el("span", { class: "label", text: "scanned" }), el("span", { class: "value", id: "replay-scanned", text: fmtInt(r.scanned) })),
        el("span", { class: "stat" }, el("span", { class: "label", text: "matched" }), el("span", { class: "value", id: "replay-matched", text: fmtInt(r.matched) })),
        el("span", { class: "stat" }, el("span", { class: "label", text: "republished" }), el("span", { class: "value", id: "replay-republished", text: fmtInt(r.republished) }))
      ),
      el("p", { text: summary }),
    ];
    const list = r.dead_letters || [];
    if (list.length) {
      parts.push(
        el("p", { class: "hint", text: list.length < r.matched ? `the first ${list.length} matched:` : "matched:" }),
        el(
          "div",
          { class: "table-wrap short" },
          el(
            "table",
            { class: "small" },
            el("thead", {}, el("tr", {}, ...["time (UTC)", "id", "reason", "code", "key"].map((h) => el("th", { text: h })))),
            el(
              "tbody",
              {},
              ...list.map((v) =>
                el(
                  "tr",
                  { "data-id": v.id },
                  el("td", { class: "time", text: fmtTime(v.timestamp) }),
                  el("td", { class: "mono", text: v.id }),
                  el("td", { text: v.reason }),
                  el("td", { class: "mono", text: v.code || "(none)" }),
                  bytesCell(v.key, v.key_encoding, "mono key")
                )
              )
            )
          )
        )
      );
    }
    out.replaceChildren(...parts);
  }

  // ---- the refresh loop ----

  function showError(e) {
    if (e && e.status === 401) {
      askToken(e.sentToken);
      return;
    }
    const msg = e && e.message ? e.message : String(e);
    document.body.dataset.error = msg;
    setStatus("refresh failed: " + msg + (state.stats ? " (showing the last data)" : ""), true);
  }

  function schedule() {
    clearTimeout(state.timer);
    state.timer = 0;
    if ($("autorefresh").checked && !state.asking) state.timer = setTimeout(refresh, REFRESH_MS);
  }

  async function refresh() {
    if (state.asking) return;
    if (state.busy) {
      state.again = true; // asked for while answering: once more after this one
      return;
    }
    state.busy = true;
    clearTimeout(state.timer);
    try {
      const flows = api("api/pipelines");
      const control = api("api/control");
      // Every answer is awaited: one refused is not left unhandled.
      const [stats, f, c] = await Promise.allSettled([api("api/stats?minutes=" + chartMinutes()), flows, control]);
      for (const r of [stats, f, c]) if (r.status === "rejected") throw r.reason;
      state.stats = stats.value;
      state.flows = f.value;
      state.control = c.value;
      if (!pipelines().length) throw new Error("the analyzer has no pipelines");
      choosePipeline();
      render();
      await loadDeadLetters();
      const t = fmtTime(state.stats.now).slice(11);
      setStatus(`updated ${t} UTC`, false);
      delete document.body.dataset.error;
      if (!state.loaded) {
        state.loaded = true;
        document.body.dataset.loaded = "1";
      }
    } catch (e) {
      showError(e);
    } finally {
      state.busy = false;
      if (state.again) {
        state.again = false;
        refresh();
      } else schedule();
    }
  }

  function render() {
    renderCards();
    renderDev();
    renderFlows();
    renderControl();
    const p = current();
    if (p) renderPipeline(p);
  }

  // ---- wiring ----

  function init() {
    loadToken();
    $("auth").addEventListener("submit", submitToken);
    $("replay-token").addEventListener("input", saveToken);
    $("replay").addEventListener("submit", submitReplay);
    $("dev-outage").addEventListener("click", devOutage);
    $("filters").addEventListener("submit", (e) => {
      e.preventDefault();
      state.filters = readFilters();
      loadDeadLetters().catch(showError);
    });
    $("filter-clear").addEventListener("click", () => {
      $("filters").reset();
      state.filters = {};
      loadDeadLetters().catch(showError);
    });
    $("filter-reason").addEventListener("change", () => {
      state.filters = readFilters();
      loadDeadLetters().catch(showError);
    });
    $("chart-range").addEventListener("change", () => {
      // Draw the minutes already here at once; the longer range needs
      // GET api/stats again.
      const p = current();
      if (p) renderChart(p);
      refresh();
    });
    $("autorefresh").addEventListener("change", () => {
      if ($("autorefresh").checked) refresh();
      else {
        clearTimeout(state.timer);
        state.timer = 0;
      }
    });
    window.addEventListener("hashchange", () => {
      if (!state.stats) return;
      if (choosePipeline()) {
        render();
        loadDeadLetters().catch(showError);
      }
    });
    let resizeTimer = 0;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        if (state.chart) state.chart.setSize({ width: chartWidth(), height: CHART_HEIGHT });
      }, 100);
    });
    refresh();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
