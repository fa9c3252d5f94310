// Uploading a file of the browser to the workload through a file channel
// (docs/protocol.md "File channels": files/open mode write, a windowed
// subscription, tcp/data, tcp/eof and files/commit). The file is read in
// slices (Blob.slice), never whole, one slice per data message and each
// only once the host's window has room, so what the page holds is one
// slice beyond the window; each slice is hashed as it is sent (SHA-256,
// incremental: WebCrypto cannot hash a stream, @noble/hashes can) and
// the sum stated after the bytes with files/commit. A transfer cut by a
// lost link (or a host that reset it) is opened again on a new channel
// with resume: the host kept its partial file, whose first bytes the
// page hashes again and, when they are the file's, sends only the rest.
// Each try asks for the page's client of the moment: a new session (the
// host restarted, the grace ended) has a new one, and the client of the
// session lost would fail every try left.

import { sha256 } from "@noble/hashes/sha2.js";
import type { FlowOffer, Message } from "./ahp.js";

/** What an upload needs of the client (client.ts). */
export interface UploadClient {
  request<T = unknown>(method: string, params: object): Promise<T>;
  subscribeWindowed(channel: string, offer: FlowOffer, handler: (m: Message, release: () => void) => void): Promise<void>;
  writable(channel: string): Promise<void>;
  frameOf(channel: string): number;
  sendData(channel: string, method: string, params: object): void;
  control(channel: string, method: string, params?: object): void;
  unsubscribe(channel: string): void;
}

/** The window the page offers a file channel: 4 MiB in flight, 512 KiB messages (the tcp block's maximum). */
export const FILE_WINDOW: FlowOffer = { windowBytes: 4 << 20, maximumFrameBytes: 512 << 10 };
/** HASH_SLICE is the slice read at a time to hash a kept prefix. */
export const HASH_SLICE = 1 << 20;
/**
 * ATTEMPTS bounds the tries in a row of one upload cut by lost links that
 * moved it no further (a try that got more of the file to the host starts
 * the count again); the waits between them grow from RETRY_MS to 8 s. A
 * time without a client (between sessions: the host restarted, the link
 * is down) spends no try: the upload waits for the next session, polling
 * every RETRY_MS, until it comes or the upload is cancelled (the host
 * keeps the partial file).
 */
export const ATTEMPTS = 8;
export const RETRY_MS = 250;

/** HostOutcome is the host's reason for not placing the file (never tried again). */
export class HostOutcome extends Error {}

/** retryable reports whether an attempt that failed with err may succeed on a new channel: a lost link or a reset, not the host's reason, nor a refusal of files/open (a JSON-RPC error with a code), except "being written" (the host still ends the channel of the attempt before). */
function retryable(err: unknown): boolean {
  if (err instanceof HostOutcome) return false;
  const code = (err as { code?: unknown })?.code;
  return typeof code !== "number" || code === -32010;
}

export type Phase = "waiting" | "hashing" | "sending" | "verifying" | "done" | "failed" | "cancelled";

/** A file to upload: a File, or anything with its shape (tests). */
export interface Source {
  name: string;
  size: number;
  lastModified: number;
  slice(start: number, end: number): { arrayBuffer(): Promise<ArrayBuffer> };
}

/**
 * sliceBytes is the most file bytes one tcp/data message carries within
 * frame UTF-16 bytes: its base64 (4 characters per 3 bytes) and the
 * envelope (channel, offset) together, 2 bytes a character.
 */
export function sliceBytes(frame: number, channel: string): number {
  const envelope = `{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":${JSON.stringify(channel)},"offset":9007199254740991,"data":""}}`.length;
  return Math.max(3, Math.floor((Math.floor(frame / 2) - envelope) / 4) * 3);
}

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** base64 is RFC 4648 §4 padded base64 (what tcp/data carries). */
export function base64(b: Uint8Array): string {
  const parts: string[] = [];
  const CH = 3 * 8192;
  for (let start = 0; start < b.length; start += CH) {
    const end = Math.min(b.length, start + CH);
    let s = "";
    let i = start;
    for (; i + 2 < end; i += 3) {
      const n = (b[i]! << 16) | (b[i + 1]! << 8) | b[i + 2]!;
      s += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + B64[n & 63]!;
    }
    if (i < end) {
      const n = (b[i]! << 16) | ((i + 1 < end ? b[i + 1]! : 0) << 8);
      s += B64[n >> 18]! + B64[(n >> 12) & 63]! + (i + 1 < end ? B64[(n >> 6) & 63]! : "=") + "=";
    }
    parts.push(s);
  }
  return parts.join("");
}

