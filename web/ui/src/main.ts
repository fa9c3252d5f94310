// The page: a token form, the host's terminals (open, new, kill), open
// terminals in tabs (pane.ts: each its own xterm.js terminal and windowed
// subscription), the listening ports, a few live metrics, the processes
// (machine.ts) and the logs (logpanel.ts). A terminal
// another client holds is shared: shown at its holder's size, never
// resized, with a Take over (share.ts).

import * as ahp from "./ahp.js";
import { Client, RpcError } from "./client.js";
import { LinkError, type Closed, type Link } from "./link.js";
import { connectLink, endpoint, forcedTransport, refusedText } from "./connect.js";
import { WT_UNAUTHORIZED } from "./tio.js";
import { backoff, graceLeft, refusal } from "./resume.js";
import { holderText, shareTarget, sharesText } from "./share.js";
import { identityText, mayCreate, mayFiles, mayShare } from "./roles.js";
import { numbered, terminalId, terminalName, type Name } from "./names.js";
import { Pane, type PaneHost } from "./pane.js";
import { brokenHint, previewHref, previewable, subdomainLogin, type PreviewStatus } from "./preview.js";
import { Files } from "./files.js";
import { Machine } from "./machine.js";
import { Logs } from "./logpanel.js";
import { pathFromCwd } from "./names.js";
import { loginPath, takeFragment } from "./oidc.js";
import { Tabs, decodeTabs, fontSize, nextFontSize, restorable, shortcut, type TabState } from "./tabs.js";

// sessionStorage belongs to the origin, not the path: daemons behind one
// proxy under /vm1/ and /vm2/ share it, so what is kept there is kept per
// page path, and one daemon's token, tabs or clientId never reach another.
const SCOPE = new URL(".", document.baseURI).pathname; // "/", "/vm1/"
const TOKEN_KEY = "sidecar.token:" + SCOPE; // sessionStorage: typed once per tab, never in the URL
const TABS_KEY = "sidecar.tabs:" + SCOPE; // sessionStorage: the open tabs, reopened after a reload
const CLIENT_KEY = "sidecar.clientId:" + SCOPE;
const FONT_KEY = "sidecar.fontSize"; // localStorage: kept across tabs and sessions
const COPY_KEY = "sidecar.copyOnSelect"; // localStorage

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

const statuses: string[] = []; // the last few, for tests

function status(text: string, state: "idle" | "busy" | "ok" | "error"): void {
  const el = $("status");
  el.textContent = text;
  el.dataset.state = state;
  statuses.push(text);
  if (statuses.length > 50) statuses.shift();
}

function clientId(): string {
  let id = sessionStorage.getItem(CLIENT_KEY);
  if (!id) {
    id = "web-" + Math.floor(Math.random() * 2 ** 48).toString(36);
    sessionStorage.setItem(CLIENT_KEY, id);
  }
  return id;
}

/** A refusal that retrying will not fix: it is shown, and the page stops. */
class Final extends Error {}

let client: Client | null = null;
let link: Link | null = null;
const tabs = new Tabs();
const panes = new Map<string, Pane>(); // the open terminals, by URI
let terminals: ahp.TerminalInfo[] = [];
let font = fontSize(localStorage.getItem(FONT_KEY));
let copyOnSelect = localStorage.getItem(COPY_KEY) === "1";
let notice = ""; // the line under the panes when no pane has one (a terminal gone)
let split: string | null = null; // the terminal shown beside the active one, if the pane is split
let busy = false; // an initialize or a reconnect is under way: its own failure decides what follows
let retry = 0; // fresh connections tried since the last success
let attempt = 0; // reconnect attempts since the link was lost
let lostAt = 0; // when the link was lost (0: not lost)
let retryTimer: ReturnType<typeof setTimeout> | undefined;
let sessionTimer: ReturnType<typeof setTimeout> | undefined; // renews the preview's session cookie
let previewStatus: PreviewStatus | null = null; // GET web/preview: null while off or unknown
let lastPorts: ahp.Port[] = [];
let initResult: any = null; // the last initialize result: its capabilities and defaultDirectory

/** active is the pane shown, if any. */
function active(): Pane | null {
  return tabs.active ? (panes.get(tabs.active) ?? null) : null;
}

function showLogin(error: string): void {
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = error;
  $<HTMLInputElement>("token").focus();
  // The OIDC sign-in, where the daemon offers it (oidc.ts).
  void loginPath(document.baseURI).then((p) => {
    if (!p) return;
    const b = $("oidc-login");
    b.hidden = false;
    b.onclick = () => location.assign(new URL(p, document.baseURI));
  });
}

/** info asks the daemon for its certificate pin; a POST carries Origin, so a refused origin is told here. */
async function info(): Promise<{ certHashes: string[] }> {
  const res = await fetch(endpoint(document.baseURI, "web/info", "https:"), { method: "POST" });
  const body = await res.json().catch(() => ({}));
  if (res.status === 403) throw new Final(body.error ?? `this page's origin (${location.origin}) is not allowed by the daemon`);
  if (!res.ok) throw new Error(`web/info: HTTP ${res.status}`);
  return body;
}

/** open opens a link (connect.ts: a ticket per attempt, happy eyeballs); its messages go to the client using it, and its loss to lost(). */
async function open(token: string, say: (kind: string) => void): Promise<Link> {
  const { certHashes } = await info();
  const forced = forcedTransport(location.search);
  say(forced ?? ("WebTransport" in window ? "WebTransport, WebSocket" : "WebSocket"));
  return connectLink({
    token,
    certHashes,
    forced,
    handlers: (self) => ({
      onmessage: (t: string) => {
        const l = self();
        if (l && client?.carries(l)) client.receive(t);
      },
      onclose: (closed: Closed) => {
        const l = self();
        if (l && l === link) lost(closed);
      },
    }),
  });
}

