// The mainstem console: polls the management API and redraws the visible page.
// Credentials live in sessionStorage only and go out as HTTP basic auth on each call.
"use strict";

const POLL_MS = Number(new URLSearchParams(location.search).get("poll_ms")) || 2000;
const PAGES = ["overview", "streams", "queues", "connections"];
const $ = (id) => document.getElementById(id);

function credentials() { return sessionStorage.getItem("mainstem-auth"); }

async function api(method, path) {
  const response = await fetch(path, {
    method, headers: { Authorization: "Basic " + credentials(), "X-Mainstem-Console": "1" },
  });
  if (response.status === 401) { logout("Login failed: " + (await reason(response))); return null; }
  if (!response.ok) throw new Error(method + " " + path + ": " + (await reason(response)));
  return response.status === 204 ? null : response.json();
}

async function reason(response) {
  try { return (await response.json()).reason; } catch { return response.statusText; }
}

function cell(text, numeric) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (numeric) td.className = "number";
  return td;
}

function fill(tableId, rows, toCells) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows.map((row) => {
    const tr = document.createElement("tr");
    tr.dataset.name = row.name;
    tr.append(...toCells(row));
    return tr;
  }));
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

const render = {
  async overview() {
    const o = await api("GET", "/api/overview");
    if (!o) return;
    $("publish-rate").textContent = o.message_stats.publish_details.rate + " msg/s";
    $("bytes-rate").textContent = bytes(o.message_stats.stream_publish_bytes_details.rate) + "/s";
    $("total-messages").textContent = o.queue_totals.messages;
    $("total-streams").textContent = o.object_totals.streams;
    $("total-queues").textContent = o.object_totals.queues;
    $("total-connections").textContent = o.object_totals.connections;
    const banner = $("alarm-banner");
    banner.hidden = o.alarms.length === 0;
    banner.textContent = "Resource alarm: " + o.alarms.join(", ") + " (publishers are held back)";
    fill("listeners-table", o.listeners.map((l) => ({ ...l, name: l.protocol })),
      (l) => [cell(l.protocol), cell(l.ip_address), cell(l.port, true)]);
  },
  async streams() {
    const rows = await api("GET", "/api/streams");
    if (!rows) return;
    fill("streams-table", rows, (s) => [
      cell(s.vhost), cell(s.name), cell(s.partitions.length, true), cell(s.messages, true),
      cell(Math.min(...s.partitions.map((p) => p.first_offset)), true),
      cell(Math.max(...s.partitions.map((p) => p.last_offset)), true),
      cell(bytes(s.size_bytes), true),
    ]);
  },
  async queues() {
    const rows = await api("GET", "/api/queues");
    if (!rows) return;
    fill("queues-table", rows, (q) => [
      cell(q.vhost), cell(q.name), cell(q.type), cell(q.messages, true)]);
  },
  async connections() {
    const rows = await api("GET", "/api/connections");
    if (!rows) return;
    fill("connections-table", rows, (c) => {
      const close = document.createElement("button");
      close.textContent = "Close";
      close.className = "close-connection";
      close.addEventListener("click", async () => {
        await api("DELETE", "/api/connections/" + encodeURIComponent(c.name));
        await refresh();
      });
      const action = document.createElement("td");
      action.append(close);
      return [cell(c.name), cell(c.protocol), cell(c.ssl ? "yes" : "no"), cell(c.user),
        cell(c.vhost), cell(bytes(c.recv_oct), true), cell(bytes(c.send_oct), true), action];
    });
  },
};

function currentPage() {
  const page = location.hash.slice(1);
  return PAGES.includes(page) ? page : "overview";
}

async function refresh() {
  if (!credentials()) return;
  const page = currentPage();
  for (const name of PAGES) {
    $(name).hidden = name !== page;
    $("nav-" + name).classList.toggle("active", name === page);
  }
  try {
    await render[page]();
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) {
    $("status").textContent = String(error);
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
  showLogin(message);
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
window.addEventListener("hashchange", refresh);

if (credentials()) { $("nav").hidden = false; refresh(); } else { showLogin(); }
setInterval(refresh, POLL_MS);
