// Windowed delivery accounting (seed 000 "Window and Credit"), one
// instance per subscription and direction. Sizes are UTF-16 bytes: twice
// the length of a JavaScript string, which counts UTF-16 code units.

/** size of a message text as the window counts it. */
export function utf16Bytes(text: string): number {
  return 2 * text.length;
}

/**
 * Receiver is our side of a window the host sends into. Each data message
 * is counted when it arrives (received) and released when the page is done
 * with it (for terminal output: once xterm.js has rendered it). release
 * says when to send channel/credit: when everything received is released,
 * or a sixteenth of the window was released since the last credit.
 *
 * It also keeps what waits to be consumed near backlogMs of consumption:
 * it measures the rate the page consumes at (bytes released per busy
 * millisecond) and holds back credit so that no more than
 * rate x backlogMs (the effective window, at most windowBytes) is
 * outstanding. A slow renderer (a throttled tab) then has little queued
 * when the user types Ctrl-C, while a fast one gets the whole window.
 * consumedBytes stays cumulative and never passes what was released.
 */
export class Receiver {
  received = 0;
  released = 0;
  credited = 0;
  /** rate is the measured consumption rate in UTF-16 bytes per millisecond, 0 until known. */
  rate = 0;
  /** floorBytes is the least effective window. */
  floorBytes = RECEIVE_FLOOR_BYTES;

  private busySince: number | null = null; // when the consumer last started on a non-empty backlog
  private unsampled = 0; // released without a time (fragments released on arrival)
  private sampleBytes = 0;
  private sampleMs = 0;

  constructor(
    public windowBytes: number,
    public backlogMs = RECEIVE_BACKLOG_MS,
  ) {}

  receive(size: number, now?: number): void {
    if (this.outstanding === 0 && now !== undefined) this.busySince = now;
    this.received += size;
  }

  /**
   * release marks size bytes done and returns the consumedBytes to send, or
   * null. now (milliseconds) makes it a sample of the consumption rate; a
   * release without it (a fragment released as it arrives) counts into the
   * next sample.
   */
  release(size: number, now?: number): number | null {
    this.released = Math.min(this.received, this.released + size);
    if (now === undefined) {
      this.unsampled += size;
    } else {
      this.sample(size, now);
    }
    const caughtUp = this.released === this.received;
    const target = this.released - (this.windowBytes - this.effectiveWindow);
    if (target > this.credited && (caughtUp || target - this.credited >= this.windowBytes / 16)) {
      this.credited = target;
      return this.credited;
    }
    return null;
  }

  /**
   * effectiveWindow is the outstanding data allowed now: rate x backlogMs
   * within [floorBytes, windowBytes], the whole window until a rate is
   * known. Credit already given is never taken back: after a slowdown the
   * host may still send up to the earlier effective window once.
   */
  get effectiveWindow(): number {
    if (this.rate === 0) return this.windowBytes;
    return Math.min(this.windowBytes, Math.max(this.floorBytes, Math.round(this.rate * this.backlogMs)));
  }

  /** outstanding is what arrived and is not released yet. */
  get outstanding(): number {
    return this.received - this.released;
  }

  private sample(size: number, now: number): void {
    const bytes = size + this.unsampled;
    this.unsampled = 0;
    if (this.busySince === null) return;
    this.sampleBytes += bytes;
    this.sampleMs += Math.max(0, now - this.busySince);
    this.busySince = this.outstanding > 0 ? now : null;
    if (this.sampleMs >= RATE_SAMPLE_MS) {
      const r = this.sampleBytes / this.sampleMs;
      this.rate = this.rate === 0 ? r : (this.rate + r) / 2;
      this.sampleBytes = 0;
      this.sampleMs = 0;
    }
  }
}

/** RECEIVE_BACKLOG_MS is how much consumption time a Receiver lets queue by default. */
export const RECEIVE_BACKLOG_MS = 100;
/** RECEIVE_FLOOR_BYTES is the least effective window: one maximum frame of the default offer. */
export const RECEIVE_FLOOR_BYTES = 16384;
/** RATE_SAMPLE_MS is the busy time a rate sample spans before it updates the estimate. */
const RATE_SAMPLE_MS = 20;

/**
 * Sender is our side of a window we send into (dispatchAction on a windowed
 * subscription counts against hostReceive). canSend follows the rule: no
 * data message while outstanding data is at or beyond the window.
 */
export class Sender {
  sent = 0;
  consumed = 0;

  constructor(public windowBytes: number) {}

  canSend(): boolean {
    return this.sent - this.consumed < this.windowBytes;
  }

  send(size: number): void {
    this.sent += size;
  }

  /** credit takes the host's cumulative consumedBytes; a stale value is ignored. It returns false for credit beyond what was sent. */
  credit(consumedBytes: number): boolean {
    if (consumedBytes > this.sent) return false;
    if (consumedBytes > this.consumed) this.consumed = consumedBytes;
    return true;
  }
}