/** use makes l the link of c. */
function use(c: Client, l: Link): void {
  link = l;
  c.use(l);
}

/** drop closes the link in use (a failed attempt's), without calling that a loss. */
function drop(why: string): void {
  const l = link;
  link = null;
  client?.lost(why);
  try {
    l?.close();
  } catch {
    // already closed
  }
}

function connected(l: Link): void {
  void previewLogin();
  retry = 0;
  attempt = 0;
  lostAt = 0;
  status(`connected (${l.kind})`, "ok");
  renderIdentity();
  $("app").hidden = false;
  $("logout").hidden = false;
}

/** refused handles an error that retrying will not fix; it returns false for any other. */
function refused(err: unknown): boolean {
  if (err instanceof LinkError && err.closed?.code === WT_UNAUTHORIZED) {
    sessionStorage.removeItem(TOKEN_KEY);
    status("refused", "error");
    showLogin(refusedText(err.closed.reason));
    return true;
  }
  if (err instanceof Final) {
    status("refused", "error");
    showLogin(err.message);
    return true;
  }
  return false;
}

/** connect starts a new session: initialize, the root and metrics, and the tabs open before. */
async function connect(): Promise<void> {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    showLogin("");
    return;
  }
  clearTimeout(retryTimer);
  $("login").hidden = true;
  busy = true;
  let c: Client;
  let init: any;
  try {
    const l = await open(token, (kind) => status(`connecting (${kind})…`, "busy"));
    c = client = new Client(clientId());
    use(c, l);
    c.on(ahp.ROOT, (m) => rootMessage(m));
    c.on(ahp.METRICS, (m) => {
      if (m.method !== "otlp/exportMetrics") return;
      renderMetrics(ahp.readMetrics(m.params.payload));
      machine.onMetrics();
    });
    init = await c.initialize();
    busy = false;
    connected(l);
  } catch (err) {
    busy = false;
    if (refused(err)) return;
    if (err instanceof RpcError && (err.data as { kind?: string } | undefined)?.kind === "clientIdInUse") {
      // Our clientId's old state waits for a reconnect we cannot make (a
      // reload forgot its token): start afresh under a new clientId.
      sessionStorage.removeItem(CLIENT_KEY);
      drop("clientId in use");
      client = null;
      void connect();
      return;
    }
    drop("connect failed");
    client = null;
    scheduleRetry(String((err as Error)?.message ?? err));
    return;
  }
  // Connected: a loss from here on is lost()'s to handle.
  initResult = init;
  showRoot(init.snapshots?.find((s: any) => s.resource === ahp.ROOT)?.state as ahp.RootState | undefined);
  c.subscribe(ahp.METRICS).catch(() => {});
  machine.connected(c, init);
  logs.connected(c, init);
  reopen(c);
}

/**
 * reopen attaches the tabs of this page (a new session after a lost one)
 * or, after a reload, those it had open (sessionStorage), each resuming
 * its terminal; one the host no longer has (it restarted) is closed, and
 * the page says so rather than leave a dead screen taking keystrokes.
 */
function reopen(c: Client): void {
  const onHost = (uri: string) => terminals.some((t) => t.resource === uri);
  let want: TabState | null = tabs.tabs.length > 0 ? tabs.state() : decodeTabs(sessionStorage.getItem(TABS_KEY));
  if (!want) return renderAll();
  const { state, gone } = restorable(want, onHost);
  for (const uri of gone) {
    panes.get(uri)?.close();
    panes.delete(uri);
    tabs.close(uri);
  }
  if (gone.length > 0) notice = `${gone.map(terminalId).join(", ")}: no longer on the host (it restarted?); open New`;
  for (const uri of state.tabs) {
    let p = panes.get(uri);
    if (!p) {
      p = newPane(uri);
      tabs.tabs.push(uri);
    }
    p.attach(c).catch((err) => p.say(errorText(err)));
  }
  if (state.active) select(state.active);
  else renderAll();
}

function lost(closed: Closed): void {
  drop("connection lost");
  if (closed.code === WT_UNAUTHORIZED) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(refusedText(closed.reason));
    status("refused", "error");
    return;
  }
  if (busy) return; // the attempt under way fails and decides
  if (client?.resume) {
    lostAt = Date.now();
    scheduleResume();
    return;
  }
  client = null;
  scheduleRetry(closed.reason || "connection lost");
}

function scheduleRetry(why: string): void {
  const delay = Math.min(500 * 2 ** retry, 5000);
  retry++;
  status(`reconnecting in ${(delay / 1000).toFixed(1)} s (${why})`, "busy");
  retryTimer = setTimeout(() => void connect(), delay);
}

/** scheduleResume waits before the next reconnect attempt (backoff with jitter, within the grace). */
function scheduleResume(): void {
  attempt++;
  status(`reconnecting (attempt ${attempt})…`, "busy");
  const left = client?.resume ? graceLeft(client.resume, lostAt, Date.now()) : 0;
  retryTimer = setTimeout(() => void resume(), Math.min(backoff(attempt), left));
}

/**
 * resume makes one reconnect attempt on a new link: the host sends again
 * what the page missed (or a snapshot). A host that will not resume
 * (expired, refused) or the grace's end start a new session instead.
 */
