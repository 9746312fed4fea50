// The mainstem console: polls the management API and redraws the visible page.
// Paths and fields are those of RabbitMQ's HTTP API wherever RabbitMQ has the object;
// streams' publishers, BSON events, Iggy and segments use mainstem's own paths.
// Credentials live in sessionStorage only and go out as HTTP basic auth on each call.
"use strict";

const POLL_MS = Number(new URLSearchParams(location.search).get("poll_ms")) || 3000;
const CHART_POINTS = 200;  // samples kept per chart: 10 minutes at the default poll
// The overview's charts are drawn from the broker's history of samples (10 minutes, as
// RabbitMQ's management keeps), so they survive a reload; one point per poll.
const HISTORY_S = 600;
const HISTORY_INCR_S = Math.max(1, Math.round(POLL_MS / 1000));
const OVERVIEW_PATH = "/api/overview?" + ["msg_rates", "lengths"].map((kind) =>
  kind + "_age=" + HISTORY_S + "&" + kind + "_incr=" + HISTORY_INCR_S).join("&");
const PAGES = ["overview", "connections", "channels", "exchanges", "exchange", "queues",
  "queue", "streams", "events", "iggy", "segments", "admin"];
const NAV_OF = { queue: "queues", exchange: "exchanges" };  // a detail page lights its list's tab
const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

// -- talking to the API ------------------------------------------------------------

function credentials() { return sessionStorage.getItem("mainstem-auth"); }

async function api(method, path, body) {
  const auth = credentials();
  const headers = { Authorization: "Basic " + auth, "X-Mainstem-Console": "1" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await reach(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401) {
    const why = await reason(response);
    // A user tagged management or monitoring is refused what is outside its scope: an
    // error to show, not a failed login (then /api/whoami answers still).
    if (path !== "/api/whoami" && (await loggedIn())) throw new Error(method + " " + path + ": " + why);
    logout("Login failed: " + why);
    return null;
  }
  if (!response.ok) throw new Error(method + " " + path + ": " + (await reason(response)));
  const text = await response.text();
  // an answer to a user who logged out meanwhile is not drawn for the next one
  if (credentials() !== auth) throw new Error("logged out");
  return text ? JSON.parse(text) : null;
}

async function loggedIn() {
  const headers = { Authorization: "Basic " + credentials(), "X-Mainstem-Console": "1" };
  return (await reach("/api/whoami", { headers })).ok;
}

// A broker that does not answer (stopped, or the network between) is a banner on every
// page until it answers again; what the pages show stays, as it was when last seen.
let downSince = null;

async function reach(path, options) {
  try {
    const response = await fetch(path, options);
    brokerAnswered();
    return response;
  } catch (error) {
    downSince = downSince || new Date();
    const banner = $("down-banner");
    banner.textContent = "The broker is not answering (since " +
      downSince.toLocaleTimeString() + "): what is shown is as it was then.";
    banner.hidden = false;
    throw new Error("the broker is not answering: " + error.message);
  }
}

function brokerAnswered() {
  downSince = null;
  $("down-banner").hidden = true;
}

async function reason(response) {
  try { return (await response.json()).reason; } catch { return response.statusText; }
}

// -- formatting ----------------------------------------------------------------------

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  n = n || 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

// RabbitMQ's rates: message_stats.<kind>_details.rate, absent until there was traffic.
function rate(object, kind) {
  const details = object && object.message_stats && object.message_stats[kind + "_details"];
  return details ? details.rate : 0;
}

// 1234567 -> "1.2M", 150000 -> "150k", 950 -> "950"
function compact(n) {
  for (const [size, unit] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
    if (Math.abs(n) >= size) return +(n / size).toFixed(Math.abs(n) >= 10 * size ? 0 : 1) + unit;
  }
  return String(+n.toFixed(2));
}

const perSecond = (n) => (Math.round(n * 10) / 10) + "/s";
const vhostName = (name) => (name === "" ? "(AMQP default)" : name);

function link(text, href) {
  const a = document.createElement("a");
  a.textContent = text;
  a.href = href;
  return a;
}

function button(text, className, action) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  b.className = className;
  b.addEventListener("click", () => run(action, $("status")));
  return b;
}

// A destructive button asks for a second click; which one is armed survives redraws.
let armed = null;

function dangerButton(key, text, action, className = "") {
  const b = button(armed === key ? "Really " + text.toLowerCase() + "?" : text,
    ("danger-button " + className).trim(), async () => {
      if (armed !== key) { armed = key; b.textContent = "Really " + text.toLowerCase() + "?"; return; }
      armed = null;
      await action();
    });
  return b;
}

// -- tables ----------------------------------------------------------------------------