/** hex is lowercase hexadecimal. */
export function hex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** joinPath is dir/name for a POSIX absolute dir. */
export function joinPath(dir: string, name: string): string {
  return dir.endsWith("/") ? dir + name : `${dir}/${name}`;
}

/** uploadName refuses a name the host would refuse as an entry (docs/protocol.md "entry"): empty, ".", "..", a slash or NUL. */
export function uploadName(name: string): string | null {
  if (name === "" || name === "." || name === ".." || name.includes("/") || name.includes("\u0000")) return null;
  return name;
}

/** NoClient fails a try made while the page has no client (between sessions): retried. */
export class NoClient extends Error {
  constructor() {
    super("not connected");
  }
}

let seq = 0;

function newChannel(): string {
  return `ahp-file:/up-${Date.now().toString(36)}-${(++seq).toString(36)}`;
}

/**
 * Upload sends one file into dir on the workload as name. run() resolves
 * when the host has it in place, and rejects with the host's reason (or
 * "cancelled"); cancel() stops it at any point: the host resets the
 * channel and never renames its partial file onto the target. clientOf
 * is the page's client of the moment (null between sessions), asked at
 * each try: a try keeps the client it started on, whose loss ends it.
 */
export class Upload {
  phase: Phase = "hashing";
  hashed = 0; // bytes hashed
  sent = 0; // bytes sent
  error = "";
  channel: string;
  private cancelled = false;
  private opened = false;
  private c: UploadClient | null = null; // the client of the try under way
  private confirmed = 0; // the bytes of the file the host held when the last try opened (its kept part, verified)
  private wake: (() => void) | null = null; // ends the wait under way early (cancel)
  private outcome: { resolve: () => void; reject: (e: Error) => void } | null = null;

  constructor(
    private clientOf: () => UploadClient | null,
    readonly file: Source,
    readonly dir: string,
    readonly name: string,
    private onProgress: (u: Upload) => void = () => {},
  ) {
    this.channel = newChannel();
  }

  get size(): number {
    return this.file.size;
  }

  get target(): string {
    return joinPath(this.dir, this.name);
  }

  /** fraction done, 0 to 1: the bytes the host has or was sent. */
  get fraction(): number {
    if (this.size === 0) return this.phase === "done" ? 1 : 0;
    return this.sent / this.size;
  }

  async run(): Promise<void> {
    try {
      await this.transfer();
      this.phase = "done";
    } catch (err) {
      this.phase = this.cancelled ? "cancelled" : "failed";
      this.error = this.cancelled ? "cancelled" : String((err as Error)?.message ?? err);
      this.end();
      throw err;
    } finally {
      this.onProgress(this);
    }
    this.end();
  }

  cancel(): void {
    if (this.cancelled || this.phase === "done" || this.phase === "failed") return;
    this.cancelled = true;
    this.wake?.();
    if (this.opened) this.c?.control(this.channel, "tcp/reset");
    this.outcome?.reject(new Error("cancelled"));
  }

  private check(): void {
    if (this.cancelled) throw new Error("cancelled");
  }

  private end(): void {
    if (this.opened) this.c?.unsubscribe(this.channel);
    this.opened = false;
  }

  /** waitMs is the wait between looks for a client while there is none, retryMs the first wait before a try again (both RETRY_MS; tests shorten them). */
  waitMs = RETRY_MS;
  retryMs = RETRY_MS;

  /**
   * transfer tries until the file is in place, the host tells why not, or
   * ATTEMPTS tries in a row ran (a try that found no client did not) and
   * got no more of the file to the host, as the host's kept part says when
   * the next try opens; a try that ended its session counts like any other.
   */
  private async transfer(): Promise<void> {
    let reached = 0; // the most of the file the host was seen to hold
    let failures = 0; // tries in a row since it last grew
    for (;;) {
      try {
        await this.attempt();
        return;
      } catch (err) {
        this.check();
        if (!retryable(err)) throw err;
        this.end();
        this.channel = newChannel();
        this.outcome = null;
        if (!(err instanceof NoClient)) {
          if (this.confirmed > reached) {
            reached = this.confirmed;
            failures = 0; // the tries before this one moved it on
          }
          if (++failures >= ATTEMPTS) throw err;
        }
        if (!this.clientOf()) {
          await this.waitClient(); // no session: waiting spends no try
          continue;
        }
        await this.sleep(Math.min(8000, this.retryMs * 2 ** (Math.max(1, failures) - 1)));
        this.check();
      }
    }
  }

