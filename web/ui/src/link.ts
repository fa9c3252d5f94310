// A transport-io session carrying AHP: WebTransport (HTTP/3) or the §3.3
// WebSocket mapping. A Link resolves once the server's handshake arrived
// and our frame 0 was written, so the first EMIT never shares a message
// with frame 0 (docs/protocol.md "First emit").

import { AHP_EVENT_ID, EMIT, FrameDecoder, checkHandshake, emitFrame, handshakeFrame, webSocketCloseToSession, type Frame } from "./tio.js";

/** How a session ended: its session close code (§10.2), or null when it was lost. */
export interface Closed {
  code: number | null;
  reason: string;
}

export interface Link {
  readonly kind: "WebTransport" | "WebSocket";
  send(text: string): void;
  close(): void;
}

/** Handlers receive a session's messages and its end (only after the open resolved). */
export interface Handlers {
  onmessage: (text: string) => void;
  onclose: (c: Closed) => void;
}

/** LinkError is a session that never got going; closed says how it ended when the server said so. */
export class LinkError extends Error {
  constructor(
    message: string,
    public closed: Closed | null,
  ) {
    super(message);
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Frames after frame 0: "ahp" EMITs become messages; others are not ours and are dropped. */
function deliver(frames: Frame[], onmessage: (text: string) => void): void {
  for (const f of frames) {
    if (f.type === EMIT && f.eventId === AHP_EVENT_ID) onmessage(utf8.decode(f.payload));
  }
}

function timeout<T>(ms: number, what: string): Promise<T> {
  return new Promise((_, reject) => setTimeout(() => reject(new LinkError(`${what}: no answer within ${ms / 1000} s`, null)), ms));
}

const KEEPALIVE_MS = 15000;
const IDLE_MS = 45000;

/** openWebSocket opens the WebSocket mapping at url (wss://HOST/PATH/transport-io?ticket=…); signal aborts it until it is open. */
export function openWebSocket(url: string, timeoutMs: number, h: Handlers, signal?: AbortSignal): Promise<Link> {
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  const dec = new FrameDecoder();
  let lastSent = Date.now();
  let lastRecv = Date.now();
  let timer: ReturnType<typeof setInterval> | undefined;
  const link: Link = {
    kind: "WebSocket",
    send(text) {
      if (ws.readyState !== WebSocket.OPEN) return;
      ws.send(emitFrame(text));
      lastSent = Date.now();
    },
    close() {
      ws.close(1000);
    },
  };
  const ready = new Promise<Link>((resolve, reject) => {
    let open = false;
    ws.onopen = () => {
      ws.send(handshakeFrame()); // frame 0, alone in its message
      lastSent = Date.now();
      timer = setInterval(() => {
        const now = Date.now();
        if (now - lastRecv >= IDLE_MS) ws.close(4005, "idle timeout"); // 3000 + WT_IDLE_TIMEOUT
        else if (now - lastSent >= KEEPALIVE_MS) {
          ws.send(new Uint8Array(0));
          lastSent = now;
        }
      }, 1000);
    };
    ws.onmessage = (e: MessageEvent) => {
      lastRecv = Date.now();
      if (!(e.data instanceof ArrayBuffer)) {
        ws.close(4004, "text message"); // WT_PROTOCOL_ERROR
        return;
      }
      let frames: Frame[];
      try {
        frames = dec.push(new Uint8Array(e.data));
      } catch (err) {
        ws.close(4004, String(err));
        return;
      }
      if (!open && frames.length > 0) {
        const why = checkHandshake(frames[0]!);
        if (why) {
          ws.close(4004, why);
          reject(new LinkError(why, null));
          return;
        }
        open = true;
        frames = frames.slice(1);
        resolve(link);
      }
      deliver(frames, (t) => h.onmessage(t));
    };
    signal?.addEventListener("abort", () => {
      if (!open) ws.close(1000);
    });
    ws.onclose = (e: CloseEvent) => {
      clearInterval(timer);
      const code = webSocketCloseToSession(e.code);
      const closed: Closed = { code, reason: code === null ? `WebSocket closed (${e.code})` : e.reason };
      if (!open) reject(new LinkError(closed.reason || "the WebSocket closed before the handshake", closed));
      else h.onclose(closed);
    };
  });
  return Promise.race([ready, timeout<Link>(timeoutMs, "WebSocket")]).catch((err) => {
    ws.close();
    throw err;
  });
}

function hexBytes(hex: string): Uint8Array {
  const b = new Uint8Array(hex.length / 2);
  for (let i = 0; i < b.length; i++) b[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return b;
}

/**
 * openWebTransport opens a WebTransport session at url
 * (https://HOST/PATH/transport-io?ticket=…). certHashes (SHA-256 of the
 * DER, hex) let the browser trust the daemon's development certificate.
 * signal aborts it until it is open.
 */
export async function openWebTransport(url: string, certHashes: string[], timeoutMs: number, h: Handlers, signal?: AbortSignal): Promise<Link> {
  const options: WebTransportOptions = {};
  if (certHashes.length > 0) {
    options.serverCertificateHashes = certHashes.map((h) => ({ algorithm: "sha-256", value: hexBytes(h) as BufferSource }));
  }
  const wt = new WebTransport(url, options);
  let up = false;
  const link: Link = {
    kind: "WebTransport",
    send: () => {},
    close() {
      wt.close({ closeCode: 0, reason: "" });
    },
  };
  const closed: Promise<Closed> = wt.closed.then(
    (info) => ({ code: info.closeCode ?? 0, reason: info.reason ?? "" }),
    (err) => ({ code: null, reason: String(err?.message ?? err) }),
  );
  closed.then((c) => {
    if (up) h.onclose(c);
  });
  const setup = async (): Promise<Link> => {
    await wt.ready;
    const writer = (await wt.createUnidirectionalStream()).getWriter();
    await writer.write(handshakeFrame());
    const streams = wt.incomingUnidirectionalStreams.getReader();
    const first = await streams.read();
    if (first.done) throw new Error("the server opened no emit stream");
    const reader = (first.value as ReadableStream<Uint8Array>).getReader();
    const dec = new FrameDecoder();
    let frames: Frame[] = [];
    while (frames.length === 0) {
      const r = await reader.read();
      if (r.done) throw new Error("the server's emit stream ended before its handshake");
      frames = dec.push(r.value);
    }
    const why = checkHandshake(frames[0]!);
    if (why) throw new Error(why);
    link.send = (text) => {
      writer.write(emitFrame(text)).catch(() => {});
    };
    up = true;
    deliver(frames.slice(1), (t) => h.onmessage(t));
    (async () => {
      try {
        for (;;) {
          const r = await reader.read();
          if (r.done) return;
          deliver(dec.push(r.value), (t) => h.onmessage(t));
        }
      } catch {
        // the session's end is reported by wt.closed
      }
    })();
    return link;
  };
  const aborted = new Promise<never>((_, reject) => {
    signal?.addEventListener("abort", () => {
      if (!up) reject(new LinkError("WebTransport: given up (another transport was used)", null));
    });
  });
  try {
    return await Promise.race([setup(), timeout<Link>(timeoutMs, "WebTransport"), aborted]);
  } catch (err) {
    // A refused session can fail its streams before its close code
    // arrives (Chromium does): wait briefly for the close (seed 002 §4).
    const c = await Promise.race([closed, new Promise<null>((r) => setTimeout(() => r(null), 500))]);
    try {
      wt.close();
    } catch {
      // already closed
    }
    if (err instanceof LinkError) throw err;
    throw new LinkError(c?.reason || String((err as Error)?.message ?? err), c && c.code !== null ? c : null);
  }
}
