// transport-io framing (seed 002 §5), the part a browser client needs: the
// handshake and EMIT frames of the emit lane, on WebTransport's
// unidirectional streams and on the WebSocket mapping (§3.3) alike.

/** Frame types (§5.2). */
export const HANDSHAKE = 0x01;
export const EMIT = 0x02;
/** Codec JSON (§5.3). */
export const CODEC_JSON = 0x01;
/** The sidecar's one event, "ahp": the first four bytes of SHA-256("ahp"). */
export const AHP_EVENT = "ahp";
export const AHP_EVENT_ID = 95909084;
/** The largest payload of a stream frame (§5.1). */
export const MAX_PAYLOAD = 1 << 20;

/** Session close codes (§10.2) the page tells apart. */
export const WT_NO_ERROR = 0;
export const WT_UNAUTHORIZED = 1007;

export interface Frame {
  type: number;
  codec: number;
  eventId: number;
  payload: Uint8Array;
}

const utf8 = new TextEncoder();

/** encodeFrame lays out one frame: length, type, codec, reserved, event id, payload. */
export function encodeFrame(type: number, codec: number, eventId: number, payload: Uint8Array): Uint8Array {
  if (payload.length < 1 || payload.length > MAX_PAYLOAD) {
    throw new RangeError(`transport-io payload of ${payload.length} bytes (1 to ${MAX_PAYLOAD})`);
  }
  const out = new Uint8Array(12 + payload.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, 8 + payload.length);
  v.setUint8(4, type);
  v.setUint8(5, codec);
  v.setUint16(6, 0);
  v.setUint32(8, eventId >>> 0);
  out.set(payload, 12);
  return out;
}

/** handshakeFrame is frame 0: version 0, no features, the sidecar's contract. */
export function handshakeFrame(): Uint8Array {
  const hs = { v: 0, feat: [], events: [[AHP_EVENT, AHP_EVENT_ID, "reliable"]] };
  return encodeFrame(HANDSHAKE, CODEC_JSON, 0, utf8.encode(JSON.stringify(hs)));
}

/** emitFrame carries one AHP (JSON-RPC) message text. */
export function emitFrame(text: string): Uint8Array {
  return encodeFrame(EMIT, CODEC_JSON, AHP_EVENT_ID, utf8.encode(text));
}

/**
 * FrameDecoder recovers frames from a byte stream cut anywhere (QUIC reads
 * and WebSocket messages carry no frame boundaries). push throws on a
 * framing violation, which ends the session as a protocol error.
 */
export class FrameDecoder {
  private buf = new Uint8Array(0);

  push(chunk: Uint8Array): Frame[] {
    if (chunk.length === 0) return [];
    if (this.buf.length === 0) {
      this.buf = chunk.slice();
    } else {
      const b = new Uint8Array(this.buf.length + chunk.length);
      b.set(this.buf);
      b.set(chunk, this.buf.length);
      this.buf = b;
    }
    const frames: Frame[] = [];
    let off = 0;
    while (this.buf.length - off >= 4) {
      const v = new DataView(this.buf.buffer, this.buf.byteOffset + off);
      const length = v.getUint32(0);
      if (length < 9 || length > 8 + (16 << 20)) {
        throw new Error(`transport-io frame length ${length} out of range`);
      }
      if (this.buf.length - off < 4 + length) break;
      if (v.getUint16(6) !== 0) throw new Error("transport-io frame with reserved bits set");
      frames.push({
        type: v.getUint8(4),
        codec: v.getUint8(5),
        eventId: v.getUint32(8),
        payload: this.buf.slice(off + 12, off + 4 + length),
      });
      off += 4 + length;
    }
    this.buf = off === this.buf.length ? new Uint8Array(0) : this.buf.slice(off);
    return frames;
  }

  /** pending is how many bytes wait for the rest of their frame. */
  get pending(): number {
    return this.buf.length;
  }
}

/**
 * checkHandshake validates the peer's frame 0 and returns why it cannot be
 * used, or "" when its table has our event as we declare it.
 */
export function checkHandshake(f: Frame): string {
  if (f.type !== HANDSHAKE) return `frame 0 is type ${f.type}, not HANDSHAKE`;
  let hs: { v?: unknown; events?: unknown };
  try {
    hs = JSON.parse(new TextDecoder().decode(f.payload));
  } catch {
    return "handshake is not JSON";
  }
  if (hs.v !== 0) return `protocol version ${String(hs.v)}, want 0`;
  if (!Array.isArray(hs.events)) return "handshake without events";
  for (const e of hs.events as unknown[]) {
    if (Array.isArray(e) && e[0] === AHP_EVENT) {
      if (e[1] !== AHP_EVENT_ID || e[2] !== "reliable") return `event 'ahp' declared as ${JSON.stringify(e)} at the peer`;
      return "";
    }
  }
  return "the peer does not know the event 'ahp'";
}

/** webSocketCloseToSession maps a §3.3 WebSocket close code onto a session code (or null: no session code). */
export function webSocketCloseToSession(code: number): number | null {
  if (code === 1000) return WT_NO_ERROR;
  if (code >= 4000 && code <= 4999) return code - 3000; // §10.2 codes 1000-1999
  return null;
}