async function resume(): Promise<void> {
  const c = client;
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!c?.resume || !token) return showLogin("");
  busy = true;
  try {
    const l = await open(token, () => {});
    use(c, l);
    const r = await c.reconnect();
    busy = false;
    connected(l);
    const gone = r.missing.filter((uri) => panes.has(uri));
    for (const uri of gone) closeTab(uri);
    if (gone.length > 0) {
      notice = `${gone.map(terminalId).join(", ")}: no longer on the host`;
      renderAll();
    }
    if (r.unknownFate > 0) console.warn(`${r.unknownFate} input(s) typed before the loss may not have reached the terminal`);
  } catch (err) {
    busy = false;
    if (refused(err)) return;
    drop("reconnect failed");
    const why = err instanceof RpcError ? refusal(err.code, err.data) : null;
    if (why || graceLeft(c.resume, lostAt, Date.now()) === 0) {
      console.warn(`not resumed (${why ?? "the grace ended"}): starting a new session`);
      client = null;
      void connect();
      return;
    }
    scheduleResume();
  }
}

function showRoot(root: ahp.RootState | undefined): void {
  terminals = root?.terminals ?? [];
  renderPorts(root?.ports ?? []);
  catalogued();
}

/** catalogued takes titles and who is attached to each open terminal from the catalogue. */
function catalogued(): void {
  for (const p of panes.values()) p.catalogued(terminals.find((t) => t.resource === p.uri));
  renderAll();
}

/** rootMessage follows the root channel: its actions, or a snapshot after a reconnect. */
function rootMessage(m: ahp.Message): void {
  if (m.method === "channel/snapshot") return showRoot(m.params.snapshot?.state);
  const a = m.params?.action;
  if (m.method !== "action" || !a || m.params.rejectionReason !== undefined) return; // a rejected action was not applied
  if (a.type === "root/terminalsChanged") {
    terminals = a.terminals ?? [];
    catalogued();
  } else if (a.type === "root/portsChanged") {
    renderPorts(a.ports ?? []);
  }
}

/** nameOf names a terminal: from its open pane (title and cwd as they change), else from the catalogue; numbered where names repeat. */
function nameOf(uri: string): Name {
  const n = plainName(uri);
  const suffix = numbers.get(uri) ?? "";
  return suffix ? { ...n, name: n.name + suffix } : n;
}

function plainName(uri: string): Name {
  const p = panes.get(uri);
  if (p) return p.name;
  const t = terminals.find((x) => x.resource === uri);
  return terminalName({ uri, title: t?.title });
}

let numbers = new Map<string, string>(); // each terminal's suffix where names repeat

/** renumber tells apart the terminals that have the same name and place, in the catalogue's order. */
function renumber(): void {
  const uris = [...tabs.tabs, ...terminals.map((t) => t.resource)]; // the tabs' order first: "sh", "sh 2" from the left
  numbers = numbered(
    uris.map((uri) => {
      const n = plainName(uri);
      return { key: uri, label: `${n.name}\u0000${n.detail}` };
    }),
  );
}

let listDrawn = ""; // what the terminal list was drawn from: redrawn only when it changes (a click must find its button)

function renderTerminals(): void {
  const ul = $("terminals");
  const sig = JSON.stringify([terminals, terminals.map((t) => nameOf(t.resource)), tabs.active, [...panes.keys()], client?.clientId]);
  if (sig === listDrawn) return;
  listDrawn = sig;
  ul.replaceChildren();
  if (terminals.length === 0) {
    const li = document.createElement("li");
    li.className = "empty";
    li.textContent = "none yet";
    ul.append(li);
  }
  for (const t of terminals) {
    const li = document.createElement("li");
    li.dataset.resource = t.resource;
    li.classList.toggle("current", t.resource === tabs.active);
    li.classList.toggle("open", panes.has(t.resource));
    const n = nameOf(t.resource);
    const name = document.createElement("button");
    name.type = "button";
    name.className = "name";
    name.textContent = n.name;
    if (n.detail) {
      const d = document.createElement("span");
      d.className = "detail";
      d.textContent = n.detail;
      name.append(" ", d);
    }
    name.title = `${n.tooltip}\n(open in a tab)`;
    name.onclick = () => void openTerminal(t.resource);
    li.append(name);
    const kill = document.createElement("button");
    kill.type = "button";
    kill.textContent = "Kill…";
    kill.className = "kill";
    kill.title = `Kill ${n.name} (asks first)`;
    kill.onclick = () => confirmKill(t.resource);
    li.append(kill);
    const who = holderText(t, client?.clientId ?? "");
    if (who) {
      const el = document.createElement("span");
      el.className = "who";
      el.textContent = who;
      el.title = [who, t.attached?.length ? "attached: " + t.attached.join(", ") : "", t.away?.length ? "away: " + t.away.join(", ") : ""].filter(Boolean).join("; ");
      li.append(el);
    }
    if (t.exitCode !== undefined || t.signal) {
      const ex = document.createElement("span");
      ex.className = "exited";
      ex.textContent = ahp.exitText(t);
      li.append(ex);
    }
    ul.append(li);
  }
}

const tabsDrawn = new Map<string, { el: HTMLElement; sig: string }>(); // each tab's element, redrawn only when it changes

