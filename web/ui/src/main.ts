// The page: a token form, the host's terminals (open, new, kill), one
// xterm.js terminal, the listening ports and a few live metrics. A
// terminal another client holds is shared: shown at its holder's size,
// never resized, with a Take over (share.ts).

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import * as ahp from "./ahp.js";
import { Client, RpcError } from "./client.js";
import { LinkError, type Closed, type Link } from "./link.js";
import { connectLink, endpoint, forcedTransport } from "./connect.js";
import { WT_UNAUTHORIZED } from "./tio.js";
import { backoff, graceLeft, refusal } from "./resume.js";
import { Share, holderText, type Change, type Size } from "./share.js";

const TOKEN_KEY = "sidecar.token"; // sessionStorage: typed once per tab, never in the URL
const TERMINAL_KEY = "sidecar.terminal";
const CLIENT_KEY = "sidecar.clientId";
// A small window: what is in flight when Ctrl-C is typed must still be
// rendered before the prompt shows, so it bounds that delay (and memory).
const TERMINAL_WINDOW: ahp.FlowOffer = { windowBytes: 65536, maximumFrameBytes: 16384 };

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

const term = new Terminal({ scrollback: 2000, convertEol: false, fontSize: 14 });
const fit = new FitAddon();
term.loadAddon(fit);

let client: Client | null = null;
let link: Link | null = null;
let current: string | null = null; // the attached terminal
let share: Share | null = null; // who holds it, at what size
let sentSize: Size | null = null; // the last terminal/resized sent since the page became the holder (only it resizes)
let terminals: ahp.TerminalInfo[] = [];
let busy = false; // an initialize or a reconnect is under way: its own failure decides what follows
let retry = 0; // fresh connections tried since the last success
let attempt = 0; // reconnect attempts since the link was lost
let lostAt = 0; // when the link was lost (0: not lost)
let retryTimer: ReturnType<typeof setTimeout> | undefined;

function showLogin(error: string): void {
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = error;
  $<HTMLInputElement>("token").focus();
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
  retry = 0;
  attempt = 0;
  lostAt = 0;
  status(`connected (${l.kind})`, "ok");
  $("app").hidden = false;
  $("logout").hidden = false;
}

/** refused handles an error that retrying will not fix; it returns false for any other. */
function refused(err: unknown): boolean {
  if (err instanceof LinkError && err.closed?.code === WT_UNAUTHORIZED) {
    sessionStorage.removeItem(TOKEN_KEY);
    status("refused", "error");
    showLogin("Wrong token: the daemon refused it. Type the token sidecar serve was given (--token or SIDECAR_TOKEN).");
    return true;
  }
  if (err instanceof Final) {
    status("refused", "error");
    showLogin(err.message);
    return true;
  }
  return false;
}

/** connect starts a new session: initialize, the root and metrics, and the terminal shown before. */
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
      if (m.method === "otlp/exportMetrics") renderMetrics(ahp.readMetrics(m.params.payload));
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
  if (!share || share.holding) fit.fit();
  showRoot(init.snapshots?.find((s: any) => s.resource === ahp.ROOT)?.state as ahp.RootState | undefined);
  c.subscribe(ahp.METRICS).catch(() => {});
  const again = sessionStorage.getItem(TERMINAL_KEY);
  if (again && terminals.some((t) => t.resource === again)) {
    await attach(again).catch(showError);
  } else if (current) {
    // A new session on a host that no longer has the terminal shown (it
    // restarted): say so rather than leave a dead screen taking keystrokes.
    $("exit").textContent = `${current.replace("ahp-terminal:/", "")}: no longer on the host (it restarted?); open New`;
    current = null;
    sessionStorage.removeItem(TERMINAL_KEY);
    closeShare();
    renderTerminals();
  }
}