// columns: [title, row => value, "num" | undefined]; a value may be text, a number or a Node.
function table(id, columns, rows, key = (row) => row.name) {
  const element = $(id);
  if (!element.tHead) {
    const head = element.createTHead().insertRow();
    for (const [title, , kind] of columns) {
      const th = document.createElement("th");
      th.textContent = title;
      if (kind === "num") th.className = "number";
      head.append(th);
    }
    element.createTBody();
  }
  const body = element.tBodies[0];
  const fresh = rows.map((row) => {
    const tr = document.createElement("tr");
    tr.dataset.name = key(row);
    tr.source = JSON.stringify(row);  // what its buttons act on, shown or not
    for (const [, value, kind] of columns) {
      const td = tr.insertCell();
      const shown = value(row);
      if (shown instanceof Node) td.append(shown);
      else td.textContent = shown === null || shown === undefined ? "" : String(shown);
      if (kind === "num") td.className = "number";
    }
    return tr;
  });
  // Rows that did not change stay the same elements: a poll's redraw must not swallow a
  // click that lands between it and the next one.
  const old = body.rows;
  const unchanged = fresh.length === old.length && fresh.every((tr, i) =>
    tr.source === old[i].source && tr.innerHTML === old[i].innerHTML);
  if (!unchanged) body.replaceChildren(...fresh);
  element.classList.toggle("empty", rows.length === 0);
}

// -- charts (uPlot) -------------------------------------------------------------------

const COLORS = ["#3b82f6", "#10b981", "#f59e0b", "#ef4444", "#8b5cf6"];

class Chart {
  constructor(elementId, labels, unit) {
    this.elementId = elementId;
    this.labels = labels;
    this.unit = unit;
    this.plot = null;
    this.reset();
  }

  reset() {
    this.data = [[], ...this.labels.map(() => [])];
    if (this.plot) { this.plot.destroy(); this.plot = null; }
  }

  push(values) {
    this.data[0].push(Date.now() / 1000);
    values.forEach((value, i) => this.data[i + 1].push(value));
    if (this.data[0].length > CHART_POINTS) for (const column of this.data) column.shift();
  }

  // The whole history at once: times (s) and one column of values per series.
  replace(times, columns) {
    this.data = [times, ...columns];
  }

  // Drawn only while visible: uPlot needs the element's width.
  draw() {
    const element = $(this.elementId);
    const width = element.clientWidth;
    if (!width) return;
    if (!this.plot) {
      this.plot = new uPlot({
        width, height: 220,
        scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(max, 1)] } },
        series: [{}, ...this.labels.map((label, i) => ({
          label, stroke: COLORS[i], width: 2, fill: COLORS[i] + "22", points: { show: false },
          value: (u, v) => (v === null || v === undefined ? "–" : v + this.unit),
        }))],
        // counts of 100,000 and more as 100k, 1.5M: a label that fits its axis
        axes: [{}, { size: 60, values: (u, ticks) => ticks.map(compact) }],
      }, this.data, element);
    } else {
      if (this.plot.width !== width) this.plot.setSize({ width, height: 220 });
      this.plot.setData(this.data);
    }
  }
}

const charts = {
  rates: new Chart("rates-chart", ["publish", "deliver/get", "ack"], "/s"),
  depth: new Chart("depth-chart", ["ready", "unacked"], ""),
  queue: new Chart("queue-chart", ["ready", "unacked"], ""),
};
window.mainstemCharts = charts;  // for the browser's devtools and the console tests

// -- shared lookups ----------------------------------------------------------------------

// Connection name (RabbitMQ's "peer -> local") to what people call it: the name the client
// gave (AMQP client_properties.connection_name, stream peer property connection_name).
function connectionLabel(connections, name) {
  const connection = connections.find((c) => c.name === name);
  return (connection && connection.user_provided_name) || name;
}

// A detail page's terms and values; each value's element is idPrefix + its term.
function facts(listId, idPrefix, entries) {
  $(listId).replaceChildren(...Object.entries(entries).flatMap(([term, value]) => {
    const dt = document.createElement("dt");
    const dd = document.createElement("dd");
    dt.textContent = term;
    dd.textContent = value;
    dd.id = idPrefix + term.replace("/", "-").replaceAll(" ", "-");
    return [dt, dd];
  }));
}

function fillSelects(className, names) {
  for (const select of document.querySelectorAll("select." + className)) {
    const current = [...select.options].map((o) => o.value).join("\n");
    if (current === names.join("\n")) continue;
    const chosen = select.value;
    select.replaceChildren(...names.map((name) => new Option(name, name)));
    if (names.includes(chosen)) select.value = chosen;
  }
}

// -- pages -----------------------------------------------------------------------------

