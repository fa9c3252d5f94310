// Who holds the terminal the page shows, at what size, and what the page
// may do about it (docs/protocol.md "Taking a claim over"). Only the claim
// holder resizes a terminal: a page that shares one (a CLI attach or
// another tab holds it) shows it at the holder's size, never sends
// terminal/resized, says who holds it, and offers Take over (a
// terminal/claimed for itself with our takeOver extension).

import type { Claim, TerminalInfo } from "./ahp.js";

export interface Size {
  cols: number;
  rows: number;
}

/** The terminal state fields this reads (a channel/snapshot's state). */
export interface SharedState {
  claim?: Claim;
  cols?: number;
  rows?: number;
}

/** The action envelope fields this reads. */
export interface Origin {
  clientId: string;
  clientSeq: number;
}

/** The largest size the page draws a terminal it shares at (the host allows 4096×4096). */
export const MAX_SHARED: Size = { cols: 1000, rows: 500 };

/** What an action changed for the page. */
export interface Change {
  holding?: boolean; // the page became the holder (true) or stopped being it (false)
  size?: boolean; // the terminal's size on the host changed
  refused?: string; // our claim was rejected, with this reason
  readOnly?: boolean; // the page may only watch now (true), or may type again (false)
}

/** PERMISSION_DENIED is the JSON-RPC code of a refusal by role or share (-32009; our rejectionCode). */
export const PERMISSION_DENIED = -32009;

/**
 * shareTarget reads who to share with as the Share… prompt takes it:
 * "alice" (an identity) or "role:viewer" (every identity of a role);
 * null when empty or an unknown role.
 */
export function shareTarget(text: string): { principal: string } | { role: string } | null {
  const s = text.trim();
  if (s === "") return null;
  if (s.startsWith("role:")) {
    const role = s.slice(5).trim();
    return ["owner", "user", "viewer"].includes(role) ? { role } : null;
  }
  return { principal: s };
}

/** sharesText lists a terminal's shares for people: "alice (read-only), role viewer (read-write)". */
export function sharesText(info: TerminalInfo | undefined): string {
  return (info?.shares ?? [])
    .map((s) => `${s.with.role !== undefined ? `role ${s.with.role}` : s.with.principal} (${s.access === "write" ? "read-write" : "read-only"})`)
    .join(", ");
}

export class Share {
  /** holder is the claim's clientId; null when no client holds the terminal (or not known yet). */
  holder: string | null = null;
  /** size is the terminal's size on the host: its state's, then each accepted terminal/resized. */
  size: Size | null = null;
  /** attached and away are the catalogue's lists for this terminal (docs/protocol.md "Who is attached"). */
  attached: string[] = [];
  away: string[] = [];
  /** takenBy is who took the terminal from this page, until the page holds it again. */
  takenBy: string | null = null;
  /** refused is why our last claim was rejected, until the next one. */
  refused: string | null = null;
  /**
   * readOnly: this page may only watch the terminal (docs/protocol.md
   * "Roles and sharing"): the catalogue lists it with read access, or the
   * host refused its input with -32009. The page then sends no
   * keystrokes or resizes and says "read only".
   */
  readOnly = false;
  private pending: { seq: number; auto: boolean } | null = null;

  constructor(readonly me: string) {}

  get holding(): boolean {
    return this.holder === this.me;
  }

  /** takingOver: a Take over is on its way (its answer not back yet). */
  get takingOver(): boolean {
    return this.pending !== null && !this.pending.auto;
  }

  /** wantsClaim: on opening, the page claims a terminal it does not hold (granted only when the holder has gone). */
  wantsClaim(): boolean {
    return !this.holding;
  }

  /** claiming notes our terminal/claimed sent as clientSeq seq: auto for the claim on opening, else Take over. */
  claiming(seq: number, auto: boolean): void {
    this.pending = { seq, auto };
    this.refused = null;
  }

  /** snapshot takes a terminal state, the first or one mid-stream (it may have skipped our claim's answer). */
  snapshot(st: SharedState): Change {
    const was = this.holding;
    const before = this.size;
    this.pending = null;
    this.setHolder(st.claim);
    if (validSize(st.cols, st.rows)) this.size = { cols: st.cols!, rows: st.rows! };
    return this.changed(was, before);
  }