function lost(closed: Closed): void {
  drop("connection lost");
  if (closed.code === WT_UNAUTHORIZED) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("Wrong token: the daemon refused it.");
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
    if (current && r.missing.includes(current)) {
      $("exit").textContent = `${current.replace("ahp-terminal:/", "")}: no longer on the host`;
      current = null;
      closeShare();
      renderTerminals();
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
  renderTerminals();
  renderPorts(root?.ports ?? []);
  catalogued();
}

/** catalogued takes who is attached to the terminal shown from the catalogue. */
function catalogued(): void {
  if (!share || !current) return;
  share.catalogue(terminals.find((t) => t.resource === current));
  renderShare();
}

/** rootMessage follows the root channel: its actions, or a snapshot after a reconnect. */
function rootMessage(m: ahp.Message): void {
  if (m.method === "channel/snapshot") return showRoot(m.params.snapshot?.state);
  const a = m.params?.action;
  if (m.method !== "action" || !a) return;
  if (a.type === "root/terminalsChanged") {
    terminals = a.terminals ?? [];
    renderTerminals();
    catalogued();
  } else if (a.type === "root/portsChanged") {
    renderPorts(a.ports ?? []);
  }
}

function renderTerminals(): void {
  const ul = $("terminals");
  ul.replaceChildren();
  for (const t of terminals) {
    const li = document.createElement("li");
    li.dataset.resource = t.resource;
    li.classList.toggle("current", t.resource === current);
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = `${t.resource.replace("ahp-terminal:/", "")} ${t.title ?? ""}`;
    name.title = "open " + t.resource;
    name.onclick = () => void attach(t.resource);
    li.append(name);
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
    const kill = document.createElement("button");
    kill.textContent = "Kill";
    kill.className = "kill";
    kill.onclick = () => void client?.request("disposeTerminal", { channel: t.resource }).catch(showError);
    li.append(kill);
    ul.append(li);
  }
}

function renderPorts(ports: ahp.Port[]): void {
  const ul = $("ports");
  ul.replaceChildren(
    ...ports.map((p) => {
      const li = document.createElement("li");
      li.textContent = `${p.address.includes(":") ? `[${p.address}]` : p.address}:${p.port}${p.process ? " " + p.process : ""}`;
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

function showError(err: unknown): void {
  $("exit").textContent = err instanceof RpcError ? `${err.message} (${err.code})` : String(err);
}

function showExit(e: { exitCode?: number; signal?: string }): void {
  $("exit").textContent = `${current?.replace("ahp-terminal:/", "")}: ${ahp.exitText(e)}`;
}

/**
 * attach shows a terminal: a windowed subscription whose credit returns
 * once xterm.js rendered the data. A terminal another connected client
 * holds is shared (docs/protocol.md "Taking a claim over"): shown at the
 * holder's size and never resized, until Take over.
 */
async function attach(uri: string): Promise<void> {
  const c = client;
  if (!c) return;
  if (current && current !== uri) c.unsubscribe(current);
  current = uri;
  const s = (share = new Share(c.clientId));
  sentSize = null;
  catalogued();
  sessionStorage.setItem(TERMINAL_KEY, uri);
  renderTerminals();
  $("term-title").textContent = uri;
  $("exit").textContent = "";
  term.reset();
  term.focus();
  let first = true;
  await c.subscribeWindowed(uri, TERMINAL_WINDOW, (m, release) => {
    if (current !== uri || share !== s) return release();
    if (m.method === "channel/snapshot") {
      const st = m.params.snapshot?.state ?? {};
      changed(s.snapshot(st));
      if (first && s.wantsClaim()) {
        // Take the terminal over when its holder is gone (rejected while
        // it is connected: the page then shares it).
        s.claiming(c.dispatch(uri, { type: "terminal/claimed", claim: { kind: "client", clientId: c.clientId } }), true);
      }
      first = false;
      term.reset();
      applyView(); // the holder's size before its screen is written
      const text = (st.content ?? []).map((p: { value: string }) => p.value).join("");
      term.write(text, release);
      if (st.lifecycle?.status === "exited" || st.exitCode !== undefined || st.signal) showExit(st);
      return;
    }
    const a = m.params?.action;
    if (m.method === "action" && a?.type === "terminal/data") {
      term.write(a.data, release); // credit once rendered: a flood paces the PTY
      return;
    }
    if (m.method === "action" && (a?.type === "terminal/claimed" || a?.type === "terminal/resized")) {
      const ch = s.action(a, m.params.origin, m.params.rejectionReason);
      changed(ch);
      if (ch.holding !== undefined || ch.size) applyView();
      else renderShare(); // a claim answered: the notice may show, the button come back
    }
    if (m.method === "action" && a?.type === "terminal/exited") showExit(a);
    release();
  });
}

/** changed notes what a snapshot or an action changed: a new holder sends its size afresh. */
function changed(ch: Change): void {
  if (ch.holding !== undefined) sentSize = null;
}

/**
 * applyView sizes the terminal for the page's part in it: holding it, to
 * the pane (and the host is told); sharing it, to the holder's size,
 * drawn from the pane's top left (the rest of the pane left empty, or
 * scrolled when the terminal is larger).
 */
function applyView(): void {
  const s = share;
  const shared = s !== null && !s.holding;
  $("term").classList.toggle("shared", shared);
  // Sized to its columns, xterm.js's scrollbar would cover the last ones:
  // room for it beside them (fitting, the fit addon leaves that room).
  const viewport = term.element?.querySelector<HTMLElement>(".xterm-viewport");
  if (term.element) term.element.style.paddingRight = shared && viewport ? `${viewport.offsetWidth - viewport.clientWidth}px` : "";
  if (!shared) {
    fit.fit();
    sendSize();
  } else {
    const v = s.view();
    if (v && (v.cols !== term.cols || v.rows !== term.rows)) term.resize(v.cols, v.rows);
  }
  renderShare();
}

/** sendSize tells the host the terminal's size, only while the page holds it (a sharer never resizes). */
function sendSize(): void {
  const c = client;
  const s = share;
  if (!c || !current || !s?.holding) return;
  const size = { cols: term.cols, rows: term.rows };
  const host = sentSize ?? s.size; // what the host has, or will have once our last resize is applied
  if (host?.cols === size.cols && host?.rows === size.rows) return;
  sentSize = size;
  c.dispatch(current, { type: "terminal/resized", ...size });
}

function renderShare(): void {
  const s = share;
  const text = s?.notice() ?? null;
  $("share").hidden = text === null;
  $("share-text").textContent = text ?? "";
  const b = $<HTMLButtonElement>("takeover");
  b.disabled = s?.takingOver ?? false;
  b.textContent = s?.takingOver ? "Taking over…" : "Take over";
}

function closeShare(): void {
  share = null;
  sentSize = null;
  applyView();
}

/** takeOver claims the terminal shown from the client that holds it (our takeOver extension). */
function takeOver(): void {
  const c = client;
  const s = share;
  if (!c || !current || !s || s.holding) return;
  s.claiming(c.dispatch(current, { type: "terminal/claimed", claim: { kind: "client", clientId: c.clientId }, takeOver: true }), false);
  renderShare();
  term.focus();
}

async function newTerminal(): Promise<void> {
  const c = client;
  if (!c) return;
  fit.fit();
  const uri = ahp.newTerminalUri();
  try {
    await c.request("createTerminal", { channel: uri, claim: { kind: "client", clientId: c.clientId }, cols: term.cols, rows: term.rows });
    await attach(uri);
  } catch (err) {
    showError(err);
  }
}

function main(): void {
  term.open($("term"));
  term.onData((data) => {
    if (client && current) client.input(current, data); // a paste may exceed a frame: split
  });
  term.onResize(() => sendSize());
  new ResizeObserver(() => {
    if (!$("app").hidden && (share === null || share.holding)) fit.fit(); // a shared terminal keeps its holder's size
  }).observe($("term"));
  $("new").onclick = () => void newTerminal();
  $("takeover").onclick = () => takeOver();
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
    location.reload();
  };
  // For tests and the curious: what the terminal shows, and how the page is connected.
  (window as any).sidecarPage = {
    screen: () => {
      const b = term.buffer.active;
      const lines: string[] = [];
      for (let i = 0; i < b.length; i++) lines.push(b.getLine(i)?.translateToString(true) ?? "");
      return lines.join("\n").replace(/\n+$/, "");
    },
    /** cursorLine is the line the cursor is on (cheap enough to poll during a flood). */
    cursorLine: () => {
      const b = term.buffer.active;
      return b.getLine(b.baseY + b.cursorY)?.translateToString(true) ?? "";
    },
    /** beforeCursor is the cursor line up to the cursor: a character just echoed ends it. */
    beforeCursor: () => {
      const b = term.buffer.active;
      return b.getLine(b.baseY + b.cursorY)?.translateToString(false, 0, b.cursorX) ?? "";
    },
    size: () => ({ cols: term.cols, rows: term.rows }),
    transport: () => link?.kind ?? "",
    statuses: () => statuses.slice(),
    terminal: () => current,
    /** share: who holds the terminal shown, its size on the host, and what the page says while it shares it. */
    share: () => (share ? { holding: share.holding, holder: share.holder, size: share.size, notice: share.notice() } : null),
    receiving: () => (client && current ? client.receiving(current) : null),
  };
  void connect();
}

main();
