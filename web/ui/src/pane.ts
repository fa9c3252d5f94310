// One open terminal: its xterm.js terminal in its own element, its own
// windowed subscription (so a flood in one tab never slows typing in
// another: each has its own window on the host), its name, and who holds
// it (share.ts). A pane another client holds is shared: drawn at the
// holder's size, never resized, until Take over.

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { SearchAddon } from "@xterm/addon-search";
import * as ahp from "./ahp.js";
import type { Client } from "./client.js";
import { terminalId, terminalName, type Name } from "./names.js";
import { Share, type Change, type Size } from "./share.js";
import { Pacer } from "./pace.js";

// A small window: what is in flight when Ctrl-C is typed must still be
// rendered before the prompt shows, so it bounds that delay (and memory).
const TERMINAL_WINDOW: ahp.FlowOffer = { windowBytes: 65536, maximumFrameBytes: 16384 };
/** HOST_STATE: the actions a pane applies as the host sends them (output, title, directory, exit); rejected, they were not applied and are ignored. */
const HOST_STATE = new Set<string | undefined>(["terminal/data", "terminal/titleChanged", "terminal/cwdChanged", "terminal/exited"]);

export const THEME = {
  background: "#181818",
  foreground: "#cccccc",
  cursor: "#aeafad",
  selectionBackground: "#264f78",
  black: "#000000",
  red: "#cd3131",
  green: "#0dbc79",
  yellow: "#e5e510",
  blue: "#2472c8",
  magenta: "#bc3fbc",
  cyan: "#11a8cd",
  white: "#e5e5e5",
  brightBlack: "#666666",
  brightRed: "#f14c4c",
  brightGreen: "#23d18b",
  brightYellow: "#f5f543",
  brightBlue: "#3b8eea",
  brightMagenta: "#d670d6",
  brightCyan: "#29b8db",
  brightWhite: "#e5e5e5",
};

/** What a pane asks of the page. */
export interface PaneHost {
  client(): Client | null;
  /** changed: the pane's name, share, exit or message changed. */
  changed(p: Pane): void;
  /** selected: the user selected text in the pane. */
  selected(p: Pane, text: string): void;
}

export class Pane {
  readonly term: Terminal;
  readonly fit = new FitAddon();
  readonly search = new SearchAddon();
  readonly el: HTMLDivElement;
  share: Share | null = null; // who holds it, at what size (null until subscribed)
  sentSize: Size | null = null; // the last terminal/resized sent since the page became the holder (only it resizes)
  title = "";
  cwd = "";
  message = ""; // the line under the terminal: its exit status, an error
  exited = false;
  /** ended: the host ended the subscription (channel/ended: a revoked share); the pane stops: no input, no reattach. */
  ended = false;
  closed = false;
  visible = false;
  received = 0; // characters of output received (for tests: a flood is flowing)
  activity = false; // output arrived while the pane was hidden
  finding = false; // a search is selecting its match
  private pacer = new Pacer(); // a hidden pane's credit, paced (pace.ts)

  constructor(
    readonly uri: string,
    private host: PaneHost,
    parent: HTMLElement,
    fontSize: number,
  ) {
    this.el = document.createElement("div");
    this.el.className = "term";
    this.el.dataset.resource = uri;
    this.el.setAttribute("role", "tabpanel");
    this.el.hidden = true;
    parent.append(this.el);
    this.term = new Terminal({
      scrollback: 5000,
      convertEol: false,
      fontSize,
      fontFamily: '"Cascadia Mono", "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace',
      theme: THEME,
      cursorBlink: true,
    });
    this.term.loadAddon(this.fit);
    this.term.loadAddon(this.search);
    this.term.open(this.el);
    this.term.onData((data) => {
      const c = host.client();
      if (this.ended) return; // the host ended the subscription: the message says why
      if (this.share?.readOnly) return this.say("read only"); // the host would refuse it: -32009
      if (c && !this.closed) c.input(uri, data); // a paste may exceed a frame: split
    });
    this.term.onResize(() => this.sendSize());
    // OSC 0/2 (the host passes them on and says terminal/titleChanged too).
    this.term.onTitleChange((t) => this.named(t, undefined));
    // OSC 7: the host takes it out of terminal/data and says
    // terminal/cwdChanged; a snapshot or another host may still bring one.
    this.term.parser.registerOscHandler(7, (data) => {
      this.named(undefined, data);
      return true;
    });
    this.term.onSelectionChange(() => {
      const text = this.term.getSelection();
      if (text && !this.finding) host.selected(this, text); // a match found is selected too: not copied
    });
  }

