// AHP messages the page sends and the rules for the ones it receives
// (docs/protocol.md in the repository is the wire surface).

export const PROTOCOL_VERSION = "0.5.0";
export const ROOT = "ahp-root://";
export const METRICS = "ahp-otlp://metrics";

/** A JSON-RPC 2.0 message as the page reads it. */
export interface Message {
  jsonrpc: "2.0";
  id?: number;
  method?: string;
  params?: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  result?: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  error?: { code: number; message: string; data?: unknown };
}

export interface Claim {
  kind: "client" | "session";
  clientId?: string;
}

export interface TerminalInfo {
  resource: string;
  title?: string;
  claim?: Claim;
  exitCode?: number;
  signal?: string;
  attached?: string[]; // our extension: the clientIds subscribed to it now
  away?: string[]; // and those whose connection was lost, kept for a reconnect
  holder?: string; // our extension (docs/protocol.md "Roles and sharing"): the principal that created it
  shares?: TerminalShare[]; // who else may attach, and how
  attachedBy?: { clientId: string; principal: string; access: Access }[]; // each attached client's identity and access
}

/** Access is a share's or an attached client's: read (watch) or write (type too). */
export type Access = "read" | "write";

export interface TerminalShare {
  with: { principal?: string; role?: string };
  access: Access;
}

export interface Port {
  address: string;
  port: number;
  process?: string;
}

export interface RootState {
  terminals: TerminalInfo[];
  ports?: Port[];
}

/** Control messages do not count against a window (seed 000 "Control Messages"). */
const CONTROL = new Set(["channel/credit", "unsubscribe", "tcp/reset", "channel/ended"]);

/** countsAgainstWindow: every notification for a subscription but the control ones; never a request or response. */
export function countsAgainstWindow(m: Message): boolean {
  return m.id === undefined && typeof m.method === "string" && !CONTROL.has(m.method);
}

export function request(id: number, method: string, params: object): string {
  return JSON.stringify({ jsonrpc: "2.0", id, method, params });
}

export function notification(method: string, params: object): string {
  return JSON.stringify({ jsonrpc: "2.0", method, params });
}

const CLIENT_INFO = { name: "sidecar-web" };

export function initializeParams(clientId: string): object {
  return { channel: ROOT, protocolVersions: [PROTOCOL_VERSION], clientId, clientInfo: CLIENT_INFO, initialSubscriptions: [ROOT] };
}

export function initialize(id: number, clientId: string): string {
  return request(id, "initialize", initializeParams(clientId));
}

/** A windowed subscription to keep across a reconnect. */
export interface KeptWindow {
  channel: string;
  offer: FlowOffer;
  lastApplied: number;
}

/** reconnectParams: every subscription to keep, the windowed ones with new limits and their last applied serverSeq. */
export function reconnectParams(clientId: string, lastSeen: number, resumeToken: string, ordinary: string[], windows: KeptWindow[]): object {
  return {
    channel: ROOT,
    clientId,
    lastSeenServerSeq: lastSeen,
    resumeToken,
    clientInfo: CLIENT_INFO,
    subscriptions: [...ordinary, ...windows.map((w) => w.channel)],
    ...(windows.length > 0 && {
      windows: { items: windows.map((w) => ({ channel: w.channel, flowControl: { receive: w.offer }, lastAppliedServerSeq: w.lastApplied })) },
    }),
  };
}

interface Negotiated {
  clientReceive: FlowOffer;
  hostReceive: FlowOffer;
}

/** The reconnect result (docs/protocol.md "reconnect"). */
export interface ReconnectResult {
  type: "replay" | "snapshot";
  actions?: { channel: string; action: any; serverSeq: number; origin?: { clientId: string; clientSeq: number } }[]; // eslint-disable-line @typescript-eslint/no-explicit-any
  snapshots?: { resource: string; state: unknown; fromSeq: number }[];
  missing?: string[];
  windows?: { items: { channel: string; flowControl: Negotiated; recovery: "replay" | "snapshot" | "live"; headSeq?: number }[] };
  serverSeq: number;
  resume?: { token: string; graceMs: number };
}