/** renderTabs draws the tab bar: each open terminal's name, where it is, whether it is shared or ended. */
function renderTabs(): void {
  const bar = $("tabs");
  for (const uri of [...tabsDrawn.keys()]) {
    if (!tabs.has(uri) || !panes.has(uri)) {
      tabsDrawn.get(uri)!.el.remove();
      tabsDrawn.delete(uri);
    }
  }
  tabs.tabs.forEach((uri, i) => {
    const p = panes.get(uri);
    if (!p) return;
    const sig = JSON.stringify([nameOf(uri), i, uri === tabs.active, uri === split, p.holding, p.exited, p.activity, p.share?.notice() ?? ""]);
    let t = tabsDrawn.get(uri);
    if (!t) {
      t = { el: document.createElement("div"), sig: "" };
      tabsDrawn.set(uri, t);
    }
    if (t.sig !== sig) {
      t.sig = sig;
      drawTab(t.el, p, i);
    }
    if (bar.children[i] !== t.el) bar.insertBefore(t.el, bar.children[i] ?? null);
  });
}

function drawTab(tab: HTMLElement, p: Pane, i: number): void {
  const uri = p.uri;
  const n = nameOf(uri);
  tab.className = "tab";
  tab.dataset.resource = uri;
  tab.setAttribute("role", "tab");
  tab.setAttribute("aria-selected", String(uri === tabs.active));
  tab.classList.toggle("beside", uri === split);
  tab.tabIndex = uri === tabs.active ? 0 : -1;
  tab.title = `${n.tooltip}${i < 9 ? `\n(Alt+Shift+${i + 1})` : ""}`;
  const label = document.createElement("span");
  label.className = "label";
  label.textContent = n.name;
  tab.replaceChildren(label);
  if (n.detail) {
    const d = document.createElement("span");
    d.className = "detail";
    d.textContent = n.detail;
    tab.append(d);
  }
  if (!p.holding) {
    const b = document.createElement("span");
    b.className = "badge shared";
    b.textContent = "shared";
    b.title = p.share?.notice() ?? "another client holds this terminal";
    tab.append(b);
  }
  if (p.activity && !p.exited) {
    const b = document.createElement("span");
    b.className = "activity";
    b.title = "new output since you looked";
    b.setAttribute("aria-label", "new output");
    tab.append(b);
  }
  if (p.exited) {
    const b = document.createElement("span");
    b.className = "badge ended";
    b.textContent = "ended";
    tab.append(b);
  }
  const x = document.createElement("button");
  x.type = "button";
  x.className = "close";
  x.textContent = "×";
  x.title = "Close the tab (Alt+Shift+W): the terminal keeps running";
  x.setAttribute("aria-label", `Close ${n.name}`);
  x.onclick = (e) => {
    e.stopPropagation();
    closeTab(uri);
  };
  tab.append(x);
  // On press, as browsers' tabs do: a tab redrawn before the button is
  // released (new output marks it) would lose a click.
  tab.onmousedown = (e) => {
    if (e.button !== 0 || (e.target as Element).closest(".close")) return;
    e.preventDefault(); // the focus goes to the terminal, not the tab
    select(uri);
  };
  tab.onkeydown = (e) => {
    if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
      e.preventDefault();
      step(e.key === "ArrowRight" ? 1 : -1, true);
    } else if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      panes.get(uri)?.term.focus();
    }
  };
}

/** renderPane shows what belongs to the pane shown: its share notice, its line, the tools, the hint when none is open. */
function renderPane(): void {
  const p = active();
  $("hint").hidden = p !== null;
  $("tools").hidden = p === null;
  $("split").setAttribute("aria-pressed", String(split !== null));
  $("split").textContent = split !== null ? "Unsplit" : "Split";
  const kill = $<HTMLButtonElement>("kill");
  kill.disabled = p ? p.exited || p.ended : true;
  kill.title = p?.exited ? "This terminal has ended: close its tab" : "Kill this terminal's processes (asks first)";
  const text = p?.share?.notice() ?? null;
  $("share").hidden = text === null;
  $("share-text").textContent = text ?? "";
  const b = $<HTMLButtonElement>("takeover");
  b.hidden = p?.share?.readOnly ?? false; // a read-only page may not take the claim
  const shares = sharesText(terminals.find((x) => x.resource === p?.uri));
  $("share-with").title = "Share this terminal with another identity or a role" + (shares ? ` (shared with ${shares})` : "");
  const id = client?.identity ?? null;
  $("share-with").hidden = !mayShare(id, terminals.find((x) => x.resource === p?.uri)?.holder);
  $("upload").hidden = !mayFiles(id);
  $("files-open").hidden = !mayFiles(id);
  b.disabled = p?.share?.takingOver ?? false;
  b.textContent = p?.share?.takingOver ? "Taking over…" : "Take over";
  $("exit").textContent = p?.message || notice;
  $("font-size").textContent = `${font}px`;
  $<HTMLInputElement>("copy-on-select").checked = copyOnSelect;
  if (p === null) $("searchbar").hidden = true;
  document.title = p ? `${nameOf(p.uri).name} · sidecar` : "sidecar";
}

/** renderIdentity says who the page is connected as and hides what its role may not start. */
function renderIdentity(): void {
  const id = client?.identity ?? null;
  const el = $("identity");
  el.textContent = identityText(id);
  el.hidden = id === null;
  for (const b of ["new", "new-tab", "hint-new"]) $(b).hidden = !mayCreate(id);
}

function renderAll(): void {
  renderIdentity();
  renumber();
  renderTabs();
  renderTerminals();
  renderPane();
}

function saveTabs(): void {
  if (tabs.tabs.length === 0) sessionStorage.removeItem(TABS_KEY);
  else sessionStorage.setItem(TABS_KEY, JSON.stringify(tabs.state()));
}

