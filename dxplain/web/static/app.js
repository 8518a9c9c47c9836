// dxplain serve: pick a run, find a user, read why each recommendation was made (the run's rows, as the API gives them).
"use strict";
const params = new URLSearchParams(location.search);
const token = params.get("token");
const $ = (id) => document.getElementById(id);

async function api(path) {
  const r = await fetch(path, { headers: token ? { Authorization: "Bearer " + token } : {} });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function fmt(x) {
  if (x === null || x === undefined) return "";
  if (typeof x === "number") return Math.abs(x) >= 1e-3 || x === 0 ? x.toPrecision(4) : x.toExponential(2);
  return String(x);
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c));
  return e;
}

function itemName(id, info) {
  if (!info || !info.title) return `item ${id}`;
  return info.year ? `${info.title} (${info.year})` : info.title;
}

function userName(id, info) {
  if (!info) return `user ${id}`;
  const about = Object.entries(info).filter(([k, v]) => v !== null && typeof v !== "object" && k !== "zip").map(([, v]) => v);
  return about.length ? `user ${id} (${about.join(" · ")})` : `user ${id}`;
}

function reasonsTable(reasons, side) {
  const rows = reasons.filter((r) => r.side === side);
  const scale = Math.max(1e-300, ...rows.map((r) => Math.abs(r.importance || 0)));
  const head = side === "item" ? "the user's own interaction (item)" : "another user of the item (user)";
  const t = el("table", { class: "reasons", "data-side": side },
    el("tr", {}, el("th", {}, head), el("th", {}, "rating"), el("th", {}, "α"), el("th", {}, "similarity"),
      el("th", {}, "importance"), el("th", {}, "")));
  for (const r of rows) {
    const who = r.kind && r.kind !== "interaction" && r.kind !== "unobserved_term"
      ? `(${r.kind}${r.kind === "bias" ? "" : " entries"})`
      : side === "item" ? itemName(r.train_item, r.train_item_info) : userName(r.train_user, r.train_user_info);
    const width = Math.round(120 * Math.abs(r.importance || 0) / scale);
    const bar = el("span", { class: "bar " + ((r.importance || 0) >= 0 ? "pos" : "neg"), style: `width:${width}px` });
    t.append(el("tr", { class: r.kind && r.kind !== "interaction" ? "extra" : "reason", "data-train-user": String(r.train_user),
      "data-train-item": String(r.train_item), "data-importance": String(r.importance) },
      el("td", {}, who), el("td", { class: "num" }, fmt(r.rating)), el("td", { class: "num" }, fmt(r.global_importance)),
      el("td", { class: "num" }, fmt(r.local_importance)), el("td", { class: "num" }, fmt(r.importance)), el("td", {}, bar)));
  }
  return t;
}

async function showHealth(run) {
  const s = await api(`/api/runs/${encodeURIComponent(run)}/summary`);
  const dl = el("dl");
  const h = s.health;
  const fid = h.fidelity_max_rel_error || {};
  const rows = [
    ["data", h.dataset], ["model", `${h.model_kind || ""} (${h.loss || ""})`],
    ["targets", `${h.targets} for ${h.users} users, ${h.attributions} reasons`],
    ["fidelity (max rel. error)", `item ${fmt(fid.item)} · user ${fmt(fid.user)} against --tol ${fmt(h.fidelity_tol)}: ${h.fidelity_ok ? "exact enough" : "ABOVE tolerance"}`],
  ];
  for (const [k, v] of rows) dl.append(el("dt", {}, k), el("dd", {}, String(v)));
  $("health").replaceChildren(el("h2", {}, `Run ${s.run}`), dl);
  $("internals-body").textContent = JSON.stringify(s.internals, null, 1);
}

async function showUser(run, user, openItem) {
  $("message").textContent = "";
  $("targets").replaceChildren();
  $("changes").replaceChildren();
  if (!user) return;
  try {
    const u = await api(`/api/runs/${encodeURIComponent(run)}/users/${encodeURIComponent(user)}`);
    const list = [el("h2", {}, `Why ${userName(u.user, u.info)} gets these items`)];
    for (const t of u.targets) {
      const d = el("details", { class: "target", "data-item": String(t.item) },
        el("summary", {}, `#${t.rec_rank ?? "–"} ${itemName(t.item, t.info)}: prediction ${fmt(t.prediction)}, score ${fmt(t.score)}`),
        reasonsTable(t.reasons, "item"), reasonsTable(t.reasons, "user"));
      if (openItem !== null && String(t.item) === openItem) d.open = true;
      list.push(d);
    }
    $("targets").replaceChildren(...list);
    document.body.dataset.user = String(u.user);
    showChanges(run, user);
  } catch (e) {
    $("message").textContent = e.message;
  }
}

