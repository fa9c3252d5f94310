// Pacing the credit of a hidden tab's terminal output, so that a flood in
// a tab nobody looks at does not take the page's main thread (xterm.js
// parses every character it is given) from the tab being typed in: the
// host's window for that terminal then fills and the flood waits there,
// as seed 000 has a slow consumer pace its producer.

/** The rate, in characters per second, a hidden pane's output is credited at. */
export const HIDDEN_RATE = 256 * 1024;

/** Timers a Pacer uses (the page's own; fakes in tests). */
export interface Clock {
  now(): number; // milliseconds
  setTimeout(f: () => void, ms: number): unknown;
  clearTimeout(t: unknown): void;
}

const realClock: Clock = {
  now: () => performance.now(),
  setTimeout: (f, ms) => setTimeout(f, ms),
  clearTimeout: (t) => clearTimeout(t as ReturnType<typeof setTimeout>),
};

/**
 * A Pacer releases credits no faster than rate characters per second: the
 * first at once, each next one when the characters before it have had
 * their time. flush releases everything held at once (the pane is shown).
 * What it holds is bounded by the window: nothing more arrives until
 * credit goes back.
 */
export class Pacer {
  private next = 0; // when the next release may go, in clock milliseconds
  private held: { at: number; release: () => void }[] = [];
  private timer: unknown = null;

  constructor(
    private rate = HIDDEN_RATE,
    private clock: Clock = realClock,
  ) {}

  /** credit releases n characters' credit (release) when their turn comes. */
  credit(n: number, release: () => void): void {
    const now = this.clock.now();
    const at = Math.max(now, this.next);
    this.next = at + (n * 1000) / this.rate;
    if (at <= now && this.held.length === 0) {
      release();
      return;
    }
    this.held.push({ at, release });
    this.arm();
  }

  /** flush releases everything held, now, and paces afresh from here. */
  flush(): void {
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
    const held = this.held;
    this.held = [];
    this.next = 0;
    for (const h of held) h.release();
  }

  /** size is the number of credits held. */
  get size(): number {
    return this.held.length;
  }

  private arm(): void {
    const head = this.held[0];
    if (this.timer !== null || head === undefined) return;
    this.timer = this.clock.setTimeout(
      () => {
        this.timer = null;
        const now = this.clock.now();
        for (let h = this.held[0]; h !== undefined && h.at <= now; h = this.held[0]) {
          this.held.shift();
          h.release();
        }
        this.arm();
      },
      Math.max(0, head.at - this.clock.now()),
    );
  }
}