const render = {
  async overview() {
    const o = lastOverview;
    $("node-name").textContent = o.node + " · " + (o.product_name || "") + " " +
      (o.product_version || "");
    $("publish-rate").textContent = perSecond(rate(o, "publish"));
    $("deliver-rate").textContent = perSecond(rate(o, "deliver_get"));
    $("bytes-rate").textContent = bytes(rate(o, "stream_publish_bytes")) + "/s";
    const totals = o.queue_totals || {};
    $("total-ready").textContent = totals.messages_ready || 0;
    $("total-unacked").textContent = totals.messages_unacknowledged || 0;
    $("total-messages").textContent = totals.messages || 0;
    for (const kind of ["connections", "channels", "queues", "streams", "exchanges", "consumers"]) {
      $("total-" + kind).textContent = o.object_totals[kind] || 0;
    }
    const alarms = o.alarms || [];
    $("alarm-banner").hidden = alarms.length === 0;
    $("alarm-banner").textContent = "Resource alarm: " + alarms.join(", ") +
      " (publishers are held back)";
    table("listeners-table", [["protocol", (l) => l.protocol], ["address", (l) => l.ip_address],
      ["port", (l) => l.port, "num"]], o.listeners, (l) => l.protocol);
    charts.rates.draw();
    charts.depth.draw();
  },

  async connections() {
    const rows = await api("GET", "/api/connections");
    if (!rows) return;
    table("connections-table", [
      ["name", (c) => c.user_provided_name || ""],
      ["address", (c) => c.name],
      ["protocol", (c) => c.protocol],
      ["client", (c) => [c.client_properties.product, c.client_properties.version]
        .filter(Boolean).join(" ")],
      ["user", (c) => c.user], ["vhost", (c) => c.vhost],
      ["TLS", (c) => (c.ssl ? "yes" : "no")],
      ["channels", (c) => c.channels ?? "", "num"],
      ["received", (c) => bytes(c.recv_oct), "num"],
      ["sent", (c) => bytes(c.send_oct), "num"],
      ["in/s", (c) => bytes(c.recv_oct_details ? c.recv_oct_details.rate : 0) + "/s", "num"],
      ["", (c) => dangerButton("connection:" + c.name, "Close", async () => {
        await api("DELETE", "/api/connections/" + enc(c.name));
        await refresh();
      }, "close-connection")],
    ], rows);
  },

  async channels() {
    const [rows, connections] = await Promise.all([api("GET", "/api/channels"),
      api("GET", "/api/connections")]);
    if (!rows || !connections) return;
    table("channels-table", [
      ["channel", (c) => c.name],
      ["connection", (c) => connectionLabel(connections, (c.connection_details || {}).name)],
      ["user", (c) => c.user], ["vhost", (c) => c.vhost],
      ["mode", (c) => (c.confirm ? "confirm" : c.transactional ? "transactional" : "")],
      ["prefetch", (c) => c.prefetch_count, "num"],
      ["consumers", (c) => c.consumer_count, "num"],
      ["unacked", (c) => c.messages_unacknowledged, "num"],
      ["publish", (c) => perSecond(rate(c, "publish")), "num"],
      ["deliver/get", (c) => perSecond(rate(c, "deliver_get")), "num"],
      ["ack", (c) => perSecond(rate(c, "ack")), "num"],
    ], rows);
  },

  async exchanges() {
    const rows = await api("GET", "/api/exchanges");
    if (!rows) return;
    table("exchanges-table", [
      ["vhost", (e) => e.vhost],
      ["name", (e) => link(vhostName(e.name), "#exchange/" + enc(e.vhost) + "/" +
        enc(e.name || "amq.default"))],
      ["type", (e) => e.type],
      ["features", (e) => [e.durable && "durable", e.auto_delete && "auto-delete",
        e.internal && "internal"].filter(Boolean).join(", ")],
      ["in", (e) => perSecond(rate(e, "publish_in")), "num"],
      ["out", (e) => perSecond(rate(e, "publish_out")), "num"],
      ["", (e) => (e.name === "" || e.name.startsWith("amq.") ? "" :
        dangerButton("exchange:" + e.vhost + "/" + e.name, "Delete", async () => {
          await api("DELETE", "/api/exchanges/" + enc(e.vhost) + "/" + enc(e.name));
          await refresh();
        }))],
    ], rows);
  },

  async exchange(vhost, name) {
    const path = enc(vhost) + "/" + enc(name);
    const e = await api("GET", "/api/exchanges/" + path);
    if (!e) return;
    $("exchange-title").textContent = name + " in " + vhost;
    facts("exchange-facts", "exchange-fact-", {
      type: e.type, durable: e.durable ? "yes" : "no",
      "auto-delete": e.auto_delete ? "yes" : "no", internal: e.internal ? "yes" : "no",
      arguments: JSON.stringify(e.arguments || {}), policy: e.policy || "none",
      "operator policy": e.operator_policy || "none",
      "effective definition": JSON.stringify(e.effective_policy_definition || {}),
      in: perSecond(rate(e, "publish_in")), out: perSecond(rate(e, "publish_out")),
    });
    const [from, to] = await Promise.all([
      api("GET", "/api/exchanges/" + path + "/bindings/source"),
      api("GET", "/api/exchanges/" + path + "/bindings/destination")]);
    const bindingColumns = (end, title) => [
      [title, (b) => link(vhostName(b[end]), (b[end + "_type"] || "exchange") === "queue"
        ? "#queue/" + enc(vhost) + "/" + enc(b[end])
        : "#exchange/" + enc(vhost) + "/" + enc(b[end] || "amq.default"))],
      ["kind", (b) => b[end + "_type"] || "exchange"],
      ["routing key", (b) => b.routing_key],
      ["arguments", (b) => JSON.stringify(b.arguments || {})]];
    table("exchange-source-table", bindingColumns("destination", "to"), from || [],
      (b) => b.destination_type + ":" + b.destination + "/" + b.routing_key);
    table("exchange-destination-table", bindingColumns("source", "from"), to || [],
      (b) => b.source + "/" + b.routing_key);
  },

  async queues() {
    const rows = await api("GET", "/api/queues");
    if (!rows) return;
    table("queues-table", [
      ["vhost", (q) => q.vhost],
      ["name", (q) => link(q.name, "#queue/" + enc(q.vhost) + "/" + enc(q.name))],
      ["type", (q) => q.type], ["state", (q) => q.state],
      ["ready", (q) => q.messages_ready, "num"],
      ["unacked", (q) => q.messages_unacknowledged, "num"],
      ["total", (q) => q.messages, "num"],
      ["consumers", (q) => q.consumers ?? 0, "num"],
      ["incoming", (q) => perSecond(rate(q, "publish")), "num"],
      ["deliver/get", (q) => perSecond(rate(q, "deliver_get")), "num"],
      ["ack", (q) => perSecond(rate(q, "ack")), "num"],
    ], rows);
  },

  async queue(vhost, name) {
    const path = enc(vhost) + "/" + enc(name);
    const q = await api("GET", "/api/queues/" + path);
    if (!q) return;
    $("queue-title").textContent = name + " in " + vhost;
    const queueFacts = {
      type: q.type, state: q.state, durable: q.durable ? "yes" : "no",
      ready: q.messages_ready, unacked: q.messages_unacknowledged, total: q.messages,
      consumers: q.consumers ?? 0, incoming: perSecond(rate(q, "publish")),
      "deliver/get": perSecond(rate(q, "deliver_get")), ack: perSecond(rate(q, "ack")),
      arguments: JSON.stringify(q.arguments || {}),
    };
    facts("queue-facts", "queue-fact-", queueFacts);
    charts.queue.push([q.messages_ready || 0, q.messages_unacknowledged || 0]);
    charts.queue.draw();
    const [bindings, consumers, connections] = await Promise.all([
      api("GET", "/api/queues/" + path + "/bindings"), api("GET", "/api/consumers/" + enc(vhost)),
      api("GET", "/api/connections")]);
    table("queue-bindings-table", [
      ["from", (b) => vhostName(b.source)], ["routing key", (b) => b.routing_key],
      ["arguments", (b) => JSON.stringify(b.arguments || {})],
      ["", (b) => (b.source === "" ? "" : button("Unbind", "unbind", async () => {
        await api("DELETE", "/api/bindings/" + enc(vhost) + "/e/" + enc(b.source) + "/q/" +
          enc(name) + "/" + enc(b.properties_key));
        await refresh();
      }))],
    ], bindings || [], (b) => b.source + "/" + b.routing_key);
    table("queue-consumers-table", [
      ["tag", (c) => c.consumer_tag],
      ["connection", (c) => connectionLabel(connections || [],
        (c.channel_details || {}).connection_name)],
      ["ack required", (c) => (c.ack_required ? "yes" : "no")],
      ["prefetch", (c) => c.prefetch_count, "num"],
      ["active", (c) => (c.active === false ? "no" : "yes")],
    ], (consumers || []).filter((c) => c.queue.name === name), (c) => c.consumer_tag);
  },

  async streams() {
    // publishers and consumers as RabbitMQ's stream management plugin lists them
    const [streams, publishers, consumers, offsets, connections] = await Promise.all([
      api("GET", "/api/streams"), api("GET", "/api/stream/publishers"),
      api("GET", "/api/stream/consumers"), api("GET", "/api/consumer-offsets"),
      api("GET", "/api/connections")]);
    if (!streams) return;
    const label = (row) => connectionLabel(connections, row.connection_details.name);
    table("streams-table", [
      ["vhost", (s) => s.vhost], ["name", (s) => s.name],
      ["partitions", (s) => s.partitions.length, "num"],
      ["messages", (s) => s.messages, "num"],
      ["first offset", (s) => Math.min(...s.partitions.map((p) => p.first_offset)), "num"],
      ["last offset", (s) => Math.max(...s.partitions.map((p) => p.last_offset)), "num"],
      ["size", (s) => bytes(s.size_bytes), "num"],
      // where the bytes are: on local disk, or in the tier (all local without one)
      ["local", (s) => bytes(s.local_bytes), "num"],
      ["tiered", (s) => bytes(s.tiered_bytes), "num"],
      ["tiered segments", (s) => s.tiered_segments, "num"],
    ], streams);
    table("publishers-table", [
      ["connection", label], ["stream", (p) => p.queue.name],
      ["id", (p) => p.publisher_id, "num"], ["reference", (p) => p.reference],
      ["published", (p) => p.published, "num"],
      ["last sequence", (p) => p.sequence ?? "", "num"],
    ], publishers, (p) => p.connection_details.name + "/" + p.publisher_id);
    table("stream-consumers-table", [
      ["connection", label], ["stream", (c) => c.queue.name],
      ["subscription", (c) => c.subscription_id, "num"],
      ["consumed", (c) => c.consumed, "num"], ["offset", (c) => c.offset, "num"],
      ["lag", (c) => c.offset_lag, "num"], ["credits", (c) => c.credits, "num"],
    ], consumers, (c) => c.connection_details.name + "/" + c.subscription_id);
    table("offsets-table", [
      ["stream", (o) => o.stream], ["partition", (o) => o.partition, "num"],
      ["reference", (o) => o.reference], ["offset", (o) => o.offset, "num"],
      ["lag", (o) => o.lag, "num"],
    ], offsets, (o) => o.stream + "/" + o.reference);
  },

  async events() {
    // A BSON event channel is a stream of one partition.
    const [streams, consumers, binders, projections] = await Promise.all([
      api("GET", "/api/streams"), api("GET", "/api/consumers"), api("GET", "/api/binders"),
      api("GET", "/api/projections")]);
    if (!streams) return;
    table("event-channels-table", [
      ["vhost", (s) => s.vhost], ["name", (s) => s.name], ["events", (s) => s.messages, "num"],
      ["size", (s) => bytes(s.size_bytes), "num"],
      ["subscriptions", (s) => consumers.filter((c) => c.queue.vhost === s.vhost &&
        c.queue.name === s.name).length, "num"],
    ], streams.filter((s) => s.partitions.length === 1));
    table("binders-table", [
      ["vhost", (b) => b.vhost], ["name", (b) => b.name],
      ["documents", (b) => b.documents, "num"], ["projections", (b) => b.projections.join(", ")],
    ], binders);
    table("projections-table", [
      ["vhost", (p) => p.vhost], ["name", (p) => p.name], ["channel", (p) => p.channel],
      ["binder", (p) => p.binder], ["id field", (p) => p.id_field], ["fold", (p) => p.fold],
      ["position", (p) => p.position, "num"], ["lag", (p) => p.lag, "num"],
    ], projections);
  },

  async iggy() {
    const streams = await api("GET", "/api/iggy/streams");
    if (!streams) return;
    const topics = streams.flatMap((s) => s.topics.map((t) => ({ ...t, stream: s.name })));
    const groups = topics.flatMap((t) => t.consumer_groups.map((g) => ({
      ...g, stream: t.stream, topic: t.name })));
    table("iggy-streams-table", [
      ["id", (s) => s.id, "num"], ["name", (s) => s.name],
      ["topics", (s) => s.topics.length, "num"],
      ["messages", (s) => s.topics.reduce((n, t) => n + t.messages, 0), "num"],
    ], streams);
    table("iggy-topics-table", [
      ["stream", (t) => t.stream], ["id", (t) => t.id, "num"], ["name", (t) => t.name],
      ["partitions", (t) => t.partitions, "num"], ["messages", (t) => t.messages, "num"],
      ["size", (t) => bytes(t.size_bytes), "num"],
      ["consumer groups", (t) => t.consumer_groups.length, "num"],
    ], topics);
    table("iggy-groups-table", [
      ["stream", (g) => g.stream], ["topic", (g) => g.topic], ["id", (g) => g.id, "num"],
      ["name", (g) => g.name], ["members", (g) => g.members.length, "num"],
      ["partitions per member", (g) => g.members.map((m) => "client " + m.client_id + ": " +
        m.partitions.join(",")).join("; ")],
    ], groups);
  },

  async segments() {
    const rows = await api("GET", "/api/segments");
    if (!rows) return;
    table("segments-table", [
      ["segment", (s) => s.name], ["events", (s) => s.events, "num"],
      ["start byte", (s) => s.start_offset, "num"], ["write byte", (s) => s.write_offset, "num"],
      ["size", (s) => bytes(s.write_offset - s.start_offset), "num"],
      ["sealed", (s) => (s.sealed ? "sealed" : "open")],
    ], rows);
  },

  async admin() {
    const [users, vhosts, permissions, policies, operatorPolicies, topicPermissions,
      vhostLimits, userLimits] = await Promise.all([
      api("GET", "/api/users"), api("GET", "/api/vhosts"), api("GET", "/api/permissions"),
      api("GET", "/api/policies"), api("GET", "/api/operator-policies"),
      api("GET", "/api/topic-permissions"), api("GET", "/api/vhost-limits"),
      api("GET", "/api/user-limits")]);
    if (!users) return;
    fillSelects("user-select", users.map((u) => u.name));
    table("users-table", [
      ["name", (u) => u.name],
      ["tags", (u) => (Array.isArray(u.tags) ? u.tags.join(", ") : u.tags)],
      ["", (u) => dangerButton("user:" + u.name, "Delete", async () => {
        await api("DELETE", "/api/users/" + enc(u.name));
        await refresh();
      })],
    ], users);
    table("vhosts-table", [
      ["name", (v) => v.name],
      ["", (v) => dangerButton("vhost:" + v.name, "Delete", async () => {
        await api("DELETE", "/api/vhosts/" + enc(v.name));
        await refresh();
      })],
    ], vhosts);
    table("permissions-table", [
      ["user", (p) => p.user], ["vhost", (p) => p.vhost], ["configure", (p) => p.configure],
      ["write", (p) => p.write], ["read", (p) => p.read],
      ["", (p) => button("Clear", "clear-permission", async () => {
        await api("DELETE", "/api/permissions/" + enc(p.vhost) + "/" + enc(p.user));
        await refresh();
      })],
    ], permissions, (p) => p.user + "@" + p.vhost);
    const kinds = [...policies.map((p) => ({ ...p, kind: "policies" })),
      ...operatorPolicies.map((p) => ({ ...p, kind: "operator-policies" }))];
    table("policies-table", [
      ["name", (p) => p.name], ["vhost", (p) => p.vhost],
      ["kind", (p) => (p.kind === "policies" ? "policy" : "operator policy")],
      ["pattern", (p) => p.pattern], ["apply-to", (p) => p["apply-to"]],
      ["priority", (p) => p.priority, "num"],
      ["definition", (p) => JSON.stringify(p.definition)],
      ["", (p) => button("Clear", "clear-policy", async () => {
        await api("DELETE", "/api/" + p.kind + "/" + enc(p.vhost) + "/" + enc(p.name));
        await refresh();
      })],
    ], kinds, (p) => p.kind + ":" + p.name + "@" + p.vhost);
    table("topic-permissions-table", [
      ["user", (t) => t.user], ["vhost", (t) => t.vhost], ["exchange", (t) => t.exchange],
      ["write", (t) => t.write], ["read", (t) => t.read],
      ["", (t) => button("Clear", "clear-permission", async () => {
        await api("DELETE", "/api/topic-permissions/" + enc(t.vhost) + "/" + enc(t.user) +
          "/" + enc(t.exchange));
        await refresh();
      })],
    ], topicPermissions, (t) => t.user + "@" + t.vhost + "/" + t.exchange);
    // one row per limit: RabbitMQ lists each owner's limits as one object
    const limits = [["vhost-limits", "virtual host", "vhost", vhostLimits],
      ["user-limits", "user", "user", userLimits]].flatMap(([path, of, key, rows]) =>
      rows.flatMap((row) => Object.entries(row.value).map(([limit, value]) =>
        ({ path, of, owner: row[key], limit, value }))));
    table("limits-table", [
      ["of", (l) => l.of], ["name", (l) => l.owner], ["limit", (l) => l.limit],
      ["value", (l) => l.value, "num"],
      ["", (l) => button("Clear", "clear-limit", async () => {
        await api("DELETE", "/api/" + l.path + "/" + enc(l.owner) + "/" + enc(l.limit));
        await refresh();
      })],
    ], limits, (l) => l.path + ":" + l.owner + "/" + l.limit);
  },
};