  get id(): string {
    return terminalId(this.uri);
  }

  get name(): Name {
    return terminalName({ uri: this.uri, title: this.title, cwd: this.cwd });
  }

  private named(title: string | undefined, cwd: string | undefined): void {
    let changed = false;
    if (title !== undefined && title !== this.title) {
      this.title = title;
      changed = true;
    }
    if (cwd !== undefined && cwd !== this.cwd) {
      this.cwd = cwd;
      changed = true;
    }
    if (changed) this.host.changed(this);
  }

  /** catalogued takes the terminal's entry in the root catalogue: its title, who is attached. */
  catalogued(info: ahp.TerminalInfo | undefined): void {
    if (info?.title) this.named(info.title, undefined);
    const ch = this.share?.catalogue(info);
    if (ch?.readOnly !== undefined) this.host.changed(this);
  }

  say(message: string): void {
    this.message = message;
    this.host.changed(this);
  }

  private showExit(e: { exitCode?: number; signal?: string }): void {
    this.exited = true;
    const name = this.name.name;
    this.say(`${name === this.id ? name : `${name} (${this.id})`}: ${ahp.exitText(e)}`);
  }

  /**
   * attach subscribes (windowed) with c: credit returns once xterm.js has
   * parsed the data. A terminal another connected client holds is shared
   * (docs/protocol.md "Taking a claim over"): shown at the holder's size
   * and never resized, until Take over.
   */
  async attach(c: Client): Promise<void> {
    if (this.ended) return; // the host refused us this terminal: no reattach
    const s = (this.share = new Share(c.clientId));
    this.sentSize = null;
    this.host.changed(this);
    let first = true;
    await c.subscribeWindowed(this.uri, TERMINAL_WINDOW, (m, release) => {
      if (this.closed || this.share !== s) return release();
      if (m.method === "channel/ended") {
        // A revoked share (docs/protocol.md "channel/ended"): nothing more
        // comes; the page says the host's reason and stops.
        this.ended = true;
        this.share = null;
        this.say(String(m.params?.error?.message ?? "the host ended this subscription"));
        return release();
      }
      if (m.method === "channel/snapshot") {
        const st = m.params.snapshot?.state ?? {};
        this.changed(s.snapshot(st));
        if (first && s.wantsClaim()) {
          // Take the terminal over when its holder is gone (rejected while
          // it is connected: the page then shares it).
          s.claiming(c.dispatch(this.uri, { type: "terminal/claimed", claim: { kind: "client", clientId: c.clientId } }), true);
        }
        first = false;
        this.named(typeof st.title === "string" ? st.title : undefined, typeof st.cwd === "string" ? st.cwd : undefined);
        this.term.reset();
        this.applyView(); // the holder's size before its screen is written
        const text = (st.content ?? []).map((p: { value: string }) => p.value).join("");
        this.term.write(text, release);
        if (st.lifecycle?.status === "exited" || st.exitCode !== undefined || st.signal) this.showExit(st);
        return;
      }
      const a = m.params?.action;
      if (m.method === "action" && m.params.rejectionReason !== undefined && HOST_STATE.has(a?.type)) {
        release(); // a rejected action was not applied: never output, a title or an exit
        return;
      }
      if (m.method === "action" && a?.type === "terminal/data") {
        this.received += a.data.length;
        if (!this.visible && !this.activity) {
          this.activity = true;
          this.host.changed(this);
        }
        // Credit once parsed: a flood paces the PTY. Hidden, at most
        // HIDDEN_RATE, so it never takes the main thread from the tab in view.
        const n = a.data.length;
        this.term.write(a.data, this.visible ? release : () => this.pacer.credit(n, release));
        return;
      }
      if (m.method === "action" && m.params.rejectionCode !== undefined && a?.type !== "terminal/claimed" && a?.type !== "terminal/resized") {
        if (s.action(a ?? {}, m.params.origin, m.params.rejectionReason, m.params.rejectionCode).readOnly) this.host.changed(this);
      }
      if (m.method === "action" && (a?.type === "terminal/claimed" || a?.type === "terminal/resized")) {
        const ch = s.action(a, m.params.origin, m.params.rejectionReason, m.params.rejectionCode);
        this.changed(ch);
        if (ch.holding !== undefined || ch.size) this.applyView();
        else this.host.changed(this); // a claim answered: the notice may show, the button come back
      }
      if (m.method === "action" && a?.type === "terminal/titleChanged" && typeof a.title === "string") this.named(a.title, undefined);
      if (m.method === "action" && a?.type === "terminal/cwdChanged" && typeof a.cwd === "string") this.named(undefined, a.cwd);
      if (m.method === "action" && a?.type === "terminal/exited") this.showExit(a);
      release();
    });
  }