/** focusBack gives the focus back to the terminal shown (a dialog or panel closed). */
function focusBack(): void {
  active()?.term.focus();
}

const files = new Files({
  // Not while a session is being set up: an upload's try then fails and is tried again later.
  client: () => (busy ? null : client),
  connected: () => client !== null,
  cwd: (target) => {
    const el = target instanceof Element ? target.closest<HTMLElement>(".term") : null;
    const p = (el?.dataset.resource ? panes.get(el.dataset.resource) : null) ?? active();
    return pathFromCwd(p?.cwd);
  },
  home: () => pathFromCwd(initResult?.defaultDirectory) ?? "/",
  focusBack,
  allowed: () => mayFiles(client?.identity ?? null),
});

const machine = new Machine({ client: () => client, focusBack });
const logs = new Logs({ client: () => client, focusBack });

const paneHost: PaneHost = {
  client: () => client,
  changed: (p) => {
    if (!p.closed) scheduleRender();
  },
  selected: (_p, text) => {
    if (copyOnSelect) void copyText(text, false);
  },
};

let renderQueued = false;

/** scheduleRender redraws once per frame however often panes change (a title that changes in a loop). */
function scheduleRender(): void {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    renderAll();
  });
}

function newPane(uri: string): Pane {
  const p = new Pane(uri, paneHost, $("terms"), font);
  panes.set(uri, p);
  // In a split, the side clicked or typed into is the active one.
  p.el.addEventListener("focusin", () => {
    if (tabs.active !== uri && panes.has(uri)) select(uri, false);
  });
  return p;
}

/** select shows the tab of uri (focus: into its terminal). */
function select(uri: string, focus = true): void {
  if (split === uri) split = tabs.active; // the other side of the split: the two swap roles
  tabs.open(uri);
  if (split !== null && (split === uri || !tabs.has(split))) split = null;
  notice = "";
  layout();
  const p = panes.get(uri);
  saveTabs();
  renderAll();
  if (focus) p?.term.focus();
  if (!$("searchbar").hidden) runSearch(0);
}

/**
 * layout shows the active pane, and beside it the split one if any (the
 * one earlier in the tab bar on the left); the others are hidden (their
 * terminals still take their output, not drawn).
 */
function layout(): void {
  const shown = [tabs.active, split].filter((u): u is string => u !== null);
  shown.sort((a, b) => tabs.tabs.indexOf(a) - tabs.tabs.indexOf(b));
  $("terms").classList.toggle("split", shown.length > 1);
  for (const p of panes.values()) {
    const i = shown.indexOf(p.uri);
    p.el.classList.toggle("left", shown.length > 1 && i === 0);
    p.el.classList.toggle("right", shown.length > 1 && i === 1);
    p.el.classList.toggle("focused", shown.length > 1 && p.uri === tabs.active);
    if (i < 0) p.show(false);
  }
  for (const uri of shown) panes.get(uri)?.show(true);
}

/** toggleSplit shows two terminals side by side (the active tab and its neighbour, or a new one), or one again. */
async function toggleSplit(): Promise<void> {
  if (split !== null) {
    split = null;
    layout();
    renderAll();
    active()?.term.focus();
    return;
  }
  const a = tabs.active;
  if (a === null) return;
  if (tabs.tabs.length < 2) {
    await newTerminal();
    if (tabs.active !== a && tabs.has(a)) {
      split = a;
      layout();
      renderAll();
    }
    return;
  }
  const i = tabs.tabs.indexOf(a);
  split = tabs.tabs[i + 1] ?? tabs.tabs[i - 1] ?? null;
  layout();
  renderAll();
  active()?.term.focus();
}

function step(delta: number, focusTab = false): void {
  const uri = tabs.step(delta);
  if (!uri) return;
  select(uri, !focusTab);
  if (focusTab) document.querySelector<HTMLElement>(`#tabs .tab[aria-selected="true"]`)?.focus();
}

/** openTerminal opens a terminal in a tab (or shows its tab), subscribing to it. */
async function openTerminal(uri: string): Promise<void> {
  const c = client;
  if (!c) return;
  if (panes.has(uri)) return select(uri);
  const p = newPane(uri);
  select(uri);
  p.catalogued(terminals.find((t) => t.resource === uri));
  await p.attach(c).catch((err) => p.say(errorText(err)));
}

/** closeTab closes a tab: the page unsubscribes, the terminal keeps running on the host. */
function closeTab(uri: string): void {
  const p = panes.get(uri);
  panes.delete(uri);
  p?.close();
  tabs.close(uri);
  if (split === uri) split = null;
  saveTabs();
  if (tabs.active) select(tabs.active);
  else renderAll();
}

async function newTerminal(): Promise<void> {
  const c = client;
  if (!c || !mayCreate(c.identity)) return;
  const uri = ahp.newTerminalUri();
  const p = newPane(uri);
  select(uri); // shown, so it is fitted: the terminal starts at the pane's size
  try {
    await c.request("createTerminal", { channel: uri, claim: { kind: "client", clientId: c.clientId }, cols: p.term.cols, rows: p.term.rows });
    await p.attach(c);
  } catch (err) {
    closeTab(uri);
    notice = errorText(err);
    renderPane();
  }
}

/**
 * shareTerminal asks who to share a terminal with ("alice", or
 * "role:viewer") and how, then sends terminal/share (docs/protocol.md
 * "Roles and sharing"); the host refuses it unless this page's identity
 * holds the terminal or is an owner. An empty answer cancels; "-" before
 * the name revokes ("-alice").
 */
