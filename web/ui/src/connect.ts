// Connecting the page to its daemon (docs/protocol.md "Tickets", README
// "The web page"):
// - every URL is relative to where the page was served (its base URI), so
//   the page works unchanged behind a proxy that serves it under a path
//   prefix (location /vm1/ { proxy_pass https://daemon/; });
// - the token never goes into a URL: each attempt exchanges it (in an
//   Authorization header) for a single-use ticket, and only the ticket goes
//   into the WebTransport or WebSocket URL;
// - happy eyeballs (RFC 8305's idea): WebTransport and the WebSocket
//   mapping are tried at once, the first to complete is used, WebTransport
//   preferred when it completes within GRACE_MS of the WebSocket; the
//   outcome is remembered per origin and path (sessionStorage) so the next
//   connect, and each reconnect, tries it first.

import { LinkError, openWebSocket, openWebTransport, type Handlers, type Link } from "./link.js";
import { WT_UNAUTHORIZED } from "./tio.js";

export type Kind = "WebTransport" | "WebSocket";

/** GRACE_MS: how long a WebSocket that completed first waits for WebTransport (preferred: datagrams, no head-of-line blocking between calls). */
export const GRACE_MS = 120;
/** HEAD_START_MS: how long the transport that worked last time runs alone before the other is tried too. */
export const HEAD_START_MS = 1000;
const WEBTRANSPORT_TIMEOUT_MS = 3000;
const WEBSOCKET_TIMEOUT_MS = 10000;
const REMEMBER_KEY = "sidecar.transport:";

/**
 * endpoint is the URL of path (relative: "transport-io") under base (the
 * page's document.baseURI) with scheme "https:" or "ws": "wss:" on an
 * https page, "ws:" on a plain http one; query parameters added.
 */
export function endpoint(base: string, path: string, scheme: "https:" | "ws", query: Record<string, string> = {}): string {
  const u = new URL(path, base);
  u.search = "";
  u.hash = "";
  u.protocol = scheme === "ws" ? (u.protocol === "http:" ? "ws:" : "wss:") : scheme;
  for (const [k, v] of Object.entries(query)) u.searchParams.set(k, v);
  return u.href;
}

/** forcedTransport reads ?transport=websocket or ?transport=webtransport of the page's own URL (null: either). */
export function forcedTransport(search: string): Kind | null {
  const t = new URLSearchParams(search).get("transport");
  if (t === "websocket") return "WebSocket";
  if (t === "webtransport") return "WebTransport";
  return null;
}

/** rememberKey is where the transport that worked is kept: per origin and path of the page (two daemons behind one proxy, /vm1/ and /vm2/, each their own). */
export function rememberKey(base: string): string {
  const u = new URL(base);
  return REMEMBER_KEY + u.origin + u.pathname;
}

/** A step of the plan: which transport, started how long after the connect began. */
export interface Step {
  kind: Kind;
  delayMs: number;
}

/**
 * plan says what to try: the forced transport alone; the WebSocket alone
 * where the browser has no WebTransport; the one remembered first, the
 * other after HEAD_START_MS (or as soon as the first fails); else both at
 * once.
 */
export function plan(forced: Kind | null, remembered: string | null, hasWebTransport: boolean): Step[] {
  if (forced) return [{ kind: forced, delayMs: 0 }];
  if (!hasWebTransport) return [{ kind: "WebSocket", delayMs: 0 }];
  if (remembered === "WebSocket") return [{ kind: "WebSocket", delayMs: 0 }, { kind: "WebTransport", delayMs: HEAD_START_MS }];
  if (remembered === "WebTransport") return [{ kind: "WebTransport", delayMs: 0 }, { kind: "WebSocket", delayMs: HEAD_START_MS }];
  return [{ kind: "WebTransport", delayMs: 0 }, { kind: "WebSocket", delayMs: 0 }];
}

/** An attempt of the race: start it when its delay has passed (or another failed); signal aborts it. */
export interface Attempt<T> {
  kind: Kind;
  delayMs: number;
  start: (signal: AbortSignal) => Promise<T>;
}