// -- forms -----------------------------------------------------------------------------

// Runs an action, showing its outcome (or its error) in `output`.
async function run(action, output) {
  try {
    const message = await action();
    if (output) { output.textContent = message || ""; output.classList.remove("error"); }
  } catch (error) {
    if (output) { output.textContent = error.message; output.classList.add("error"); }
  }
}

function onSubmit(formId, action) {
  const form = $(formId);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(form));
    for (const box of form.querySelectorAll("input[type=checkbox]")) values[box.name] = box.checked;
    run(async () => {
      const message = await action(values, form);
      await refresh();
      return message;
    }, form.querySelector(".result"));
  });
}

function currentQueue() {
  const [, vhost, name] = route();
  return [vhost, name, enc(vhost) + "/" + enc(name)];
}

onSubmit("queue-form", async (v) => {
  await api("PUT", "/api/queues/" + enc(v.vhost) + "/" + enc(v.name), {
    durable: v.durable, auto_delete: false, arguments: { "x-queue-type": v.type } });
  return "Queue " + v.name + " added";
});

onSubmit("exchange-form", async (v) => {
  await api("PUT", "/api/exchanges/" + enc(v.vhost) + "/" + enc(v.name), {
    type: v.type, durable: v.durable, auto_delete: false, internal: false, arguments: {} });
  return "Exchange " + v.name + " added";
});