async function shareTerminal(uri: string): Promise<void> {
  const answer = window.prompt(`Share ${nameOf(uri).name} with (a name, or role:viewer; -name revokes):`, "");
  if (answer === null) return;
  const revoke = answer.trim().startsWith("-");
  const target = shareTarget(revoke ? answer.trim().slice(1) : answer);
  if (target === null) {
    showError(uri, new Error(`cannot share with ${JSON.stringify(answer)}: give a name or role:owner, role:user, role:viewer`));
    return;
  }
  try {
    if (revoke) await client?.request("terminal/unshare", { channel: uri, with: target });
    else {
      const write = window.confirm("Let them type into it too? OK: read-write; Cancel: read-only.");
      await client?.request("terminal/share", { channel: uri, with: target, access: write ? "write" : "read" });
    }
  } catch (err) {
    showError(uri, err);
  }
}

/** confirmKill asks before it kills a terminal: its processes end for everyone who shares it. */
function confirmKill(uri: string): void {
  const d = $<HTMLDialogElement>("confirm");
  const n = nameOf(uri);
  const t = terminals.find((x) => x.resource === uri);
  const others = (t?.attached ?? []).filter((id) => id !== client?.clientId).length;
  $("confirm-title").textContent = `Kill ${n.name}${n.detail ? ` in ${n.detail}` : ""}?`;
  $("confirm-text").textContent =
    `Terminal ${terminalId(uri)} and every process in it get SIGHUP, then SIGTERM and SIGKILL. ` +
    (others > 0 ? `${others} other client${others > 1 ? "s" : ""} attached to it will see it end. ` : "") +
    "To only stop watching it, close its tab instead.";
  d.returnValue = "";
  d.onclose = () => {
    if (d.returnValue === "kill") void client?.request("disposeTerminal", { channel: uri }).catch((err) => showError(uri, err));
    // The dialog gave the focus back to what opened it: the terminal takes it.
    panes.get(tabs.active ?? "")?.term.focus();
  };
  d.showModal();
  $("confirm-cancel").focus();
}

/**
 * previewLogin exchanges the token (in a header) for the port preview's
 * session cookie (HttpOnly: the page never sees it), then renews it at
 * half its life while the page is open; a daemon without the preview
 * (404) is left alone.
 */
async function previewLogin(): Promise<void> {
  clearTimeout(sessionTimer);
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) return;
  let again = 30_000;
  try {
    const res = await fetch(endpoint(document.baseURI, "web/session", "https:"), { method: "POST", headers: { Authorization: `Bearer ${token}` } });
    if (res.status === 404) return;
    const body = await res.json().catch(() => ({}));
    if (res.ok && body.expiresInMs > 0) {
      again = body.expiresInMs / 2;
      await refreshPreview();
    }
  } catch {
    // offline: try again later
  }
  sessionTimer = setTimeout(() => void previewLogin(), again);
}

/** refreshPreview reads what the daemon noticed of the previewed apps, and redraws the ports. */
async function refreshPreview(): Promise<void> {
  try {
    const res = await fetch(endpoint(document.baseURI, "web/preview", "https:"));
    previewStatus = res.ok ? ((await res.json()) as PreviewStatus) : null;
  } catch {
    return;
  }
  renderPorts(lastPorts);
}

/** openSubdomain opens port on its own origin (subdomain mode) with a fresh single-use ticket. */
async function openSubdomain(port: number, subdomain: string): Promise<void> {
  const w = window.open("about:blank", "_blank");
  if (!w) return;
  w.opener = null;
  try {
    const res = await fetch(endpoint(document.baseURI, "web/ticket", "https:"), {
      method: "POST",
      headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) ?? ""}` },
    });
    const { ticket } = await res.json();
    w.location.href = subdomainLogin(port, subdomain, location, ticket);
  } catch (err) {
    w.close();
    status(`cannot open port ${port}: ${(err as Error)?.message ?? err}`, "error");
  }
}

function renderPorts(ports: ahp.Port[]): void {
  lastPorts = ports;
  const ul = $("ports");
  ul.replaceChildren(
    ...ports.map((p) => {
      const li = document.createElement("li");
      const text = `${p.address.includes(":") ? `[${p.address}]` : p.address}:${p.port}${p.process ? " " + p.process : ""}`;
      if (!previewStatus || !previewable(p.port, location)) {
        li.textContent = text;
        return li;
      }
      // The preview: the daemon proxies the port's web server under ports/N/.
      const a = document.createElement("a");
      a.className = "preview";
      a.href = previewHref(p.port);
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      a.dataset.port = String(p.port);
      a.title = `Open port ${p.port}'s web server in a new tab, proxied by the daemon`;
      a.textContent = text;
      li.append(a);
      const sub = previewStatus.subdomain;
      if (sub) {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "own-origin";
        b.textContent = "own origin";
        b.title = `Open port ${p.port} at https://${p.port}.${sub}/ (its own origin, at /)`;
        b.onclick = () => void openSubdomain(p.port, sub);
        li.append(b);
      }
      const hint = brokenHint(previewStatus.ports[String(p.port)], sub);
      if (hint) {
        const d = document.createElement("div");
        d.className = "port-hint";
        d.setAttribute("role", "note");
        d.textContent = hint;
        li.append(d);
      }
      return li;
    }),
  );
}

