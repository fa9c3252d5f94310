// The open tabs: which terminals, in what order, which one is shown. Kept
// in sessionStorage so that a reload reopens them (each resuming its
// terminal), and pure so that it is tested without a browser.

export interface TabState {
  tabs: string[]; // terminal URIs, in the order shown
  active: string | null;
}

export class Tabs {
  tabs: string[] = [];
  active: string | null = null;

  constructor(s?: TabState) {
    if (s) {
      this.tabs = [...s.tabs];
      this.active = s.active !== null && s.tabs.includes(s.active) ? s.active : (s.tabs[0] ?? null);
    }
  }

  has(uri: string): boolean {
    return this.tabs.includes(uri);
  }

  /** open adds uri after the active tab (or shows it if open) and makes it active. */
  open(uri: string): void {
    if (!this.has(uri)) {
      const at = this.active === null ? this.tabs.length : this.tabs.indexOf(this.active) + 1;
      this.tabs.splice(at, 0, uri);
    }
    this.active = uri;
  }

  /** close removes uri; when it was active, its right neighbour (else the left one) becomes active. */
  close(uri: string): void {
    const i = this.tabs.indexOf(uri);
    if (i < 0) return;
    this.tabs.splice(i, 1);
    if (this.active === uri) this.active = this.tabs[Math.min(i, this.tabs.length - 1)] ?? null;
  }

  /** step makes the tab delta places away active, wrapping around; it returns it. */
  step(delta: number): string | null {
    if (this.tabs.length === 0) return null;
    const i = this.active === null ? 0 : this.tabs.indexOf(this.active);
    const n = this.tabs.length;
    this.active = this.tabs[(((i + delta) % n) + n) % n]!;
    return this.active;
  }

  /** nth makes the n-th tab (from 1) active, the last for n beyond; it returns it. */
  nth(n: number): string | null {
    if (this.tabs.length === 0) return null;
    this.active = this.tabs[Math.min(n, this.tabs.length) - 1]!;
    return this.active;
  }

  state(): TabState {
    return { tabs: [...this.tabs], active: this.active };
  }
}

/** MAX_SAVED bounds what a sessionStorage entry restores (a tampered one cannot open thousands). */
export const MAX_SAVED = 32;

/** decodeTabs reads saved tabs, dropping anything that is not a terminal URI; null when there is nothing usable. */
export function decodeTabs(text: string | null): TabState | null {
  if (!text) return null;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return null;
  }
  const o = v as { tabs?: unknown; active?: unknown };
  if (!o || !Array.isArray(o.tabs)) return null;
  const tabs = [...new Set(o.tabs.filter((t): t is string => typeof t === "string" && t.startsWith("ahp-terminal:/")))].slice(0, MAX_SAVED);
  if (tabs.length === 0) return null;
  const active = typeof o.active === "string" && tabs.includes(o.active) ? o.active : tabs[0]!;
  return { tabs, active };
}

/** restorable keeps the saved tabs whose terminals the host still has, and says which are gone. */
export function restorable(s: TabState, onHost: (uri: string) => boolean): { state: TabState; gone: string[] } {
  const tabs = s.tabs.filter(onHost);
  const gone = s.tabs.filter((t) => !onHost(t));
  const active = s.active !== null && tabs.includes(s.active) ? s.active : (tabs[0] ?? null);
  return { state: { tabs, active }, gone };
}

/** What a keyboard shortcut asks for. */
export type Shortcut =
  | { do: "new" }
  | { do: "close" }
  | { do: "step"; delta: number }
  | { do: "nth"; n: number }
  | { do: "find" }
  | { do: "split" }
  | { do: "font"; delta: number };

export interface Keys {
  code: string;
  altKey: boolean;
  shiftKey: boolean;
  ctrlKey: boolean;
  metaKey: boolean;
}

/**
 * shortcut reads the page's own shortcuts, all Alt+Shift+key so that a
 * shell's keys (Ctrl, Alt alone: readline, Emacs, vim) and the browser's
 * (Ctrl+T, Ctrl+Shift+T) reach where they always did; null for any other
 * key. By code (the key's place), since Alt+Shift changes the character
 * it types on some layouts.
 */
export function shortcut(k: Keys): Shortcut | null {
  if (!k.altKey || !k.shiftKey || k.ctrlKey || k.metaKey) return null;
  switch (k.code) {
    case "KeyN":
      return { do: "new" };
    case "KeyW":
      return { do: "close" };
    case "ArrowRight":
    case "BracketRight":
    case "PageDown":
      return { do: "step", delta: 1 };
    case "ArrowLeft":
    case "BracketLeft":
    case "PageUp":
      return { do: "step", delta: -1 };
    case "KeyF":
      return { do: "find" };
    case "KeyS":
      return { do: "split" };
    case "Equal":
    case "NumpadAdd":
      return { do: "font", delta: 1 };
    case "Minus":
    case "NumpadSubtract":
      return { do: "font", delta: -1 };
  }
  const d = /^Digit([1-9])$/.exec(k.code);
  return d ? { do: "nth", n: Number(d[1]) } : null;
}

export const FONT_MIN = 8;
export const FONT_MAX = 32;
export const FONT_DEFAULT = 14;

/** fontSize reads a remembered font size: a whole number within bounds, else the default. */
export function fontSize(saved: string | null): number {
  const n = Number(saved);
  return Number.isInteger(n) && n >= FONT_MIN && n <= FONT_MAX ? n : FONT_DEFAULT;
}

/** nextFontSize is size changed by delta, kept within bounds. */
export function nextFontSize(size: number, delta: number): number {
  return Math.min(FONT_MAX, Math.max(FONT_MIN, size + delta));
}