async function showChanges(run, user) {
  try {
    const c = await api(`/api/runs/${encodeURIComponent(run)}/users/${encodeURIComponent(user)}/changes`);
    if (c.from === null || c.entered === null) {
      $("changes").replaceChildren(el("p", { class: "note" }, "No earlier run with targets to compare with."));
      return;
    }
    const line = (what, xs) => el("li", { "data-change": what }, `${what}: `,
      xs.length ? xs.map((x) => itemName(x.item, x.info) + (x.rec_rank ? ` (#${x.rec_rank})` : "")).join(", ") : "none");
    $("changes").replaceChildren(el("h3", {}, `Since run ${c.from}`), el("ul", {}, line("entered", c.entered), line("left", c.left)));
  } catch (e) {
    $("changes").replaceChildren(el("p", { class: "note" }, e.message));
  }
}

async function findItems(run, q) {
  $("message").textContent = "";
  const found = $("found");
  found.replaceChildren();
  if (!q) return;
  try {
    const items = await api(`/api/runs/${encodeURIComponent(run)}/items?q=${encodeURIComponent(q)}`);
    if (!items.length) { found.append(el("p", { class: "note" }, `no item's id or title matches "${q}"`)); return; }
    const ul = el("ul", { class: "items" });
    for (const it of items) {
      const b = el("button", { type: "button", class: "item", "data-item": String(it.id) }, itemName(it.id, it));
      b.addEventListener("click", () => usersOf(run, it));
      ul.append(el("li", {}, b));
    }
    found.append(el("h3", {}, "Items"), ul);
  } catch (e) {
    $("message").textContent = e.message;
  }
}

async function usersOf(run, it) {
  const found = $("found");
  try {
    const r = await api(`/api/runs/${encodeURIComponent(run)}/items/${encodeURIComponent(it.id)}/users`);
    const ul = el("ul", { class: "users" });
    for (const u of r.users) {
      const b = el("button", { type: "button", class: "user", "data-user": String(u.user) }, `user ${u.user}` + (u.rec_rank ? ` (#${u.rec_rank})` : ""));
      b.addEventListener("click", () => { $("user").value = String(u.user); showUser(run, String(u.user), String(it.id)); });
      ul.append(el("li", {}, b));
    }
    const shown = r.users.length < r.total ? `${r.users.length} of ${r.total}` : `${r.total}`;
    found.replaceChildren(el("h3", {}, `${itemName(it.id, it)}: explained for ${shown} users`), ul);
  } catch (e) {
    found.replaceChildren(el("p", { class: "note" }, e.message));
  }
}

async function suggest(run, q) {
  try {
    const ids = await api(`/api/runs/${encodeURIComponent(run)}/users?q=${encodeURIComponent(q)}`);
    $("users").replaceChildren(...ids.map((i) => el("option", { value: i })));
  } catch (e) { /* suggestions are a convenience */ }
}

async function main() {
  const runs = await api("/api/runs");
  if (!runs.length) { $("message").textContent = "no published run in this folder yet: run `dxplain refresh`"; return; }
  for (const r of runs) $("run").append(el("option", { value: r.id }, r.id + (r.latest ? " (latest)" : "")));
  $("run").value = params.get("run") || runs[0].id;
  const current = () => $("run").value;
  $("run").addEventListener("change", () => { showHealth(current()); showUser(current(), $("user").value, null); });
  $("user").addEventListener("input", () => suggest(current(), $("user").value));
  $("search").addEventListener("submit", (ev) => { ev.preventDefault(); showUser(current(), $("user").value.trim(), null); });
  $("item-search").addEventListener("submit", (ev) => { ev.preventDefault(); findItems(current(), $("item").value.trim()); });
  await showHealth(current());
  if (params.get("user")) {
    $("user").value = params.get("user");
    await showUser(current(), params.get("user"), params.get("item"));
  }
  document.body.dataset.ready = "1";
}

main().catch((e) => { $("message").textContent = e.message; });