function renderMetrics(v: ahp.MetricsView): void {
  const rows: [string, string][] = [];
  const gib = (b: number) => (b / 2 ** 30).toFixed(1) + " GiB";
  if (v.cpu !== undefined) rows.push(["CPU", (100 * v.cpu).toFixed(0) + " %"]);
  if (v.memUsed !== undefined) rows.push(["Memory", gib(v.memUsed) + (v.memLimit ? " / " + gib(v.memLimit) : "")]);
  if (v.load1 !== undefined) rows.push(["Load", v.load1.toFixed(2)]);
  if (v.clients !== undefined) rows.push(["Clients", String(v.clients)]);
  if (rows.length === 0) return;
  $("metrics").replaceChildren(
    ...rows.flatMap(([k, val]) => {
      const dt = document.createElement("dt");
      dt.textContent = k;
      const dd = document.createElement("dd");
      dd.textContent = val;
      return [dt, dd];
    }),
  );
}

function errorText(err: unknown): string {
  return err instanceof RpcError ? `${err.message} (${err.code})` : String((err as Error)?.message ?? err);
}

function showError(uri: string, err: unknown): void {
  const p = panes.get(uri);
  if (p) p.say(errorText(err));
  else {
    notice = errorText(err);
    renderPane();
  }
}

/** copyText puts text on the clipboard; said: tell the user (the Copy button), not on every selection. */
async function copyText(text: string, said: boolean): Promise<void> {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    // No clipboard permission (a page not focused, an old browser): the
    // selection is still the terminal's, so ask the document to copy it.
    ok = document.execCommand?.("copy") ?? false;
  }
  copied = text;
  if (said) flash($("copy"), ok ? "Copied" : "Copy failed");
}

let copied = ""; // the last text copied (for tests)

function flash(b: HTMLElement, text: string): void {
  const was = b.dataset.label ?? b.textContent ?? "";
  b.dataset.label = was;
  b.textContent = text;
  setTimeout(() => {
    b.textContent = was;
  }, 1200);
}

function setFont(px: number): void {
  font = px;
  localStorage.setItem(FONT_KEY, String(px));
  for (const p of panes.values()) {
    p.term.options.fontSize = px;
    if (p.visible) p.applyView();
  }
  renderPane();
}

function openSearch(): void {
  if (!active()) return;
  $("searchbar").hidden = false;
  const input = $<HTMLInputElement>("search");
  input.focus();
  input.select();
}

function closeSearch(): void {
  $("searchbar").hidden = true;
  const p = active();
  p?.search.clearDecorations();
  p?.term.clearSelection();
  p?.term.focus();
}

/** runSearch looks for the search text in the shown terminal's scrollback: dir 1 next, -1 previous, 0 as typed (from the match shown). */
function runSearch(dir: number): boolean {
  const p = active();
  const q = $<HTMLInputElement>("search").value;
  if (!p || !q) {
    $("search-result").textContent = "";
    return false;
  }
  const opts = { caseSensitive: $<HTMLInputElement>("search-case").checked, incremental: dir === 0 };
  p.finding = true;
  let found = false;
  try {
    found = dir < 0 ? p.search.findPrevious(q, opts) : p.search.findNext(q, opts);
  } finally {
    p.finding = false;
  }
  $("search-result").textContent = found ? "" : "no match";
  $("search-result").classList.toggle("none", !found);
  return found;
}

/** onShortcut does what an Alt+Shift shortcut asks; it returns whether the key was the page's. */
function onShortcut(e: KeyboardEvent): boolean {
  const s = shortcut(e);
  if (!s || $("app").hidden || document.querySelector("dialog[open]")) return false;
  switch (s.do) {
    case "new":
      void newTerminal();
      break;
    case "close":
      if (tabs.active) closeTab(tabs.active);
      break;
    case "step":
      step(s.delta);
      break;
    case "nth": {
      const uri = tabs.nth(s.n);
      if (uri) select(uri);
      break;
    }
    case "find":
      openSearch();
      break;
    case "split":
      void toggleSplit();
      break;
    case "font":
      setFont(nextFontSize(font, s.delta));
      break;
  }
  return true;
}