  /** sleep waits ms, or until the upload is cancelled. */
  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(done, ms);
      const self = this;
      function done(): void {
        clearTimeout(t);
        self.wake = null;
        resolve();
      }
      this.wake = done;
    });
  }

  /** waitClient waits until the page has a client again (phase "waiting"), or the upload is cancelled. */
  private async waitClient(): Promise<void> {
    const was = this.phase;
    this.phase = "waiting";
    this.onProgress(this);
    while (!this.clientOf()) {
      await this.sleep(this.waitMs);
      this.check();
    }
    this.phase = was;
    this.onProgress(this);
  }

  /** open opens the channel for writing, continuing the host's partial file when asked. */
  private async open(c: UploadClient, resume: boolean): Promise<{ offset?: number; prefixSha256?: string }> {
    const f = this.file;
    const r = await c.request<{ offset?: number; prefixSha256?: string }>("files/open", {
      channel: this.channel,
      path: this.dir,
      entry: this.name,
      mode: "write",
      size: f.size,
      fileMode: 0o644,
      mtimeNs: Math.max(0, Math.round(f.lastModified)) * 1e6,
      resume,
    });
    this.opened = true;
    return r ?? {};
  }

  private async attempt(): Promise<void> {
    const f = this.file;
    const c = this.clientOf();
    if (!c) throw new NoClient();
    this.c = c;
    this.phase = "hashing";
    this.hashed = 0;
    let r = await this.open(c, true);
    this.check();
    let h = sha256.create();
    let start = r.offset ?? 0;
    if (start > 0) {
      // The host kept a partial file: continued only when its first
      // bytes are ours.
      for (let off = 0; off < start; ) {
        this.check();
        const end = Math.min(start, off + HASH_SLICE);
        h.update(new Uint8Array(await f.slice(off, end).arrayBuffer()));
        this.hashed = off = end;
        this.onProgress(this);
      }
      this.check();
      if (hex(h.clone().digest()) !== r.prefixSha256) {
        this.end();
        this.channel = newChannel();
        r = await this.open(c, false);
        this.check();
        h = sha256.create();
        start = 0;
      }
    }
    this.confirmed = start; // the host holds the file's first start bytes
    const reason: string[] = [];
    const done = new Promise<void>((resolve, reject) => (this.outcome = { resolve, reject }));
    done.catch(() => {}); // awaited below; a failure before then is not unhandled
    const utf8 = new TextDecoder();
    await c.subscribeWindowed(this.channel, FILE_WINDOW, (m, release) => {
      release();
      const p = m.params ?? {};
      if (m.method === "tcp/data" && typeof p.data === "string") reason.push(utf8.decode(Uint8Array.from(atob(p.data), (ch) => ch.charCodeAt(0))));
      else if (m.method === "tcp/eof") reason.length > 0 ? this.outcome?.reject(new HostOutcome(reason.join(""))) : this.outcome?.resolve();
      else if (m.method === "tcp/reset") this.outcome?.reject(reason.length > 0 ? new HostOutcome(reason.join("")) : new Error(`the host reset the transfer of ${this.name}`));
    });
    this.phase = "sending";
    this.sent = start;
    this.onProgress(this);
    const most = sliceBytes(c.frameOf(this.channel), this.channel);
    for (let off = start; off < f.size; ) {
      await Promise.race([c.writable(this.channel), done]);
      this.check();
      const end = Math.min(f.size, off + most);
      const data = new Uint8Array(await f.slice(off, end).arrayBuffer());
      this.check();
      c.sendData(this.channel, "tcp/data", { offset: off - start, data: base64(data) });
      h.update(data);
      this.sent = off = end;
      this.onProgress(this);
    }
    await Promise.race([c.writable(this.channel), done]);
    this.check();
    c.sendData(this.channel, "tcp/eof", { offset: f.size - start });
    this.phase = "verifying";
    this.onProgress(this);
    await Promise.race([c.request("files/commit", { channel: this.channel, sha256: hex(h.digest()) }), done]);
    await done;
  }
}
