// The Logs panel (beside Processes): the daemon's own log, the journal
// and the configured log files, each a windowed subscription held only
// while the panel is shown; filters the host applies (level; unit and
// priority) and a text filter the page applies; the newest MAX_ROWS
// records, a notice when the host skipped some, and Pause.

import type { Client } from "./client.js";
import { RpcError } from "./client.js";
import type { FlowOffer, Message } from "./ahp.js";
import { LEVELS, LogBuffer, MAX_ROWS, PRIORITIES, channelFor, fmtTime, logSources, matches, readLogs, skippedOf, type LogRow, type LogSource } from "./logs.js";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

/** LOGS_WINDOW is the receive window offered: 256 KiB, about two full batches (64 KiB of bodies each, plus JSON). */
const LOGS_WINDOW: FlowOffer = { windowBytes: 256 << 10, maximumFrameBytes: 16384 };

export interface LogsHost {
  client(): Client | null;
  focusBack(): void;
}

function errorText(err: unknown): string {
  return err instanceof RpcError ? err.message : String((err as Error)?.message ?? err);
}

export class Logs {
  sources: LogSource[] = [];
  readonly buffer = new LogBuffer(MAX_ROWS);
  /** channel is the one subscribed ("" while none). */
  channel = "";
  paused = false;
  private pending = 0; // records that came while paused
  private gen = 0; // the subscription's generation: messages of an older one are ignored
  private els = new Map<LogRow, HTMLElement>(); // the rows on the page

  constructor(private host: LogsHost) {
    $("logs-toggle").onclick = () => this.toggle();
    $("logs-close").onclick = () => this.toggle(false);
    $<HTMLSelectElement>("logs-level").replaceChildren(...LEVELS.map((l) => Object.assign(document.createElement("option"), { value: l, textContent: l, selected: l === "info" })));
    $<HTMLSelectElement>("logs-priority").replaceChildren(
      Object.assign(document.createElement("option"), { value: "", textContent: "any" }),
      ...PRIORITIES.map((p, i) => Object.assign(document.createElement("option"), { value: p, textContent: `${i} ${p}${i < 7 ? " and above" : ""}` })),
    );
    for (const id of ["logs-source", "logs-level", "logs-priority", "logs-unit"]) $(id).onchange = () => this.resubscribe();
    $<HTMLInputElement>("logs-filter").oninput = () => this.render();
    $("logs-pause").onclick = () => this.setPaused(!this.paused);
  }

  /** connected takes a new session's capabilities: the sources it offers (the one chosen is kept if still there). */
  connected(_c: Client, init: any): void {
    const sel = $<HTMLSelectElement>("logs-source");
    const was = sel.value;
    this.sources = logSources(init);
    sel.replaceChildren(...this.sources.map((s) => Object.assign(document.createElement("option"), { value: s.id, textContent: s.label })));
    if (this.sources.some((s) => s.id === was)) sel.value = was;
    this.channel = ""; // the old session's subscription went with it
    this.showFilters();
    if (!$("logs").hidden) this.subscribe();
  }

  toggle(show = $("logs").hidden): void {
    $("logs").hidden = !show;
    $("logs-toggle").setAttribute("aria-expanded", String(show));
    if (show) {
      this.subscribe();
      $<HTMLSelectElement>("logs-source").focus();
    } else {
      this.unsubscribe();
      this.host.focusBack();
    }
  }

  private source(): LogSource | undefined {
    const id = $<HTMLSelectElement>("logs-source").value;
    return this.sources.find((s) => s.id === id) ?? this.sources[0];
  }

  private showFilters(): void {
    const k = this.source()?.kind;
    $("logs-daemon-filters").hidden = k !== "daemon";
    $("logs-journal-filters").hidden = k !== "journal";
  }

  private resubscribe(): void {
    this.showFilters();
    if ($("logs").hidden) return;
    this.unsubscribe();
    this.subscribe();
  }

  private unsubscribe(): void {
    this.gen++;
    if (this.channel) this.host.client()?.unsubscribe(this.channel);
    this.channel = "";
  }