function main(): void {
  new ResizeObserver(() => {
    if ($("app").hidden) return;
    for (const p of panes.values()) if (p.visible) p.applyView(); // a shared terminal keeps its holder's size
  }).observe($("terms"));
  // Capture: the page's shortcuts are taken before xterm.js sees the key.
  window.addEventListener(
    "keydown",
    (e) => {
      if (onShortcut(e)) {
        e.preventDefault();
        e.stopPropagation();
      }
    },
    true,
  );
  $("new").onclick = () => void newTerminal();
  $("new-tab").onclick = () => void newTerminal();
  $("hint-new").onclick = () => void newTerminal();
  $("takeover").onclick = () => active()?.takeOver();
  $("share-with").onclick = () => {
    if (tabs.active) void shareTerminal(tabs.active);
  };
  $("kill").onclick = () => {
    if (tabs.active) confirmKill(tabs.active);
  };
  $("split").onclick = () => void toggleSplit();
  $("find").onclick = () => ($("searchbar").hidden ? openSearch() : closeSearch());
  $("copy").onclick = () => {
    const p = active();
    const text = p?.term.getSelection() ?? "";
    if (text) void copyText(text, true);
    else flash($("copy"), "Select text first");
    p?.term.focus();
  };
  $<HTMLInputElement>("copy-on-select").onchange = (e) => {
    copyOnSelect = (e.target as HTMLInputElement).checked;
    localStorage.setItem(COPY_KEY, copyOnSelect ? "1" : "0");
  };
  $("font-up").onclick = () => setFont(nextFontSize(font, 1));
  $("font-down").onclick = () => setFont(nextFontSize(font, -1));
  const search = $<HTMLInputElement>("search");
  search.oninput = () => runSearch(0);
  search.onkeydown = (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      runSearch(e.shiftKey ? -1 : 1);
    } else if (e.key === "Escape") {
      e.preventDefault();
      closeSearch();
    }
  };
  $("search-next").onclick = () => runSearch(1);
  $("search-prev").onclick = () => runSearch(-1);
  $("search-close").onclick = () => closeSearch();
  $("login").onsubmit = (e) => {
    e.preventDefault();
    const input = $<HTMLInputElement>("token");
    const token = input.value.trim(); // tokens hold no spaces: a pasted one may bring some
    if (!token) return showLogin("Type the token sidecar serve was given.");
    sessionStorage.setItem(TOKEN_KEY, token);
    input.value = "";
    void connect();
  };
  $("logout").onclick = () => {
    sessionStorage.removeItem(TOKEN_KEY);
    link?.close();
    clearTimeout(sessionTimer);
    // The preview's session is revoked too (its cookie cleared).
    void fetch(endpoint(document.baseURI, "web/logout", "https:"), { method: "POST", keepalive: true })
      .catch(() => {})
      .finally(() => location.reload());
  };
  // What the daemon noticed of the previewed apps: on coming back to the page, and now and then.
  window.addEventListener("focus", () => void (previewStatus && refreshPreview()));
  setInterval(() => void (previewStatus && !document.hidden && refreshPreview()), 5000);
  renderPane();
  // For tests and the curious: what the terminal shown shows, the tabs, and how the page is connected.
  const term = () => active()?.term ?? null;
  (window as any).sidecarPage = {
    screen: () => {
      const b = term()?.buffer.active;
      if (!b) return "";
      const lines: string[] = [];
      for (let i = 0; i < b.length; i++) lines.push(b.getLine(i)?.translateToString(true) ?? "");
      return lines.join("\n").replace(/\n+$/, "");
    },
    /** cursorLine is the line the cursor is on (cheap enough to poll during a flood). */
    cursorLine: () => {
      const b = term()?.buffer.active;
      return b?.getLine(b.baseY + b.cursorY)?.translateToString(true) ?? "";
    },
    /** beforeCursor is the cursor line up to the cursor: a character just echoed ends it. */
    beforeCursor: () => {
      const b = term()?.buffer.active;
      return b?.getLine(b.baseY + b.cursorY)?.translateToString(false, 0, b.cursorX) ?? "";
    },
    size: () => ({ cols: term()?.cols ?? 0, rows: term()?.rows ?? 0 }),
    transport: () => link?.kind ?? "",
    statuses: () => statuses.slice(),
    terminal: () => tabs.active,
    /** tabs: the open tabs in order, as named on the page. */
    tabs: () =>
      tabs.tabs.map((uri) => {
        const p = panes.get(uri)!;
        return { uri, ...nameOf(uri), active: uri === tabs.active, shown: p.visible, holding: p.holding, exited: p.exited, ended: p.ended, message: p.message, received: p.received };
      }),
    selection: () => term()?.getSelection() ?? "",
    copied: () => copied,
    fontSize: () => term()?.options.fontSize ?? font,
    /** share: who holds the terminal shown, its size on the host, and what the page says while it shares it. */
    share: () => {
      const s = active()?.share;
      return s ? { holding: s.holding, holder: s.holder, size: s.size, notice: s.notice() } : null;
    },
    receiving: () => (client && tabs.active ? client.receiving(tabs.active) : null),
    /** identity: who the host says the page is (principal and role), or null. */
    identity: () => client?.identity ?? null,
    /** uploads: each upload's target, phase and bytes. */
    uploads: () => files.uploads.map((u) => ({ target: u.target, phase: u.phase, size: u.size, hashed: u.hashed, sent: u.sent, error: u.error })),
    /** sparks: the points of each sparkline drawn. */
    sparks: () => Object.fromEntries([...document.querySelectorAll<SVGPolylineElement>("#sparks .spark polyline")].map((l) => [l.closest<HTMLElement>(".spark")!.dataset.key, l.getAttribute("points")?.split(" ").filter(Boolean).length ?? 0])),
    /** processes: the pids listed. */
    processes: () => machine.processes.map((p) => p.pid),
    /** logs: the log records the panel shows, its sources offered and the channel it follows. */
    logs: () => ({ rows: logs.shown(), sources: logs.sources.map((s) => s.id), channel: logs.channel, total: logs.buffer.rows.length, dropped: logs.buffer.dropped, skipped: logs.buffer.skipped, paused: logs.paused }),
    /** forwards: the tunnels channel's entries as the page shows them. */
    forwards: () => [...document.querySelectorAll<HTMLElement>("#forwards li[data-resource]")].map((li) => ({ resource: li.dataset.resource, direction: li.dataset.direction, state: li.dataset.state, text: li.textContent })),
    /** preview: what GET web/preview said last (null: off or not known yet). */
    preview: () => previewStatus,
  };
  // Back from the OIDC sign-in: its token (or why none) is in the fragment,
  // which leaves the address bar and history at once.
  const signIn = takeFragment(location.hash);
  if (signIn) history.replaceState(null, "", location.pathname + location.search);
  if (signIn && "token" in signIn) sessionStorage.setItem(TOKEN_KEY, signIn.token);
  if (signIn && "error" in signIn) showLogin(signIn.error);
  else void connect();
}

main();
