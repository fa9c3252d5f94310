// An AHP client over one Link at a time: requests and their responses,
// subscriptions (windowed ones with credit the page returns when it is
// done with the data), dispatchAction paced by the host's window, and
// reconnect on a new Link after the last one was lost.

import * as ahp from "./ahp.js";
import { Receiver, Sender, utf16Bytes } from "./flow.js";
import type { Link } from "./link.js";
import { readIdentity, type Identity } from "./roles.js";
import { OVERLOADED, Unechoed, overloadedWait, type Resume } from "./resume.js";

/** A data message of a windowed subscription; release() returns its credit. */
export type DataHandler = (m: ahp.Message, release: () => void) => void;

export class RpcError extends Error {
  constructor(
    public code: number,
    message: string,
    public data?: unknown,
  ) {
    super(message);
  }
}

interface Windowed {
  offer: ahp.FlowOffer;
  recv: Receiver; // replaced on each connection: counters start at zero
  send: Sender | null; // null until the host's limits are known on this connection
  frame: number; // the host's maximumFrameBytes for what we send (UTF-16 bytes)
  queue: [number, string][]; // dispatchActions (clientSeq, text) waiting for the host's window
  unechoed: Unechoed; // sent, no echo yet: sent again after a replay
  lastApplied: number; // serverSeq of the newest action (or snapshot) received
  awaitHead: number; // after a replay: sends wait until lastApplied reaches it, the unechoed go first
  handler: DataHandler;
  waiters: { resolve: () => void; reject: (e: Error) => void }[]; // writable() callers waiting for room in the host's window
}

interface Pending {
  resolve: (r: any) => void;
  reject: (e: Error) => void;
  apply?: (r: any) => void; // run as the result is read, before any later message
}

/** What a reconnect kept: the channels the host no longer has, and our input of unknown fate. */
export interface Resumed {
  type: "replay" | "snapshot";
  missing: string[];
  unknownFate: number;
}

export class Client {
  private nextId = 1;
  private clientSeq = 0;
  private pending = new Map<number, Pending>();
  private resyncing = new Set<string>(); // ordinary channels subscribing again after a gap
  private windowed = new Map<string, Windowed>();
  private ordinary = new Map<string, (m: ahp.Message) => void>();
  private frames = new ahp.Reassembler();
  private link: Link | null = null;
  /** lastSeen is the serverSeq of the newest action of the ordinary subscriptions. */
  lastSeen = 0;
  /** resume is what a reconnect needs, once the host offered it. */
  resume: Resume | null = null;
  /** identity is who the host says this client is (initialize and reconnect results); null when it said nothing. */
  identity: Identity | null = null;

  constructor(public readonly clientId: string) {}

  /** use makes l the link for what follows (initialize or reconnect first). */
  use(l: Link): void {
    this.link = l;
  }

  /** carries reports whether messages of l are for us. */
  carries(l: Link): boolean {
    return this.link === l;
  }