onSubmit("bind-form", async (v) => {
  const [vhost, name] = currentQueue();
  await api("POST", "/api/bindings/" + enc(vhost) + "/e/" + enc(v.source) + "/q/" + enc(name),
    { routing_key: v.routing_key, arguments: {} });
  return "Bound";
});

onSubmit("publish-form", async (v) => {
  const [vhost, name] = currentQueue();
  const properties = { delivery_mode: v.persistent ? 2 : 1 };
  if (v.headers.trim()) properties.headers = JSON.parse(v.headers);
  const answer = await api("POST", "/api/exchanges/" + enc(vhost) + "/amq.default/publish", {
    properties, routing_key: name, payload: v.payload, payload_encoding: "string" });
  return answer && answer.routed ? "Message published" : "Message published but not routed";
});

onSubmit("get-form", async (v) => {
  const [, , path] = currentQueue();
  const messages = await api("POST", "/api/queues/" + path + "/get", {
    count: Number(v.count), ackmode: v.ackmode, encoding: "auto", truncate: 50000 });
  table("got-table", [
    ["#", (m) => m.index, "num"], ["routing key", (m) => m.routing_key],
    ["redelivered", (m) => (m.redelivered ? "yes" : "no")],
    ["properties", (m) => JSON.stringify(m.properties || {})],
    ["payload", (m) => m.payload], ["bytes", (m) => m.payload_bytes, "num"],
  ], messages.map((m, index) => ({ ...m, index: index + 1 })), (m) => String(m.index));
  return messages.length ? messages.length + " message(s)" : "Queue is empty";
});