  /** changed notes what a snapshot or an action changed: a new holder sends its size afresh. */
  private changed(ch: Change): void {
    if (ch.holding !== undefined) this.sentSize = null;
  }

  get holding(): boolean {
    return this.share === null || this.share.holding;
  }

  show(visible: boolean): void {
    this.visible = visible;
    this.el.hidden = !visible;
    if (visible) {
      this.pacer.flush();
      this.activity = false;
      this.applyView();
    }
  }

  /**
   * applyView sizes the terminal for the page's part in it: holding it, to
   * the pane (and the host is told); sharing it, to the holder's size,
   * drawn from the pane's top left (the rest of the pane left empty, or
   * scrolled when the terminal is larger). A hidden pane is sized when
   * shown.
   */
  applyView(): void {
    const s = this.share;
    const shared = s !== null && !s.holding;
    this.el.classList.toggle("shared", shared);
    if (this.visible) {
      // Sized to its columns, xterm.js's scrollbar would cover the last ones:
      // room for it beside them (fitting, the fit addon leaves that room).
      const viewport = this.term.element?.querySelector<HTMLElement>(".xterm-viewport");
      if (this.term.element) this.term.element.style.paddingRight = shared && viewport ? `${viewport.offsetWidth - viewport.clientWidth}px` : "";
      if (!shared) {
        this.fit.fit();
        this.sendSize();
      }
    }
    if (shared) {
      const v = s.view();
      if (v && (v.cols !== this.term.cols || v.rows !== this.term.rows)) this.term.resize(v.cols, v.rows);
    }
    this.host.changed(this);
  }

  /** sendSize tells the host the terminal's size, only while the page holds it (a sharer never resizes). */
  sendSize(): void {
    const c = this.host.client();
    const s = this.share;
    if (!c || this.closed || !s?.holding || s.readOnly || !this.visible) return;
    const size = { cols: this.term.cols, rows: this.term.rows };
    const host = this.sentSize ?? s.size; // what the host has, or will have once our last resize is applied
    if (host?.cols === size.cols && host?.rows === size.rows) return;
    this.sentSize = size;
    c.dispatch(this.uri, { type: "terminal/resized", ...size });
  }

  /** takeOver claims the terminal from the client that holds it (our takeOver extension). */
  takeOver(): void {
    const c = this.host.client();
    const s = this.share;
    if (!c || !s || s.holding) return;
    s.claiming(c.dispatch(this.uri, { type: "terminal/claimed", claim: { kind: "client", clientId: c.clientId }, takeOver: true }), false);
    this.host.changed(this);
    this.term.focus();
  }

  setFontSize(px: number): void {
    this.term.options.fontSize = px;
    this.applyView();
  }

  /** close unsubscribes (the terminal keeps running on the host) and drops the pane. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.pacer.flush(); // no timer outlives the pane
    this.host.client()?.unsubscribe(this.uri);
    this.term.dispose();
    this.el.remove();
  }
}
