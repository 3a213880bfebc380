// The consumer portal: one account's webhook endpoints, deliveries and event catalog, through
// the /v1 API with the portal link's token as a bearer token (no cookie: nothing for a
// cross-site request to ride on). The page's Content-Security-Policy allows no inline script,
// and everything shown is set as text, never parsed as HTML.
"use strict";

(() => {
  const STORE = "ustun.portal.token";
  const PAGE = 20;
  const POLL_MS = 2000;
  const $ = (id) => document.getElementById(id);
  const VIEWS = ["refused", "endpoints", "endpoint", "delivery", "catalog"];

  let token = null;
  let catalog = null; // the event types this link may use, once read
  let endpoint = null; // the endpoint on screen, with its ETag
  let etag = null;
  let editing = null; // the endpoint the form edits; null: the form creates one
  let poll = null;

  // The token: from the fragment on arrival (then out of the address bar and history), else
  // from this tab's session storage (a reload). Storage may be off in a sandboxed frame.
  function takeToken() {
    const found = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (found) {
      const value = decodeURIComponent(found[1]);
      try {
        sessionStorage.setItem(STORE, value);
      } catch (_) { /* kept in memory only */ }
      history.replaceState(null, "", location.pathname + location.search + "#endpoints");
      return value;
    }
    try {
      return sessionStorage.getItem(STORE);
    } catch (_) {
      return null;
    }
  }

  function forgetToken() {
    token = null;
    try {
      sessionStorage.removeItem(STORE);
    } catch (_) { /* nothing kept */ }
  }

  function newKey() {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  class Problem extends Error {
    constructor(status, body) {
      const detail = body && body.detail ? body.detail : `The server answered ${status}.`;
      super(detail);
      this.status = status;
      this.body = body || {};
    }
  }

  async function api(method, path, body, headers) {
    const init = {
      method,
      cache: "no-store",
      credentials: "omit",
      headers: { authorization: `Bearer ${token}`, accept: "application/json", ...headers },
    };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["content-type"] = "application/json";
    }
    if (method === "POST" || method === "PATCH") init.headers["idempotency-key"] = newKey();
    const response = await fetch(path, init);
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    if (response.status === 401) {
      refuse(data && data.detail);
      throw new Problem(401, data);
    }
    if (!response.ok) throw new Problem(response.status, data);
    return { data, etag: response.headers.get("etag") };
  }

  // Results and errors, read out by screen readers (the region is aria-live).
  function say(message, isError) {
    const status = $("status");
    status.textContent = message;
    status.classList.toggle("error", Boolean(isError));
  }

  function fail(error) {
    if (error instanceof Problem) {
      if (error.status === 401) return;
      const fields = (error.body.errors || []).map((e) => `${e.field}: ${e.message}`);
      say([error.message, ...fields].join(" "), true);
    } else {
      say(`The request failed: ${error.message}`, true);
    }
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = value;
      else if (name === "className") node.className = value;
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  function when(value) {
    if (!value) return el("span", { text: "—" });
    return el("time", { datetime: value, text: new Date(value).toLocaleString() });
  }

  function badge(text, kind) {
    return el("span", { className: `badge ${kind || ""}`.trim(), text });
  }

  function facts(list, rows) {
    list.replaceChildren();
    for (const [term, value] of rows) {
      list.append(el("dt", { text: term }), el("dd", {}, value instanceof Node ? value : el("span", { text: String(value) })));
    }
  }

  function pretty(value) {
    return JSON.stringify(value, null, 2);
  }

  function refuse(detail) {
    forgetToken();
    stopPolling();
    $("nav").hidden = true;
    say("");
    show("refused");
    $("refused-detail").textContent = detail || "This portal link is missing, expired or revoked.";
  }

  function show(name) {
    $("loading").hidden = true;
    for (const view of VIEWS) $(`view-${view}`).hidden = view !== name;
    for (const link of document.querySelectorAll("#nav a")) {
      const here = link.dataset.view === name || (link.dataset.view === "endpoints" && (name === "endpoint" || name === "delivery"));
      if (here) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    const heading = document.querySelector(`#view-${name} h2`);
    if (heading) heading.focus();
  }

  function stopPolling() {
    if (poll !== null) clearTimeout(poll);
    poll = null;
  }

  async function types() {
    if (catalog === null) catalog = (await api("GET", "/v1/event-types")).data.data;
    return catalog;
  }

  // --- Endpoints -------------------------------------------------------------------------

  async function showEndpoints() {
    show("endpoints");
    const list = $("endpoint-list");
    const found = (await api("GET", `/v1/webhook-endpoints?limit=100`)).data.data;
    list.replaceChildren();
    $("endpoints-empty").hidden = found.length > 0;
    for (const item of found) {
      const state = item.enabled ? badge("Enabled", "ok") : badge("Disabled", "off");
      const circuit = item.circuit ? badge(`Circuit ${item.circuit.state.replace("_", "-")}`, item.circuit.state === "closed" ? "" : "warn") : null;
      list.append(
        el(
          "li",
          { className: "card" },
          el("h3", { className: "wrap" }, el("a", { href: `#endpoint/${item.id}`, text: item.url || item.id })),
          el("p", { className: "badges" }, state, circuit),
          item.description ? el("p", { text: item.description }) : null,
          el("p", { className: "muted wrap", text: `Events: ${item.events.join(", ")}` }),
        ),
      );
    }
  }

  async function openForm(target, anchor) {
    editing = target;
    const form = $("endpoint-form");
    anchor.after(form);
    $("endpoint-form-title").textContent = target ? "Edit endpoint" : "Add endpoint";
    $("endpoint-save").textContent = target ? "Save changes" : "Create endpoint";
    $("endpoint-url").value = target ? target.url : "";
    $("endpoint-description").value = target ? target.description || "" : "";
    const chosen = new Set(target ? target.events : []);
    const choices = $("endpoint-event-choices");
    choices.replaceChildren();
    const names = (await types()).map((t) => t.name);
    for (const name of [...names, ...[...chosen].filter((p) => !names.includes(p))]) {
      const id = `event-${name.replace(/[^a-z0-9_]/gi, "-")}`;
      const box = el("input", { type: "checkbox", id, name: "events", value: name, checked: chosen.has(name) });
      choices.append(el("div", { className: "check" }, box, el("label", { for: id, text: name === "*" ? "All events (*)" : name })));
    }
    form.hidden = false;
    $("add-endpoint").setAttribute("aria-expanded", String(!target));
    $("endpoint-url").focus();
  }

  function closeForm() {
    const form = $("endpoint-form");
    const inside = form.contains(document.activeElement);
    form.hidden = true;
    if (inside) document.querySelector("main section:not([hidden]) h2")?.focus();
    $("add-endpoint").setAttribute("aria-expanded", "false");
    editing = null;
  }

  async function saveEndpoint(event) {
    event.preventDefault();
    const url = $("endpoint-url").value.trim();
    const events = [...document.querySelectorAll("#endpoint-event-choices input:checked")].map((b) => b.value);
    if (!url) {
      say("Enter the URL that should receive the webhooks.", true);
      $("endpoint-url").focus();
      return;
    }
    if (events.length === 0) {
      say("Choose at least one event to receive.", true);
      document.querySelector("#endpoint-event-choices input")?.focus();
      return;
    }
    const description = $("endpoint-description").value.trim();
    try {
      if (editing) {
        const change = { url, events };
        if (description !== (editing.description || "")) change.description = description;
        const saved = await api("PATCH", `/v1/webhook-endpoints/${editing.id}`, change, { "if-match": etag });
        closeForm();
        render(saved.data, saved.etag);
        $("endpoint-title").focus();
        say("Endpoint saved.");
      } else {
        const body = { url, events };
        if (description) body.description = description;
        const made = await api("POST", "/v1/webhook-endpoints", body);
        closeForm();
        await showEndpoints();
        showSecret(made.data.secret || made.data.public_key, $("endpoint-list"));
        say("Endpoint created. Copy its signing secret now: it is shown once.");
      }
    } catch (error) {
      if (error instanceof Problem && error.status === 412 && editing) {
        const id = editing.id;
        closeForm();
        await showEndpoint(id);
        say("This endpoint was changed elsewhere; it has been reloaded. Make your change again.", true);
        return;
      }
      fail(error);
    }
  }

  function showSecret(secret, before) {
    const panel = $("secret-panel");
    before.before(panel);
    $("secret-value").value = secret || "";
    panel.hidden = false;
    panel.focus();
  }

  async function copySecret() {
    const field = $("secret-value");
    try {
      await navigator.clipboard.writeText(field.value);
    } catch (_) {
      field.select();
      document.execCommand("copy");
    }
    say("Secret copied to the clipboard.");
  }

  // --- One endpoint and its deliveries ---------------------------------------------------

  async function showEndpoint(id) {
    show("endpoint");
    const read = await api("GET", `/v1/webhook-endpoints/${encodeURIComponent(id)}`);
    render(read.data, read.etag);
    await showDeliveries(false);
  }

  function render(item, tag) {
    endpoint = item;
    etag = tag;
    $("endpoint-title").textContent = item.url || item.id;
    const rows = [
      ["Status", item.enabled ? badge("Enabled", "ok") : badge("Disabled", "off")],
      ["Events", item.events.join(", ")],
      ["Description", item.description || "—"],
      ["Signature", item.signature],
      ["Id", item.id],
      ["Created", when(item.created_at)],
    ];
    if (item.disabled_reason) rows.splice(1, 0, ["Disabled because", item.disabled_reason]);
    if (item.circuit) {
      const circuit = `${item.circuit.state.replace("_", "-")}` + (item.circuit.failures ? ` (${item.circuit.failures} failed attempt${item.circuit.failures === 1 ? "" : "s"} in a row)` : "");
      rows.splice(1, 0, ["Circuit", circuit]);
    }
    facts($("endpoint-facts"), rows);
    $("endpoint-toggle").textContent = item.enabled ? "Disable" : "Enable";
    if (!$("recover-since").value) {
      const dayAgo = new Date(Date.now() - 86400000);
      dayAgo.setMinutes(dayAgo.getMinutes() - dayAgo.getTimezoneOffset());
      $("recover-since").value = dayAgo.toISOString().slice(0, 16);
    }
  }

  let cursor = null;

  async function showDeliveries(more) {
    stopPolling();
    if (!endpoint) return;
    const list = $("delivery-list");
    const query = new URLSearchParams({ endpoint_id: endpoint.id, limit: String(PAGE) });
    if (more && cursor) query.set("cursor", cursor);
    const page = (await api("GET", `/v1/deliveries?${query}`)).data;
    const kinds = await eventTypesById();
    if (!more) list.replaceChildren();
    cursor = page.next_cursor;
    $("deliveries-more").hidden = !cursor;
    $("deliveries-empty").hidden = !(list.children.length === 0 && page.data.length === 0);
    for (const delivery of page.data) list.append(deliveryCard(delivery, kinds));
    if (!more && page.data.some((d) => d.status === "pending")) {
      const shown = endpoint.id;
      poll = setTimeout(() => {
        if (endpoint && endpoint.id === shown && !$("view-endpoint").hidden) showDeliveries(false).catch(fail);
      }, POLL_MS);
    }
  }

  async function eventTypesById() {
    const events = (await api("GET", "/v1/events?limit=100")).data.data;
    return new Map(events.map((e) => [e.id, e.type]));
  }

  function statusBadge(status) {
    const kind = { succeeded: "ok", failed: "warn", dead: "off", pending: "" }[status];
    return badge(status, kind);
  }

  function deliveryCard(delivery, kinds) {
    const retry = el("button", { type: "button", className: "secondary", "data-retry": delivery.id, text: "Retry" });
    retry.setAttribute("aria-label", `Retry delivery ${delivery.id}`);
    return el(
      "li",
      { className: "card delivery" },
      el("h4", { className: "wrap" }, el("a", { href: `#delivery/${delivery.id}`, text: kinds.get(delivery.event_id) || delivery.event_id })),
      el("p", { className: "badges" }, statusBadge(delivery.status), el("span", { className: "muted", text: `${delivery.attempt_count} attempt${delivery.attempt_count === 1 ? "" : "s"}` })),
      el("p", { className: "muted" }, el("span", { text: "Created " }), when(delivery.created_at), delivery.next_attempt_at ? el("span", { text: " · next attempt " }) : null, delivery.next_attempt_at ? when(delivery.next_attempt_at) : null),
      el("div", { className: "actions" }, retry),
    );
  }

  async function retry(id, then) {
    try {
      await api("POST", `/v1/deliveries/${encodeURIComponent(id)}/retry`);
      say("Retry queued: the delivery is sent again now.");
      await then();
    } catch (error) {
      fail(error);
    }
  }

  // --- One delivery ----------------------------------------------------------------------

  // `refresh`: the view is on screen already (a poll, a retry): the focus stays where it is.
  async function showDelivery(id, refresh) {
    stopPolling();
    if (!refresh) show("delivery");
    const delivery = (await api("GET", `/v1/deliveries/${encodeURIComponent(id)}`)).data;
    const event = await api("GET", `/v1/events/${encodeURIComponent(delivery.event_id)}`).then((r) => r.data, () => null);
    $("delivery-title").textContent = `Delivery of ${event ? event.type : delivery.event_id}`;
    $("delivery-back").href = `#endpoint/${delivery.endpoint_id}`;
    facts($("delivery-facts"), [
      ["Status", statusBadge(delivery.status)],
      ["Attempts", delivery.attempt_count],
      ["Next attempt", when(delivery.next_attempt_at)],
      ["Event", delivery.event_id],
      ["Delivery", delivery.id],
    ]);
    $("delivery-retry").dataset.retry = delivery.id;
    $("delivery-request").textContent = event ? pretty(event) : "(no longer kept)";
    const list = $("attempt-list");
    list.replaceChildren();
    $("attempts-empty").hidden = delivery.attempts.length > 0;
    for (const attempt of [...delivery.attempts].reverse()) {
      const outcome = attempt.status_code !== null ? `HTTP ${attempt.status_code}` : "No response";
      const good = attempt.status_code !== null && attempt.status_code >= 200 && attempt.status_code < 300;
      const rows = el("dl", { className: "facts" });
      facts(rows, [
        ["When", when(attempt.attempted_at)],
        ["Latency", attempt.latency_ms === null ? "—" : `${attempt.latency_ms} ms`],
        ["Error", attempt.error || "—"],
      ]);
      list.append(
        el(
          "li",
          { className: "card" },
          el("h4", {}, badge(outcome, good ? "ok" : "warn")),
          rows,
          el("p", { className: "label", text: "Response body" }),
          el("pre", { tabindex: "0", text: attempt.response || "(empty)" }),
        ),
      );
    }
    if (delivery.status === "pending") {
      poll = setTimeout(() => {
        if (!$("view-delivery").hidden) showDelivery(id, true).catch(fail);
      }, POLL_MS);
    }
  }

  // --- Catalog ---------------------------------------------------------------------------

  async function showCatalog() {
    stopPolling();
    show("catalog");
    const list = $("catalog-list");
    list.replaceChildren();
    for (const type of await types()) {
      list.append(
        el(
          "article",
          { className: "card" },
          el("h3", { className: "wrap" }, el("code", { text: type.name }), type.deprecated ? badge("Deprecated", "warn") : null),
          el("p", { text: type.description || "" }),
          el("details", {}, el("summary", { text: "Schema" }), el("pre", { tabindex: "0", text: pretty(type.schema) })),
          type.example ? el("details", {}, el("summary", { text: "Example" }), el("pre", { tabindex: "0", text: pretty(type.example) })) : null,
        ),
      );
    }
  }

  // --- Wiring ----------------------------------------------------------------------------

  async function route() {
    if (!token) return;
    const [view, id] = location.hash.replace(/^#/, "").split("/");
    say("");
    try {
      if (view === "endpoint" && id) await showEndpoint(decodeURIComponent(id));
      else if (view === "delivery" && id) await showDelivery(decodeURIComponent(id));
      else if (view === "catalog") await showCatalog();
      else {
        stopPolling();
        await showEndpoints();
      }
    } catch (error) {
      fail(error);
    }
  }

  async function act(work, done) {
    try {
      await work();
      if (done) say(done);
    } catch (error) {
      fail(error);
    }
  }

  function wire() {
    $("add-endpoint").addEventListener("click", () => {
      if (!$("endpoint-form").hidden && !editing) closeForm();
      else openForm(null, $("add-endpoint").parentElement).catch(fail);
    });
    $("endpoint-cancel").addEventListener("click", closeForm);
    $("endpoint-form").addEventListener("submit", saveEndpoint);
    $("secret-copy").addEventListener("click", copySecret);
    $("secret-done").addEventListener("click", () => {
      $("secret-panel").hidden = true;
      $("secret-value").value = "";
      document.querySelector("main section:not([hidden]) h2")?.focus();
    });
    $("endpoint-edit").addEventListener("click", () => openForm(endpoint, $("endpoint-actions")).catch(fail));
    $("endpoint-toggle").addEventListener("click", () =>
      act(async () => {
        const enabled = !endpoint.enabled;
        const saved = await api("PATCH", `/v1/webhook-endpoints/${endpoint.id}`, { enabled }, { "if-match": etag });
        render(saved.data, saved.etag);
        say(enabled ? "Endpoint enabled." : "Endpoint disabled: nothing is sent to it until you enable it.");
      }),
    );
    $("endpoint-rotate").addEventListener("click", () =>
      act(async () => {
        const rotated = await api("POST", `/v1/webhook-endpoints/${endpoint.id}/rotate-secret`);
        render(rotated.data, rotated.etag);
        showSecret(rotated.data.secret || rotated.data.public_key, $("recover-form"));
        say("New secret made; the old one keeps signing for 24 hours. Copy the new one now: it is shown once.");
      }),
    );
    $("endpoint-test").addEventListener("click", () =>
      act(async () => {
        await api("POST", `/v1/webhook-endpoints/${endpoint.id}/test`);
        await showDeliveries(false);
      }, "Test event sent."),
    );
    $("recover-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("recover-since").value;
      if (!value) {
        say("Choose the date and time to recover from.", true);
        return;
      }
      act(async () => {
        const since = new Date(value).toISOString();
        const done = await api("POST", `/v1/webhook-endpoints/${endpoint.id}/recover`, { since });
        await showDeliveries(false);
        say(`${done.data.recovered} failed deliver${done.data.recovered === 1 ? "y" : "ies"} re-sent.`);
      });
    });
    $("deliveries-more").addEventListener("click", () => showDeliveries(true).catch(fail));
    $("delivery-list").addEventListener("click", (event) => {
      const button = event.target.closest("button[data-retry]");
      if (button) retry(button.dataset.retry, () => showDeliveries(false));
    });
    $("delivery-retry").addEventListener("click", (event) => {
      const id = event.currentTarget.dataset.retry;
      retry(id, () => showDelivery(id, true));
    });
    window.addEventListener("hashchange", route);
  }

  document.addEventListener("DOMContentLoaded", () => {
    wire();
    token = takeToken();
    if (!token) {
      refuse("This page needs a portal link: open the link you were given.");
      return;
    }
    $("nav").hidden = false;
    route();
  });
})();
