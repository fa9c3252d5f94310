// The machine beside the terminals: its processes (a panel, refreshed
// while shown, with a signal action where the host takes signals), the
// sparklines of its last minutes under the metrics, and every client's
// port forwards from the tunnels channel.

import type { Client } from "./client.js";
import { RpcError } from "./client.js";
import type { Message } from "./ahp.js";
import { emptyHistory, merge, rate, since, sparkPoints, type History, type HistoryResult } from "./history.js";
import { SIGNALS, SORTS, bytes, cpu, hostSort, sortProcesses, type Process, type SortKey } from "./processes.js";
import { applyTunnel, describe, type Tunnel } from "./tunnels.js";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const SVG = "http://www.w3.org/2000/svg";

/** REFRESH_MS is how often the process list is read while it is shown. */
const REFRESH_MS = 2000;
/** LIST_LIMIT is how many processes are asked for (the host's bound is 1000). */
const LIST_LIMIT = 200;

export interface MachineHost {
  client(): Client | null;
  focusBack(): void;
}

function errorText(err: unknown): string {
  return err instanceof RpcError ? err.message : String((err as Error)?.message ?? err);
}

export class Machine {
  signals = false; // the initialize result's processes.signal
  hasProcesses = false;
  processes: Process[] = [];
  private sort: SortKey = "cpu";
  private timer: ReturnType<typeof setTimeout> | undefined;
  private listing = false;
  history: History = emptyHistory();
  private fetching = false;
  private historyOn = false;
  tunnels: Tunnel[] = [];
  tunnelsChannel = "";

  constructor(private host: MachineHost) {
    $("procs-toggle").onclick = () => this.toggle();
    $("procs-close").onclick = () => this.toggle(false);
    $<HTMLInputElement>("procs-filter").oninput = () => this.renderProcesses();
    const head = $("procs-head");
    head.replaceChildren(
      ...SORTS.map((s) => {
        const th = document.createElement("th");
        th.scope = "col";
        th.dataset.key = s.key;
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = s.label;
        b.title = `Sort by ${s.label}`;
        b.onclick = () => {
          this.sort = s.key;
          this.renderProcesses();
          void this.refresh();
        };
        th.append(b);
        return th;
      }),
      Object.assign(document.createElement("th"), { scope: "col", className: "act" }),
    );
    const sel = $<HTMLSelectElement>("signal-name");
    sel.replaceChildren(...SIGNALS.map((s) => Object.assign(document.createElement("option"), { value: s, textContent: s })));
  }

  /** connected takes a new session's capabilities and starts what it offers. */
  connected(c: Client, init: any): void {
    this.signals = init?.processes?.signal === true;
    this.hasProcesses = init?.processes !== undefined;
    $("procs-toggle").hidden = !this.hasProcesses;
    this.historyOn = (init?.telemetry?.historySeconds ?? 0) > 0;
    this.history = emptyHistory();
    void this.fetchHistory();
    const ch: string = init?.tunnels?.channel ?? "";
    this.tunnelsChannel = ch;
    this.tunnels = [];
    this.renderForwards();
    if (ch) {
      c.on(ch, (m) => this.tunnelMessage(m));
      c.subscribe(ch)
        .then((r) => {
          if (r?.snapshot) this.tunnelMessage({ jsonrpc: "2.0", method: "channel/snapshot", params: { channel: ch, snapshot: r.snapshot } });
        })
        .catch(() => {});
    }
    if (!$("procs").hidden) void this.refresh();
  }

  // ---- processes

  toggle(show = $("procs").hidden): void {
    $("procs").hidden = !show;
    $("procs-toggle").setAttribute("aria-expanded", String(show));
    clearTimeout(this.timer);
    if (show) {
      void this.refresh();
      $<HTMLInputElement>("procs-filter").focus();
    } else {
      this.host.focusBack();
    }
  }

