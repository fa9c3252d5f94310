// An AHP client over one Link: requests and their responses, subscriptions
// (windowed ones with credit the page returns when it is done with the
// data), and dispatchAction paced by the host's window.

import * as ahp from "./ahp.js";
import { Receiver, Sender, utf16Bytes } from "./flow.js";
import type { Link } from "./link.js";

/** A data message of a windowed subscription; release() returns its credit. */
export type DataHandler = (m: ahp.Message, release: () => void) => void;

export class RpcError extends Error {
  constructor(
    public code: number,
    message: string,
  ) {
    super(message);
  }
}

interface Windowed {
  recv: Receiver;
  send: Sender | null; // once the subscribe result told the host's limits
  queue: string[]; // dispatchAction texts waiting for the host's window
  fragments: number; // bytes of the message being reassembled
  handler: DataHandler;
}

export class Client {
  private nextId = 1;
  private clientSeq = 0;
  private pending = new Map<number, { resolve: (r: any) => void; reject: (e: Error) => void }>();
  private windowed = new Map<string, Windowed>();
  private ordinary = new Map<string, (m: ahp.Message) => void>();
  private frames = new ahp.Reassembler();

  constructor(
    private link: Link,
    public readonly clientId: string,
  ) {}

  /** receive takes one message text from the link. */
  receive(text: string): void {
    const m = JSON.parse(text) as ahp.Message;
    if (m.id !== undefined && m.method === undefined) {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.error) p.reject(new RpcError(m.error.code, m.error.message));
      else p.resolve(m.result);
      return;
    }
    const channel: unknown = m.params?.channel;
    if (typeof channel !== "string") return;
    const w = this.windowed.get(channel);
    if (w && m.method === "channel/credit") {
      if (w.send?.credit(m.params.consumedBytes)) this.flush(channel, w);
      return;
    }
    if (w && ahp.countsAgainstWindow(m)) {
      const size = utf16Bytes(text);
      w.recv.receive(size);
      let msg = m;
      let total = size;
      if (m.method === "channel/frame") {
        w.fragments += size;
        const joined = this.frames.push(channel, String(m.params.data), m.params.final === true);
        if (joined === null) return; // released with the whole message
        msg = JSON.parse(joined) as ahp.Message;
        total = w.fragments;
        w.fragments = 0;
      }
      let done = false;
      w.handler(msg, () => {
        if (done) return;
        done = true;
        const consumed = w.recv.release(total);
        if (consumed !== null && this.windowed.get(channel) === w) this.link.send(ahp.credit(channel, consumed));
      });
      return;
    }
    this.ordinary.get(channel)?.(m);
  }

  /** fail rejects every pending request: the link is gone. */
  fail(why: string): void {
    for (const p of this.pending.values()) p.reject(new Error(why));
    this.pending.clear();
  }

  request<T = any>(method: string, params: object): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.link.send(ahp.request(id, method, params));
    });
  }

  initialize(): Promise<any> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.link.send(ahp.initialize(id, this.clientId));
    });
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
    const w: Windowed = { recv: new Receiver(offer.windowBytes), send: null, queue: [], fragments: 0, handler };
    this.windowed.set(channel, w); // data may follow the result at once
    const result = await this.request("subscribe", { channel, flowControl: { receive: offer } });
    const fc = result?.flowControl;
    if (!fc) throw new Error(`${channel}: the host declined windowed delivery`);
    w.recv.windowBytes = fc.clientReceive.windowBytes;
    w.send = new Sender(fc.hostReceive.windowBytes);
    this.flush(channel, w);
  }

  unsubscribe(channel: string): void {
    this.windowed.delete(channel);
    this.ordinary.delete(channel);
    this.frames.drop(channel);
    this.link.send(ahp.notification("unsubscribe", { channel }));
  }

  /** dispatch sends an action; on a windowed subscription it waits for the host's window. */
  dispatch(channel: string, action: object): void {
    const text = ahp.dispatch(channel, ++this.clientSeq, action);
    const w = this.windowed.get(channel);
    if (!w) {
      this.link.send(text);
      return;
    }
    w.queue.push(text);
    this.flush(channel, w);
  }

  private flush(channel: string, w: Windowed): void {
    while (w.send && w.queue.length > 0 && w.send.canSend() && this.windowed.get(channel) === w) {
      const text = w.queue.shift()!;
      w.send.send(utf16Bytes(text));
      this.link.send(text);
    }
  }
}
