// Resuming after a lost link (docs/protocol.md "reconnect"): the rules the
// page follows, as client/reconnect.go does for the command line.

/** The initialize and reconnect results' `resume`: the token a reconnect presents, and for how long. */
export interface Resume {
  token: string;
  graceMs: number;
}

/** Reconnect errors (docs/protocol.md): neither is worth retrying. */
export const RESUME_EXPIRED = -32008;
export const RESUME_REFUSED = -32009;

const FIRST_DELAY_MS = 250;
const MAX_DELAY_MS = 5000;

/** backoff is the wait before attempt n (from 1): doubling from 250 ms to at most 5 s, ±20 %. */
export function backoff(attempt: number, random: () => number = Math.random): number {
  const d = Math.min(FIRST_DELAY_MS * 2 ** (attempt - 1), MAX_DELAY_MS);
  return Math.round(d * (0.8 + 0.4 * random()));
}

/** OVERLOADED is the host's answer when it has as many requests in progress as it takes (seed 003 ingress): retryable. */
export const OVERLOADED = -32050;

/** overloadedWait is the wait before resending a request after its attempt-th Overloaded answer (from 1): 10 ms doubling to 1 s, ±20 % (so a refused burst does not come back together). */
export function overloadedWait(attempt: number, random: () => number = Math.random): number {
  const d = Math.min(10 * 2 ** Math.min(attempt - 1, 7), 1000);
  return Math.round(d * (0.8 + 0.4 * random()));
}

/** refusal says why the host will never resume this client ("expired", "refused"), or null for an error worth retrying. */
export function refusal(code: number, data: unknown): "expired" | "refused" | null {
  const kind = (data as { kind?: unknown } | null | undefined)?.kind;
  if (code === RESUME_EXPIRED || kind === "expired") return "expired";
  if (code === RESUME_REFUSED || kind === "refused") return "refused";
  return null;
}

/** graceLeft is how long a client lost at lostAt may still resume (ms; 0 once the grace ended). */
export function graceLeft(r: Resume, lostAt: number, now: number): number {
  return Math.max(0, lostAt + r.graceMs - now);
}

/** Unechoed is the write-ahead record of one windowed subscription: our dispatchActions sent and not yet echoed. */
export class Unechoed {
  private sent = new Map<number, string>();

  constructor(private bound = 256) {}

  sentAs(clientSeq: number, text: string): void {
    this.sent.set(clientSeq, text);
    if (this.sent.size > this.bound) this.sent.delete(this.sent.keys().next().value!); // the oldest
  }

  echoed(clientSeq: number): void {
    this.sent.delete(clientSeq);
  }

  /** take returns (clientSeq, text) in the order sent and forgets them. */
  take(): [number, string][] {
    const sent = [...this.sent];
    this.sent.clear();
    return sent;
  }

  get size(): number {
    return this.sent.size;
  }
}