  /** refresh reads the list now, and again every REFRESH_MS while the panel is shown. */
  async refresh(): Promise<void> {
    clearTimeout(this.timer);
    const c = this.host.client();
    if ($("procs").hidden || !c || !this.hasProcesses) return;
    if (!this.listing && !document.hidden) {
      this.listing = true;
      try {
        const r = await c.request<{ processes: Process[]; total: number }>("processes/list", { sortBy: hostSort(this.sort), limit: LIST_LIMIT });
        this.processes = r.processes ?? [];
        $("procs-total").textContent = `${this.processes.length} of ${r.total}`;
        this.renderProcesses();
      } catch (err) {
        this.say(errorText(err), true);
      } finally {
        this.listing = false;
      }
    }
    if (!$("procs").hidden) this.timer = setTimeout(() => void this.refresh(), REFRESH_MS);
  }

  private say(text: string, error = false): void {
    const el = $("procs-msg");
    el.textContent = text;
    el.classList.toggle("error", error);
  }

  private renderProcesses(): void {
    for (const th of $("procs-head").querySelectorAll<HTMLElement>("th[data-key]")) {
      if (th.dataset.key === this.sort) th.setAttribute("aria-sort", this.sort === "pid" || this.sort === "command" || this.sort === "user" || this.sort === "state" ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
    const q = $<HTMLInputElement>("procs-filter").value.trim().toLowerCase();
    const shown = sortProcesses(this.processes, this.sort).filter((p) => !q || `${p.pid} ${p.owner ?? ""} ${p.commandLine || p.command || ""}`.toLowerCase().includes(q));
    const focused = (document.activeElement as HTMLElement | null)?.closest<HTMLElement>("#procs-body tr")?.dataset.pid;
    $("procs-body").replaceChildren(
      ...shown.map((p) => {
        const tr = document.createElement("tr");
        tr.dataset.pid = String(p.pid);
        const cells = [String(p.pid), p.owner ?? "", cpu(p.cpuUtilization), bytes(p.memoryUsageBytes), p.status ?? "", p.commandLine || p.command || "", p.startTimeUnixNano ? new Date(p.startTimeUnixNano / 1e6).toLocaleTimeString() : ""];
        for (const [i, text] of cells.entries()) {
          const td = document.createElement("td");
          td.textContent = text;
          td.className = SORTS[i]!.key;
          if (SORTS[i]!.key === "command") td.title = text;
          tr.append(td);
        }
        const td = document.createElement("td");
        td.className = "act";
        if (this.signals) {
          const b = document.createElement("button");
          b.type = "button";
          b.className = "signal";
          b.textContent = "Signal…";
          b.setAttribute("aria-label", `Send a signal to ${p.command ?? "process"} ${p.pid}`);
          b.onclick = () => this.confirmSignal(p);
          td.append(b);
        }
        tr.append(td);
        return tr;
      }),
    );
    if (focused) $("procs-body").querySelector<HTMLElement>(`tr[data-pid="${focused}"] button`)?.focus();
  }

  /** confirmSignal asks which signal, then sends it to p (checked by its start time, so a reused pid is never hit). */
  private confirmSignal(p: Process): void {
    const d = $<HTMLDialogElement>("signal-dialog");
    const who = `${p.command ?? "process"} (pid ${p.pid}${p.owner ? `, ${p.owner}` : ""})`;
    $("signal-title").textContent = `Send a signal to ${who}?`;
    $("signal-text").textContent = p.commandLine ?? "";
    $<HTMLSelectElement>("signal-name").value = "SIGTERM";
    d.returnValue = "";
    d.onclose = () => {
      const focusRow = () => $("procs-body").querySelector<HTMLElement>(`tr[data-pid="${p.pid}"] button`)?.focus();
      if (d.returnValue !== "send") return focusRow();
      const signal = $<HTMLSelectElement>("signal-name").value;
      const c = this.host.client();
      if (!c) return;
      c.request("processes/signal", { pid: p.pid, signal, ...(p.startTimeUnixNano ? { startTimeUnixNano: p.startTimeUnixNano } : {}) })
        .then(() => {
          this.say(`${signal} sent to ${who}`);
          void this.refresh();
        })
        .catch((err) => this.say(`${signal} to ${who} refused: ${errorText(err)}`, true))
        .finally(focusRow);
    };
    d.showModal();
    $("signal-cancel").focus();
  }

  // ---- history

  /** onMetrics is told of each metrics export: the history is read again, from its newest point. */
  onMetrics(): void {
    void this.fetchHistory();
  }

  private async fetchHistory(): Promise<void> {
    const c = this.host.client();
    if (!c || !this.historyOn || this.fetching) return;
    this.fetching = true;
    try {
      const s = since(this.history);
      const r = await c.request<HistoryResult>("telemetry/history", s === undefined ? {} : { sinceUnixNano: s });
      merge(this.history, r);
      this.renderSparks();
    } catch {
      // lost or refused: the next export tries again
    } finally {
      this.fetching = false;
    }
  }

  private renderSparks(): void {
    const h = this.history;
    const mins = h.time.length > 1 ? Math.round((h.time[h.time.length - 1]! - h.time[0]!) / 6e10) : 0;
    const rows: { key: string; label: string; values: number[]; max?: number; now: (v: number) => string }[] = [
      { key: "cpu", label: "CPU", values: h.cpu, max: 1, now: (v) => `${(100 * v).toFixed(0)} %` },
      { key: "memory", label: "Memory", values: h.memory, now: (v) => `${(v / 2 ** 30).toFixed(1)} GiB` },
      { key: "network", label: "Network", values: h.network, now: rate },
      { key: "disk", label: "Disk", values: h.disk, now: rate },
    ];
    const W = 120;
    const H = 22;
    $("sparks").replaceChildren(
      ...rows.map((r) => {
        const row = document.createElement("div");
        row.className = "spark";
        row.dataset.key = r.key;
        const last = r.values[r.values.length - 1] ?? 0;
        const peak = r.values.length > 0 ? Math.max(...r.values) : 0;
        const label = document.createElement("span");
        label.className = "label";
        label.textContent = r.label;
        const svg = document.createElementNS(SVG, "svg");
        svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
        svg.setAttribute("width", String(W));
        svg.setAttribute("height", String(H));
        svg.setAttribute("role", "img");
        svg.setAttribute("aria-label", `${r.label}, the last ${mins || "<1"} min: now ${r.now(last)}, peak ${r.now(peak)}`);
        const line = document.createElementNS(SVG, "polyline");
        line.setAttribute("points", sparkPoints(r.values, W, H - 1, r.max ?? (peak || 1)));
        line.setAttribute("fill", "none");
        svg.append(line);
        const now = document.createElement("span");
        now.className = "now";
        now.textContent = r.now(last);
        row.append(label, svg, now);
        return row;
      }),
    );
  }

  // ---- forwards

  private tunnelMessage(m: Message): void {
    if (m.method === "channel/snapshot") this.tunnels = (m.params?.snapshot?.state?.ports as Tunnel[]) ?? [];
    else if (m.method === "action" && m.params?.action && !m.params.rejectionReason) this.tunnels = applyTunnel(this.tunnels, m.params.action);
    else return;
    this.renderForwards();
  }

  private renderForwards(): void {
    $("forwards-section").hidden = !this.tunnelsChannel;
    const ul = $("forwards");
    if (this.tunnels.length === 0) {
      const li = document.createElement("li");
      li.className = "empty";
      li.textContent = "none";
      ul.replaceChildren(li);
      return;
    }
    ul.replaceChildren(
      ...this.tunnels.map((t) => {
        const d = describe(t);
        const li = document.createElement("li");
        li.dataset.resource = t.resource;
        li.dataset.direction = t.direction;
        li.dataset.state = d.state;
        const flag = document.createElement("span");
        flag.className = "flag";
        flag.textContent = d.flag;
        flag.title = t.direction === "clientToHost" ? "reverse forward: the workload listens, the client dials (sidecar forward -R)" : "the client listens, the workload dials (sidecar forward -L)";
        const text = document.createElement("span");
        text.className = "text";
        text.textContent = d.text;
        const state = document.createElement("span");
        state.className = `state ${d.state}`;
        state.textContent = d.state;
        if (d.detail) state.title = d.detail;
        const who = document.createElement("span");
        who.className = "who";
        who.textContent = `by ${d.who}${d.detail ? ` · ${d.detail}` : ""}`;
        li.append(flag, text, state, who);
        return li;
      }),
    );
  }
}