$("purge-queue").addEventListener("click", () => run(async () => {
  const [, , path] = currentQueue();
  await api("DELETE", "/api/queues/" + path + "/contents");
  await refresh();
  return "Purged";
}, $("queue-action-result")));

$("delete-queue").addEventListener("click", () => run(async () => {
  const [vhost, name, path] = currentQueue();
  const key = "queue:" + vhost + "/" + name;
  if (armed !== key) { armed = key; $("delete-queue").textContent = "Really delete?"; return ""; }
  armed = null;
  await api("DELETE", "/api/queues/" + path);
  location.hash = "#queues";
  return "";
}, $("queue-action-result")));

onSubmit("user-form", async (v, form) => {
  await api("PUT", "/api/users/" + enc(v.name), { password: v.password, tags: v.tags });
  form.reset();
  return "User " + v.name + " added";
});

onSubmit("vhost-form", async (v, form) => {
  await api("PUT", "/api/vhosts/" + enc(v.name));
  form.reset();
  return "Virtual host " + v.name + " added";
});

onSubmit("permission-form", async (v) => {
  await api("PUT", "/api/permissions/" + enc(v.vhost) + "/" + enc(v.user),
    { configure: v.configure, write: v.write, read: v.read });
  return "Permission set for " + v.user + " in " + v.vhost;
});