export interface FlowOffer {
  windowBytes: number;
  maximumFrameBytes: number;
}

export function subscribe(id: number, channel: string, offer?: FlowOffer): string {
  return request(id, "subscribe", offer ? { channel, flowControl: { receive: offer } } : { channel });
}

export function credit(channel: string, consumedBytes: number): string {
  return notification("channel/credit", { channel, consumedBytes });
}

export function dispatch(channel: string, clientSeq: number, action: object): string {
  return notification("dispatchAction", { channel, clientSeq, action });
}

export function createTerminal(id: number, channel: string, clientId: string, cols: number, rows: number): string {
  return request(id, "createTerminal", { channel, claim: { kind: "client", clientId }, cols, rows });
}

export function disposeTerminal(id: number, channel: string): string {
  return request(id, "disposeTerminal", { channel });
}

/** terminalUri names a new terminal: ahp-terminal:/web-<random>. */
export function newTerminalUri(random: () => number = Math.random): string {
  return "ahp-terminal:/web-" + Math.floor(random() * 2 ** 48).toString(36);
}

/** exitText words a terminal's end: "exited with status 0", "killed by SIGKILL". */
export function exitText(e: { exitCode?: number; signal?: string }): string {
  if (e.signal) return `killed by ${e.signal}`;
  if (typeof e.exitCode === "number") return `exited with status ${e.exitCode}`;
  return "exited";
}

/**
 * Reassembler joins channel/frame fragments per channel: push returns the
 * whole message text once the final fragment arrived, else null.
 */
export class Reassembler {
  private parts = new Map<string, string[]>();

  push(channel: string, data: string, final: boolean): string | null {
    let p = this.parts.get(channel);
    if (!p) this.parts.set(channel, (p = []));
    p.push(data);
    if (!final) return null;
    this.parts.delete(channel);
    return p.join("");
  }

  drop(channel: string): void {
    this.parts.delete(channel);
  }
}

/** Metrics the panel shows, read from one otlp/exportMetrics payload. */
export interface MetricsView {
  cpu?: number; // busy fraction of the whole machine
  memUsed?: number; // bytes
  memLimit?: number; // bytes
  load1?: number;
  clients?: number;
}

interface DataPoint {
  attributes?: { key: string; value: { stringValue?: string; intValue?: string } }[];
  asDouble?: number;
  asInt?: string;
}

function pointValue(p: DataPoint): number {
  return p.asDouble ?? Number(p.asInt ?? NaN);
}

function attr(p: DataPoint, key: string): string | undefined {
  const a = p.attributes?.find((a) => a.key === key);
  return a?.value.stringValue ?? a?.value.intValue;
}

/** readMetrics picks the panel's figures out of an ExportMetricsServiceRequest. */
export function readMetrics(payload: any): MetricsView {
  const out: MetricsView = {};
  for (const rm of payload?.resourceMetrics ?? []) {
    for (const sm of rm.scopeMetrics ?? []) {
      for (const m of sm.metrics ?? []) {
        const points: DataPoint[] = (m.gauge ?? m.sum)?.dataPoints ?? [];
        switch (m.name) {
          case "system.cpu.utilization": {
            const idle = points.find((p) => attr(p, "cpu.mode") === "idle" && attr(p, "cpu.logical_number") === undefined);
            if (idle) out.cpu = 1 - pointValue(idle);
            break;
          }
          case "system.memory.usage": {
            const used = points.find((p) => attr(p, "system.memory.state") === "used");
            if (used) out.memUsed = pointValue(used);
            break;
          }
          case "system.memory.limit":
            if (points[0]) out.memLimit = pointValue(points[0]);
            break;
          case "system.cpu.load_average.1m":
            if (points[0]) out.load1 = pointValue(points[0]);
            break;
          case "sidecar.clients":
            if (points[0]) out.clients = pointValue(points[0]);
            break;
        }
      }
    }
  }
  return out;
}