export interface RaceOptions<T> {
  prefer: Kind;
  graceMs: number;
  /** isFinal: an error no other attempt can fix (a wrong token): the race ends with it. */
  isFinal: (err: unknown) => boolean;
  /** close closes an attempt's result that lost. */
  close: (value: T) => void;
}

/**
 * race runs attempts (happy eyeballs) and resolves with the one to use:
 * the preferred kind as soon as it completes; another kind once it
 * completes and the preferred one has not within graceMs (or failed, or
 * was not started yet). A failed attempt starts the waiting ones at once.
 * Losers are aborted, or closed if they complete later. It rejects with a
 * final error at once, or, when every attempt failed, with the only
 * error or a LinkError naming each.
 */
export function race<T>(attempts: Attempt<T>[], o: RaceOptions<T>): Promise<{ kind: Kind; value: T }> {
  return new Promise((resolve, reject) => {
    type State = "waiting" | "running" | "ok" | "failed";
    const state: State[] = attempts.map(() => "waiting");
    const ctl = attempts.map(() => new AbortController());
    const values: (T | undefined)[] = attempts.map(() => undefined);
    const errors: unknown[] = attempts.map(() => undefined);
    const timers: (ReturnType<typeof setTimeout> | undefined)[] = attempts.map(() => undefined);
    let grace: ReturnType<typeof setTimeout> | undefined;
    let candidate = -1; // completed, waiting out the grace for the preferred one
    let done = false;

    const end = (winner: number) => {
      done = true;
      clearTimeout(grace);
      timers.forEach((t) => clearTimeout(t));
      attempts.forEach((_, j) => {
        if (j === winner) return;
        if (state[j] === "ok") o.close(values[j] as T);
        else ctl[j]!.abort();
      });
    };
    const win = (i: number) => {
      end(i);
      resolve({ kind: attempts[i]!.kind, value: values[i] as T });
    };
    const fail = (err: unknown) => {
      end(-1);
      reject(err);
    };
    const start = (i: number) => {
      if (done || state[i] !== "waiting") return;
      state[i] = "running";
      clearTimeout(timers[i]);
      attempts[i]!.start(ctl[i]!.signal).then(
        (v) => {
          if (done) return o.close(v);
          state[i] = "ok";
          values[i] = v;
          if (attempts[i]!.kind === o.prefer) return win(i);
          const p = attempts.findIndex((a, j) => j !== i && a.kind === o.prefer);
          if (p < 0 || state[p] !== "running") return win(i);
          candidate = i;
          grace = setTimeout(() => win(i), o.graceMs);
        },
        (err) => {
          if (done) return;
          state[i] = "failed";
          errors[i] = err;
          if (o.isFinal(err)) return fail(err);
          if (candidate >= 0) return win(candidate);
          attempts.forEach((_, j) => start(j));
          if (state.every((s) => s === "failed")) {
            if (attempts.length === 1) return fail(err);
            const why = attempts.map((a, j) => `${a.kind}: ${String((errors[j] as Error)?.message ?? errors[j])}`).join("; ");
            fail(new LinkError(why, null));
          }
        },
      );
    };
    attempts.forEach((a, i) => {
      if (a.delayMs <= 0) start(i);
      else timers[i] = setTimeout(() => start(i), a.delayMs);
    });
  });
}

/** isTicketRefusal: a session refused for its ticket (used, expired, unknown), not for the token: a fresh ticket may pass. */
export function isTicketRefusal(reason: string): boolean {
  return reason.startsWith("ticket-");
}

/** isFinal: the token was refused (by /web/ticket or at the door): no attempt or retry can fix it. */
export function isFinal(err: unknown): boolean {
  return err instanceof LinkError && err.closed?.code === WT_UNAUTHORIZED && !isTicketRefusal(err.closed.reason);
}