onSubmit("policy-form", async (v) => {
  let definition;
  try { definition = JSON.parse(v.definition); } catch (error) {
    throw new Error("the definition is not JSON: " + error.message);
  }
  await api("PUT", "/api/" + v.kind + "/" + enc(v.vhost) + "/" + enc(v.name),
    { pattern: v.pattern, "apply-to": v.apply_to, priority: Number(v.priority), definition });
  return "Policy " + v.name + " set in " + v.vhost;
});

onSubmit("topic-permission-form", async (v) => {
  await api("PUT", "/api/topic-permissions/" + enc(v.vhost) + "/" + enc(v.user),
    { exchange: v.exchange, write: v.write, read: v.read });
  return "Topic permission set for " + v.user + " on " + v.exchange + " in " + v.vhost;
});

onSubmit("limit-form", async (v) => {
  await api("PUT", "/api/" + v.kind + "/" + enc(v.owner) + "/" + enc(v.limit),
    { value: Number(v.value) });
  return "Limit " + v.limit + " set for " + v.owner;
});

// Export: the broker's definitions as a file to save (the link a click downloads).
$("export-definitions").addEventListener("click", () => run(async () => {
  const definitions = await api("GET", "/api/definitions");
  if (!definitions) return;
  const download = $("definitions-download");
  if (download.href) URL.revokeObjectURL(download.href);
  download.href = URL.createObjectURL(new Blob([JSON.stringify(definitions, null, 2)],
    { type: "application/json" }));
  download.hidden = false;
  download.click();
}, $("status")));