  /** subscribe follows the source chosen, with its filters, from a clear list. */
  private subscribe(): void {
    const c = this.host.client();
    const s = this.source();
    if (!c || !s || this.channel) return;
    const gen = ++this.gen;
    const uri = channelFor(s, {
      level: $<HTMLSelectElement>("logs-level").value,
      unit: $<HTMLInputElement>("logs-unit").value,
      priority: $<HTMLSelectElement>("logs-priority").value,
    });
    this.channel = uri;
    this.buffer.clear();
    this.pending = 0;
    this.render();
    this.say("reading…"); // the journal's first read takes up to 10 s
    c.subscribeWindowed(uri, LOGS_WINDOW, (m, release) => {
      if (gen === this.gen) this.message(m);
      release();
    })
      .then(() => {
        // Hidden or changed while the host was answering (an Overloaded
        // answer is asked again): end what is no longer wanted.
        if (gen !== this.gen && this.channel !== uri) c.unsubscribe(uri);
      })
      .catch((err) => {
        if (gen !== this.gen) return;
        this.channel = "";
        this.say(errorText(err), true);
      });
  }

  private message(m: Message): void {
    if (m.method === "channel/snapshot") return this.say(""); // its state ({backlog: N}) says how many of the ring's records come first
    if (m.method !== "otlp/exportLogs") return;
    const skipped = skippedOf(m.params);
    if (skipped > 0) {
      this.buffer.skipped += skipped;
      this.showSkipped();
    }
    const rows = readLogs(m.params?.payload);
    const gone = this.buffer.push(rows);
    if (this.paused) {
      this.pending += rows.length;
      this.showTotal();
      return;
    }
    for (const r of gone) {
      this.els.get(r)?.remove();
      this.els.delete(r);
    }
    const q = $<HTMLInputElement>("logs-filter").value;
    $("logs-body").append(...rows.filter((r) => matches(r, q)).map((r) => this.row(r)));
    this.showTotal();
    this.follow();
  }

  private row(r: LogRow): HTMLElement {
    const tr = document.createElement("tr");
    if (r.level) tr.className = r.level;
    const cells: [string, string][] = [
      ["time", fmtTime(r.timeMs)],
      ["severity", r.severity],
      ["source", r.source],
      ["body", r.body],
    ];
    for (const [cls, text] of cells) {
      const td = document.createElement("td");
      td.className = cls;
      td.textContent = text;
      tr.append(td);
    }
    if (r.timeMs) (tr.firstChild as HTMLElement).title = new Date(r.timeMs).toISOString();
    this.els.set(r, tr);
    return tr;
  }

  /** render draws the list again from the buffer (the text filter changed, a resume, a new subscription). */
  private render(): void {
    this.els.clear();
    const q = $<HTMLInputElement>("logs-filter").value;
    $("logs-body").replaceChildren(...this.buffer.rows.filter((r) => matches(r, q)).map((r) => this.row(r)));
    this.pending = 0;
    this.showSkipped();
    this.showTotal();
    this.follow();
  }

  private follow(): void {
    if (this.paused) return;
    const el = $("logs-scroll");
    el.scrollTop = el.scrollHeight;
  }

  setPaused(p: boolean): void {
    this.paused = p;
    const b = $("logs-pause");
    b.textContent = p ? "Resume" : "Pause";
    b.setAttribute("aria-pressed", String(p));
    b.title = p ? "Show the records that came meanwhile and follow new ones again" : "Stop following: the list stays as it is while you read (new records are kept, up to the bound)";
    if (!p) this.render();
    else this.showTotal();
  }

  private showTotal(): void {
    const n = this.buffer.rows.length;
    const shown = $("logs-body").childElementCount;
    const parts = [shown === n ? `${n} record${n === 1 ? "" : "s"}` : `${shown} of ${n} records`];
    if (this.buffer.dropped > 0) parts.push(`the newest ${MAX_ROWS.toLocaleString("en")} kept, ${this.buffer.dropped} older dropped`);
    if (this.paused) parts.push(`paused: ${this.pending} new`);
    $("logs-total").textContent = parts.join(" · ");
  }

  private showSkipped(): void {
    const el = $("logs-skipped");
    const n = this.buffer.skipped;
    el.hidden = n === 0;
    el.textContent = n === 0 ? "" : `The host skipped ${n} record${n === 1 ? "" : "s"}: this page fell behind its ring of 1024, and they are not shown.`;
  }

  private say(text: string, error = false): void {
    const el = $("logs-msg");
    el.textContent = text;
    el.classList.toggle("error", error);
  }

  /** shown is what the list shows, for tests: each row's cells. */
  shown(): { time: string; severity: string; source: string; body: string; level: string }[] {
    return [...$("logs-body").querySelectorAll<HTMLElement>("tr")].map((tr) => {
      const c = (k: string) => tr.querySelector(`.${k}`)?.textContent ?? "";
      return { time: c("time"), severity: c("severity"), source: c("source"), body: c("body"), level: tr.className };
    });
  }
}