  /** receive takes one message text from the link. */
  receive(text: string): void {
    const m = JSON.parse(text) as ahp.Message;
    if (m.id !== undefined && m.method === undefined) {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.error) return p.reject(new RpcError(m.error.code, m.error.message, m.error.data));
      try {
        p.apply?.(m.result);
      } catch (err) {
        return p.reject(err as Error);
      }
      p.resolve(m.result);
      return;
    }
    const channel: unknown = m.params?.channel;
    if (typeof channel !== "string") return;
    const w = this.windowed.get(channel);
    if (m.method === "channel/ended") return this.ended(channel, m);
    if (w && m.method === "channel/credit") {
      if (w.send?.credit(m.params.consumedBytes)) {
        this.flush(channel, w);
        this.wake(w);
      }
      return;
    }
    if (w && ahp.countsAgainstWindow(m)) return this.data(channel, w, m, text);
    if (m.method === "action" && typeof m.params.serverSeq === "number") this.lastSeen = Math.max(this.lastSeen, m.params.serverSeq);
    if (m.method === "channel/gap" && !w && this.ordinary.has(channel)) return void this.resync(channel, m);
    this.ordinary.get(channel)?.(m);
  }

  /**
   * ended takes channel/ended (docs/protocol.md "channel/ended"): the host
   * ended our subscription (a revoked share). It is forgotten here, so a
   * reconnect never asks for it again, and its handler gets the message
   * (params.error says why) as the last one.
   */
  private ended(channel: string, m: ahp.Message): void {
    const w = this.windowed.get(channel);
    const o = this.ordinary.get(channel);
    for (const x of w?.waiters.splice(0) ?? []) x.reject(new Error(`${channel}: ${m.params?.error?.message ?? "ended by the host"}`));
    this.windowed.delete(channel);
    this.ordinary.delete(channel);
    this.frames.drop(channel);
    w?.handler(m, () => {});
    o?.(m);
  }

  private data(channel: string, w: Windowed, m: ahp.Message, text: string): void {
    const recv = w.recv;
    const size = utf16Bytes(text);
    recv.receive(size, performance.now());
    let msg = m;
    if (m.method === "channel/frame") {
      const joined = this.frames.push(channel, String(m.params.data), m.params.final === true);
      if (joined === null) {
        // Seed 000 "Window and Credit": a receiver MUST NOT wait for the
        // final fragment before releasing the others. A message whose
        // fragments add up to more than the window (a 4 KiB PTY read of
        // `yes` is a ~12.5 KB action but ~16.8 KB as channel/frame
        // fragments, over a 16 KiB window) would otherwise never
        // complete: the host waits for credit, we for the last fragment.
        // A fragment is released as it arrives; the final one with the
        // whole message.
        const consumed = recv.release(size);
        if (consumed !== null) this.link?.send(ahp.credit(channel, consumed));
        return;
      }
      msg = JSON.parse(joined) as ahp.Message;
    }
    this.applied(channel, w, msg);
    let done = false;
    w.handler(msg, () => {
      if (done) return;
      done = true;
      if (this.windowed.get(channel) !== w || w.recv !== recv) return; // credit of a connection gone
      const consumed = recv.release(size, performance.now());
      if (consumed !== null) this.link?.send(ahp.credit(channel, consumed));
    });
  }

  /** applied notes a windowed data message's serverSeq and the echo of our own dispatch. */
  private applied(channel: string, w: Windowed, m: ahp.Message): void {
    const p = m.params ?? {};
    if (m.method === "channel/snapshot" && typeof p.snapshot?.fromSeq === "number") w.lastApplied = p.snapshot.fromSeq;
    else if (m.method === "action" && typeof p.serverSeq === "number") w.lastApplied = Math.max(w.lastApplied, p.serverSeq);
    if (p.origin?.clientId === this.clientId) w.unechoed.echoed(p.origin.clientSeq);
    if (w.awaitHead > 0 && w.lastApplied >= w.awaitHead) {
      w.awaitHead = 0; // the replay is over: what saw no echo never arrived
      this.resend(channel, w);
    }
  }

  /** lost ends the link: requests fail, sends wait for the next link, credit of what is in flight is forgotten. */
  lost(why: string): void {
    this.link = null;
    for (const p of this.pending.values()) p.reject(new Error(why));
    this.pending.clear();
    for (const w of this.windowed.values()) {
      w.send = null;
      for (const x of w.waiters.splice(0)) x.reject(new Error(why));
    }
  }

  /**
   * call sends a request and resolves with its result. An Overloaded answer
   * (-32050: the host did not start it) is sent again after overloadedWait,
   * for as long as the link it went on is in use; other errors reject.
   */
  private async call<T = any>(method: string, params: object, apply?: (r: T) => void): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const l = this.link;
      try {
        return await this.callOnce<T>(method, params, apply);
      } catch (err) {
        if (!(err instanceof RpcError) || err.code !== OVERLOADED || this.link !== l) throw err;
        await new Promise((r) => setTimeout(r, overloadedWait(attempt)));
        if (this.link !== l) throw err;
      }
    }
  }

  private callOnce<T>(method: string, params: object, apply?: (r: T) => void): Promise<T> {
    const l = this.link;
    if (!l) return Promise.reject(new Error("not connected"));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, apply });
      l.send(ahp.request(id, method, params));
    });
  }

  request<T = any>(method: string, params: object): Promise<T> {
    return this.call<T>(method, params);
  }

  initialize(): Promise<any> {
    return this.call("initialize", ahp.initializeParams(this.clientId), (r) => {
      this.lastSeen = r?.serverSeq ?? 0;
      this.resume = r?.resume?.token ? r.resume : null;
      this.identity = readIdentity(r);
    });
  }

  /**
   * reconnect resumes on the link in use everything this client kept: the
   * ordinary subscriptions from lastSeen, each windowed one with fresh
   * counters from its last applied action (replay), a new snapshot, or live.
   */
  reconnect(): Promise<Resumed> {
    if (!this.resume) return Promise.reject(new Error("the host offered no resume"));
    for (const [channel, w] of this.windowed) {
      // Counters at zero, partial fragments discarded; nothing is sent before the result.
      w.recv = new Receiver(w.offer.windowBytes);
      w.send = null;
      w.awaitHead = 0;
      this.frames.drop(channel);
    }
    const windows = [...this.windowed].map(([channel, w]) => ({ channel, offer: w.offer, lastApplied: w.lastApplied }));
    const params = ahp.reconnectParams(this.clientId, this.lastSeen, this.resume.token, [...this.ordinary.keys()], windows);
    let out: Resumed = { type: "replay", missing: [], unknownFate: 0 };
    return this.call<ahp.ReconnectResult>("reconnect", params, (r) => {
      out = this.applyReconnect(r);
    }).then(() => out);
  }

  /** applyReconnect runs as the result is read: the data and actions after it follow what it kept. */
  private applyReconnect(r: ahp.ReconnectResult): Resumed {
    const out: Resumed = { type: r.type, missing: r.missing ?? [], unknownFate: 0 };
    if (r.resume?.token) this.resume = r.resume;
    this.identity = readIdentity(r) ?? this.identity;
    const kept = new Map((r.windows?.items ?? []).map((it) => [it.channel, it]));
    for (const [channel, w] of this.windowed) {
      const it = kept.get(channel);
      if (!it) {
        if (!out.missing.includes(channel)) out.missing.push(channel);
        this.windowed.delete(channel);
        continue;
      }
      w.recv.windowBytes = it.flowControl.clientReceive.windowBytes;
      w.send = new Sender(it.flowControl.hostReceive.windowBytes);
      w.frame = it.flowControl.hostReceive.maximumFrameBytes;
      if (it.recovery !== "replay") out.unknownFate += w.unechoed.take().length; // a snapshot: their fate is unknown
      else if ((it.headSeq ?? 0) > w.lastApplied) w.awaitHead = it.headSeq!; // the echoes come with the replay
      else this.resend(channel, w);
      this.flush(channel, w);
    }
    for (const channel of out.missing) this.ordinary.delete(channel);
    for (const a of r.type === "replay" ? (r.actions ?? []) : []) {
      this.lastSeen = Math.max(this.lastSeen, a.serverSeq);
      this.ordinary.get(a.channel)?.({ jsonrpc: "2.0", method: "action", params: a });
    }
    for (const s of r.type === "snapshot" ? (r.snapshots ?? []) : []) {
      this.ordinary.get(s.resource)?.({ jsonrpc: "2.0", method: "channel/snapshot", params: { channel: s.resource, snapshot: s } });
    }
    this.lastSeen = Math.max(this.lastSeen, r.serverSeq);
    return out;
  }

  /** resend puts our unechoed dispatchActions back at the head of the queue, in their order. */
  private resend(channel: string, w: Windowed): void {
    w.queue.unshift(...w.unechoed.take());
    this.flush(channel, w);
  }

  /**
   * resync answers a channel/gap on an ordinary subscription (docs/protocol.md
   * "channel/gap": actions after afterSeq were not pushed): it subscribes
   * again and hands the fresh snapshot to the handler as a channel/snapshot,
   * which replaces the stale state (the root channel's are small). A channel
   * without snapshots (telemetry, live only) gets the gap itself.
   */
  private async resync(channel: string, gap: ahp.Message): Promise<void> {
    if (this.resyncing.has(channel)) return; // the snapshot under way covers this gap too
    this.resyncing.add(channel);
    try {
      const r = await this.subscribe(channel);
      const handler = this.ordinary.get(channel);
      if (r?.snapshot) handler?.({ jsonrpc: "2.0", method: "channel/snapshot", params: { channel, snapshot: r.snapshot } });
      else handler?.(gap);
    } catch {
      // lost or refused: a reconnect resumes the subscription anyway
    } finally {
      this.resyncing.delete(channel);
    }
  }

  /** on handles the notifications of an ordinary subscription (the root channel's, say). */
  on(channel: string, handler: (m: ahp.Message) => void): void {
    this.ordinary.set(channel, handler);
  }

  async subscribe(channel: string): Promise<any> {
    return this.request("subscribe", { channel });
  }

  /** subscribeWindowed subscribes with a receive window; handler gets each data message. */
  async subscribeWindowed(channel: string, offer: ahp.FlowOffer, handler: DataHandler): Promise<void> {
    const w: Windowed = { offer, recv: new Receiver(offer.windowBytes), send: null, frame: offer.maximumFrameBytes, queue: [], unechoed: new Unechoed(), lastApplied: 0, awaitHead: 0, handler, waiters: [] };
    this.windowed.set(channel, w); // data may follow the result at once
    const result = await this.request("subscribe", { channel, flowControl: { receive: offer } }).catch((err) => {
      // Refused: forget it. Lost: the host may have it, a reconnect asks.
      if (err instanceof RpcError && this.windowed.get(channel) === w) this.windowed.delete(channel);
      throw err;
    });
    const fc = result?.flowControl;
    if (!fc) throw new Error(`${channel}: the host declined windowed delivery`);
    w.recv.windowBytes = fc.clientReceive.windowBytes;
    w.send = new Sender(fc.hostReceive.windowBytes);
    w.frame = fc.hostReceive.maximumFrameBytes;
    this.flush(channel, w);
  }

  unsubscribe(channel: string): void {
    for (const x of this.windowed.get(channel)?.waiters.splice(0) ?? []) x.reject(new Error(`${channel}: unsubscribed`));
    this.windowed.delete(channel);
    this.ordinary.delete(channel);
    this.frames.drop(channel);
    this.link?.send(ahp.notification("unsubscribe", { channel }));
  }

  /**
   * writable resolves once a data message may go on the windowed
   * subscription channel (the host's window has room), and rejects when
   * the link is lost or the subscription ends: a sender that awaits it
   * before it reads its next chunk holds at most one chunk beyond the
   * window.
   */
  writable(channel: string): Promise<void> {
    const w = this.windowed.get(channel);
    if (!w) return Promise.reject(new Error(`${channel}: not subscribed`));
    if (this.link && w.send?.canSend()) return Promise.resolve();
    if (!this.link || !w.send) return Promise.reject(new Error("not connected"));
    return new Promise((resolve, reject) => w.waiters.push({ resolve, reject }));
  }

  /** frameOf is the host's maximumFrameBytes (UTF-16 bytes) for what we send on channel. */
  frameOf(channel: string): number {
    return this.windowed.get(channel)?.frame ?? 16384;
  }

  /** sendData sends a data notification (tcp/data, tcp/eof) on a windowed subscription, counted against the host's window: call it once writable() resolved. */
  sendData(channel: string, method: string, params: object): void {
    const w = this.windowed.get(channel);
    if (!w?.send || !this.link) throw new Error(`${channel}: not connected`);
    const text = ahp.notification(method, { channel, ...params });
    w.send.send(utf16Bytes(text));
    this.link.send(text);
  }

  /** control sends a control notification (tcp/reset: not counted against a window). */
  control(channel: string, method: string, params: object = {}): void {
    this.link?.send(ahp.notification(method, { channel, ...params }));
  }

  private wake(w: Windowed): void {
    while (w.waiters.length > 0 && this.link && w.send?.canSend()) w.waiters.shift()!.resolve();
  }

  /** receiving describes our window on a windowed subscription (for tests and the curious): UTF-16 bytes and bytes per millisecond. */
  receiving(channel: string): { outstanding: number; effectiveWindow: number; rate: number } | null {
    const r = this.windowed.get(channel)?.recv;
    return r ? { outstanding: r.outstanding, effectiveWindow: r.effectiveWindow, rate: r.rate } : null;
  }

  /**
   * input sends typed or pasted text as terminal/input, split so that each
   * dispatchAction fits the host's maximumFrameBytes (a larger one closes
   * the connection): a UTF-16 unit is at most 6 characters of JSON (\uXXXX),
   * and a surrogate pair is never split.
   */
  input(channel: string, data: string): void {
    const frame = this.windowed.get(channel)?.frame ?? 16384;
    const most = inputChunk(frame);
    for (let i = 0; i < data.length; ) {
      let end = Math.min(data.length, i + most);
      const last = data.charCodeAt(end - 1);
      if (end < data.length && last >= 0xd800 && last <= 0xdbff) end--; // keep the pair whole
      this.dispatch(channel, { type: "terminal/input", data: data.slice(i, end) });
      i = end;
    }
  }

  /** dispatch sends an action and returns its clientSeq (its echo's origin carries it); on a windowed subscription it waits for the host's window (and for a link). */
  dispatch(channel: string, action: object): number {
    const seq = ++this.clientSeq;
    const text = ahp.dispatch(channel, seq, action);
    const w = this.windowed.get(channel);
    if (!w) {
      this.link?.send(text);
      return seq;
    }
    w.queue.push([seq, text]);
    this.flush(channel, w);
    return seq;
  }

  private flush(channel: string, w: Windowed): void {
    while (this.link && w.send && w.awaitHead === 0 && w.queue.length > 0 && w.send.canSend() && this.windowed.get(channel) === w) {
      const [seq, text] = w.queue.shift()!;
      w.send.send(utf16Bytes(text));
      w.unechoed.sentAs(seq, text);
      this.link.send(text);
    }
  }
}

/** inputChunk is the most UTF-16 units of input one dispatchAction carries within frame UTF-16 bytes: 6 characters of JSON each at worst, 512 bytes for the envelope. */
export function inputChunk(frame: number): number {
  return Math.max(16, Math.floor((frame - 512) / 12));
}