// Import: a definitions file, whole or not at all; what it ignored is listed.
onSubmit("import-form", async (v, form) => {
  let definitions;
  try { definitions = JSON.parse(await v.file.text()); } catch (error) {
    throw new Error(v.file.name + " is not JSON: " + error.message);
  }
  const answer = await api("POST", "/api/definitions", definitions);
  form.reset();
  const warnings = (answer && answer.warnings) || [];
  return "Imported " + v.file.name + (warnings.length ? "; " + warnings.join("; ") : "");
});

// -- routing and polling ---------------------------------------------------------------

// "#queue/%2F/orders" -> ["queue", "/", "orders"]
function route() {
  const [page, ...args] = location.hash.slice(1).split("/").map(decodeURIComponent);
  return PAGES.includes(page) ? [page, ...args] : ["overview"];
}

let lastOverview = null;
let shownQueue = null;

// The overview is polled on every page; its charts are the broker's history.
async function sampleOverview() {
  const o = await api("GET", OVERVIEW_PATH);
  if (!o) return false;
  lastOverview = o;
  const totals = o.queue_totals || {};
  const lengths = ["messages_ready", "messages_unacknowledged"].map((name) =>
    oldestFirst((totals[name + "_details"] || {}).samples));
  charts.depth.replace(lengths[0].map((s) => s.timestamp / 1000),
    lengths.map((samples) => samples.map((s) => s.sample)));
  // rates between a counter's successive samples (monitors only: the node's counters)
  const counters = ["publish", "deliver_get", "ack"].map((name) => oldestFirst(
    (((o.message_stats || {})[name + "_details"]) || {}).samples));
  charts.rates.replace(counters[0].slice(1).map((s) => s.timestamp / 1000),
    counters.map((samples) => samples.slice(1).map((s, i) =>
      Math.max(0, s.sample - samples[i].sample) /
      Math.max(0.001, (s.timestamp - samples[i].timestamp) / 1000))));
  return true;
}

const oldestFirst = (samples) => (samples || []).slice().reverse();

async function refreshVhosts() {
  const vhosts = await api("GET", "/api/vhosts");
  if (vhosts) fillSelects("vhost-select", vhosts.map((v) => v.name));
}

let refreshing = false;

async function refresh() {
  if (!credentials() || refreshing) return;
  refreshing = true;
  const [page, ...args] = route();
  for (const name of PAGES) $(name).hidden = name !== page;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.id === "nav-" + (NAV_OF[page] || page));
  }
  if (page === "queue" && args.join("/") !== shownQueue) {
    shownQueue = args.join("/");
    charts.queue.reset();
    $("got-table").replaceChildren();
    $("delete-queue").textContent = "Delete";
  }
  try {
    if (await sampleOverview()) {
      await refreshVhosts();
      await render[page](...args);
      $("status").textContent = "updated " + new Date().toLocaleTimeString();
    }
  } catch (error) {
    if (credentials()) $("status").textContent = String(error.message || error);
  } finally {
    refreshing = false;
  }
}

function showLogin(message) {
  $("login").hidden = false;
  $("nav").hidden = true;
  for (const name of PAGES) $(name).hidden = true;
  $("login-error").textContent = message || "";
}

function logout(message) {
  sessionStorage.removeItem("mainstem-auth");
  forget();
  showLogin(message);
}

// What the previous user saw goes with them: every table, fact, chart, figure, form and
// message, and the page they were on.
function forget() {
  for (const element of document.querySelectorAll("main table, main dl")) {
    element.replaceChildren();
    element.classList.remove("empty");
  }
  for (const chart of Object.values(charts)) chart.reset();
  for (const form of document.querySelectorAll("main form:not(#login)")) form.reset();
  for (const select of document.querySelectorAll("select.vhost-select, select.user-select")) {
    select.replaceChildren();
  }
  for (const element of document.querySelectorAll(
    ".result, #status, .tile b, #node-name, #queue-title, #exchange-title")) {
    element.textContent = "";
  }
  for (const banner of document.querySelectorAll(".banner")) banner.hidden = true;
  const download = $("definitions-download");
  if (download.href) URL.revokeObjectURL(download.href);
  download.removeAttribute("href");
  download.hidden = true;
  lastOverview = null;
  shownQueue = null;
  armed = null;
  downSince = null;
  history.replaceState(null, "", location.pathname + location.search);
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("mainstem-auth",
    btoa(unescape(encodeURIComponent($("login-user").value + ":" + $("login-password").value))));
  $("login").hidden = true;
  $("nav").hidden = false;
  refresh();
});
$("logout").addEventListener("click", () => logout());
window.addEventListener("hashchange", () => { armed = null; refresh(); });
window.addEventListener("resize", () => Object.values(charts).forEach((chart) => chart.draw()));

if (credentials()) { $("nav").hidden = false; refresh(); } else { showLogin(); }
setInterval(refresh, POLL_MS);