/** refusedText words, for the login form, why the daemon refused the credential: the door's WT_UNAUTHORIZED reason (or web/ticket's). */
export function refusedText(reason: string): string {
  switch (reason) {
    case "expired":
      return "Your sign-in expired: sign in again (or type a new token).";
    case "revoked":
      return "The daemon revoked this token: ask for a new one.";
  }
  return "Wrong token: the daemon refused it. Type the token sidecar serve was given (--token or SIDECAR_TOKEN).";
}

/**
 * fetchTicket exchanges the token, sent in the Authorization header, for a
 * single-use ticket (POST web/ticket). A refused token is a LinkError
 * closed as WT_UNAUTHORIZED with the answer's reason ("unauthorized",
 * "expired", "revoked"), as the door would close it.
 */
export async function fetchTicket(base: string, token: string, signal?: AbortSignal): Promise<string> {
  const res = await fetch(new URL("web/ticket", base), { method: "POST", headers: { Authorization: "Bearer " + token }, cache: "no-store", signal });
  const body = (await res.json().catch(() => ({}))) as { ticket?: string; error?: string; reason?: string };
  if (res.status === 401) throw new LinkError(body.error ?? "wrong token", { code: WT_UNAUTHORIZED, reason: body.reason || "unauthorized" });
  if (!res.ok || !body.ticket) throw new LinkError(`web/ticket: HTTP ${res.status}${body.error ? ": " + body.error : ""}`, null);
  return body.ticket;
}

export interface ConnectOptions {
  token: string;
  /** certHashes: the pins of the daemon's development certificate (from web/info), for WebTransport. */
  certHashes: string[];
  forced: Kind | null;
  /** handlers makes the handlers of one attempt's link; self() is that link once it is open. */
  handlers: (self: () => Link | null) => Handlers;
  /** base is the page's base URI (document.baseURI); storage keeps the outcome (sessionStorage). */
  base?: string;
  storage?: Storage;
}

/** connectLink opens a link to the daemon that served the page (happy eyeballs, a fresh ticket per attempt). */
export async function connectLink(o: ConnectOptions): Promise<Link> {
  const base = o.base ?? document.baseURI;
  const storage = o.storage ?? sessionStorage;
  const key = rememberKey(base);
  const steps = plan(o.forced, o.forced ? null : storage.getItem(key), "WebTransport" in globalThis);
  const attempts: Attempt<Link>[] = steps.map((s) => ({
    kind: s.kind,
    delayMs: s.delayMs,
    start: (signal) => attempt(s.kind, base, o, signal),
  }));
  try {
    const won = await race(attempts, { prefer: "WebTransport", graceMs: GRACE_MS, isFinal, close: closeLink });
    if (!o.forced) storage.setItem(key, won.kind);
    return won.value;
  } catch (err) {
    if (!o.forced) storage.removeItem(key);
    throw err;
  }
}

function closeLink(l: Link): void {
  try {
    l.close();
  } catch {
    // already closed
  }
}

/** attempt is one transport's try: a ticket of its own, then the session. */
async function attempt(kind: Kind, base: string, o: ConnectOptions, signal: AbortSignal): Promise<Link> {
  const ticket = await fetchTicket(base, o.token, signal);
  let l: Link | null = null;
  const h = o.handlers(() => l);
  try {
    if (kind === "WebTransport") {
      l = await openWebTransport(endpoint(base, "transport-io", "https:", { ticket }), o.certHashes, WEBTRANSPORT_TIMEOUT_MS, h, signal);
    } else {
      l = await openWebSocket(endpoint(base, "transport-io", "ws", { ticket }), WEBSOCKET_TIMEOUT_MS, h, signal);
    }
    return l;
  } catch (err) {
    // A ticket refused (used, expired: it cannot be, it is fresh; unknown:
    // the daemon restarted between the two requests) is no wrong token:
    // the next try, with a new ticket, may pass.
    if (err instanceof LinkError && err.closed?.code === WT_UNAUTHORIZED && isTicketRefusal(err.closed.reason)) {
      throw new LinkError(`${kind}: the daemon refused its ticket (${err.closed.reason})`, null);
    }
    throw err;
  }
}
