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
 * with it (for terminal output: once xterm.js has rendered it). creditDue
 * says when to send channel/credit: when everything received is released,
 * or a sixteenth of the window was released since the last credit.
 */
export class Receiver {
  received = 0;
  released = 0;
  credited = 0;

  constructor(public windowBytes: number) {}

  receive(size: number): void {
    this.received += size;
  }

  /** release marks size bytes done and returns the consumedBytes to send, or null. */
  release(size: number): number | null {
    this.released = Math.min(this.received, this.released + size);
    const caughtUp = this.released === this.received;
    if (this.released > this.credited && (caughtUp || this.released - this.credited >= this.windowBytes / 16)) {
      this.credited = this.released;
      return this.credited;
    }
    return null;
  }

  /** outstanding is what arrived and is not released yet. */
  get outstanding(): number {
    return this.received - this.released;
  }
}

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