  /** action takes one action of the terminal's channel, with its echo's origin and rejectionReason. */
  action(a: { type?: string; claim?: SharedState["claim"]; cols?: number; rows?: number }, origin?: Origin, rejection?: string, code?: number): Change {
    const mine = this.pending;
    const ours = origin !== undefined && origin.clientId === this.me && mine !== null && origin.clientSeq === mine.seq;
    if (code === PERMISSION_DENIED && origin?.clientId === this.me) {
      if (ours) this.pending = null;
      if (this.readOnly) return {};
      this.readOnly = true;
      return { readOnly: true };
    }
    if (a.type === "terminal/claimed") {
      if (ours) this.pending = null;
      if (rejection) {
        // On opening, a rejection only means the holder is connected: the page shares.
        if (!ours || mine.auto) return {};
        this.refused = rejection;
        return { refused: rejection };
      }
      const was = this.holding;
      this.setHolder(a.claim);
      return this.changed(was, this.size);
    }
    if (a.type === "terminal/resized" && !rejection && validSize(a.cols, a.rows)) {
      const before = this.size;
      this.size = { cols: a.cols!, rows: a.rows! };
      return this.changed(this.holding, before);
    }
    return {};
  }

  /** catalogue takes the terminal's entry of the root catalogue (who is attached, who is away). */
  catalogue(info: TerminalInfo | undefined): Change {
    this.attached = info?.attached ?? [];
    this.away = info?.away ?? [];
    const me = info?.attachedBy?.find((a) => a.clientId === this.me);
    if (me === undefined) return {};
    const readOnly = me.access === "read";
    if (readOnly === this.readOnly) return {};
    this.readOnly = readOnly;
    return { readOnly };
  }

  /** view is the size to draw the terminal at: the holder's while sharing; null to fit the pane (holding, or size unknown). */
  view(): Size | null {
    if (this.holding || !this.size) return null;
    return { cols: Math.min(this.size.cols, MAX_SHARED.cols), rows: Math.min(this.size.rows, MAX_SHARED.rows) };
  }

  /**
   * notice is what the page says while it shares the terminal, null while
   * it holds it or its claim on opening is still unanswered (granted, as
   * when the holder has gone, the page holds it and says nothing).
   */
  notice(): string | null {
    if (this.readOnly) return "Read only: this terminal is shared with you to watch; your keystrokes are not sent.";
    if (this.holding || this.pending?.auto) return null;
    const size = this.size ? `, ${this.size.cols}×${this.size.rows}` : "";
    let text: string;
    if (this.holder === null) text = `Shared: no client holds this terminal; it is shown at its size${size}.`;
    else {
      const away = this.away.includes(this.holder) && !this.attached.includes(this.holder) ? " (away)" : "";
      const who = label(this.holder) + away;
      text =
        this.takenBy !== null && this.takenBy === this.holder
          ? `${who} took this terminal over: you share it now, at its size${size}; only it resizes it.`
          : `Shared: ${who} holds this terminal; you see it at its size${size}, and only it resizes it.`;
    }
    const others = this.attached.filter((id) => id !== this.me && id !== this.holder);
    if (others.length > 0) text += ` Also sharing: ${others.map(label).join(", ")}.`;
    if (this.refused) text += ` (Take over refused: ${this.refused}.)`;
    return text;
  }

  private setHolder(claim: SharedState["claim"]): void {
    this.holder = claim?.kind === "client" && typeof claim.clientId === "string" ? claim.clientId : null;
  }

  private changed(was: boolean, before: Size | null): Change {
    const out: Change = {};
    if (was !== this.holding) {
      out.holding = this.holding;
      if (this.holding) this.takenBy = null;
      else if (was) this.takenBy = this.holder;
    }
    if (before?.cols !== this.size?.cols || before?.rows !== this.size?.rows) out.size = true;
    return out;
  }
}

function validSize(cols: unknown, rows: unknown): boolean {
  return Number.isInteger(cols) && Number.isInteger(rows) && (cols as number) >= 1 && (rows as number) >= 1;
}

/** label names a client for people: its clientId, and what the ids sidecar gives suggest it is. */
export function label(id: string): string {
  if (id.startsWith("web-")) return `${id} (a page)`;
  if (id.startsWith("sidecar-")) return `${id} (sidecar CLI)`;
  return id;
}

/** holderText is a terminal list entry's word on its claim: held by this page, or by whom, and how many others share it. */
export function holderText(info: TerminalInfo, me: string): string {
  const id = info.claim?.kind === "client" ? info.claim.clientId : undefined;
  if (id === undefined) return "";
  const away = info.away?.includes(id) && !info.attached?.includes(id) ? " (away)" : "";
  const sharers = (info.attached ?? []).filter((a) => a !== id).length;
  return (id === me ? "held by you" : `held by ${id}${away}`) + (sharers > 0 ? `, shared by ${sharers}` : "");
}
