// The page's file transfers: files dropped on a terminal (or chosen with
// Upload…) go into its working directory through a file channel
// (upload.ts); the Files… dialog lists the workload's directories
// (files/list, a page at a time) and downloads a file through
// GET web/files (web/download in Go), which the browser streams to disk:
// the page's session cookie authenticates it, the token never goes in
// the URL.

import type { Client } from "./client.js";
import { RpcError } from "./client.js";
import { endpoint } from "./connect.js";
import { pathFromCwd } from "./names.js";
import { Upload, uploadName, type Source } from "./upload.js";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

/** MAX_SHOWN bounds the uploads listed (the finished ones go first). */
const MAX_SHOWN = 20;
/** LIST_PAGE is the entries asked for at a time. */
const LIST_PAGE = 200;

interface Entry {
  name: string;
  type: "file" | "dir" | "symlink" | "other";
  size?: number;
  target?: string;
}

export interface FilesHost {
  /** client is the page's client of the moment: null between sessions and while one is being set up (initialize, reconnect). */
  client(): Client | null;
  /** connected: whether the page has a session, even one being set up (an upload queued then waits for it). */
  connected(): boolean;
  /** cwd is the working directory of the terminal at the drop (or the active one): a path, or null when unknown. */
  cwd(target: EventTarget | null): string | null;
  /** home is the host's defaultDirectory (a path), asked for when a terminal's is unknown. */
  home(): string;
  /** focusBack gives the focus back to the terminal. */
  focusBack(): void;
  /** allowed: whether the page's role may read and write files (a viewer may not). */
  allowed(): boolean;
}

function errorText(err: unknown): string {
  return err instanceof RpcError ? err.message : String((err as Error)?.message ?? err);
}

export function downloadHref(path: string): string {
  return endpoint(document.baseURI, "web/files", "https:", { path });
}

export class Files {
  readonly uploads: Upload[] = [];
  private queue: Promise<void> = Promise.resolve();
  private dir = "";
  private next: string | undefined;

  constructor(private host: FilesHost) {
    const terms = $("terms");
    const hasFiles = (e: DragEvent) => e.dataTransfer?.types.includes("Files") ?? false;
    terms.addEventListener("dragover", (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      e.dataTransfer!.dropEffect = "copy";
      terms.classList.add("dropping");
    });
    terms.addEventListener("dragleave", () => terms.classList.remove("dropping"));
    terms.addEventListener("drop", (e) => {
      terms.classList.remove("dropping");
      if (!hasFiles(e)) return;
      e.preventDefault();
      void this.upload([...(e.dataTransfer?.files ?? [])], e.target);
    });
    const input = $<HTMLInputElement>("upload-file");
    $("upload").onclick = () => input.click();
    input.onchange = () => {
      const files = [...(input.files ?? [])];
      input.value = "";
      void this.upload(files, null);
    };
    $("files-open").onclick = () => {
      if (this.host.allowed()) this.openBrowser();
    };
    $("files-form").onsubmit = (e) => {
      e.preventDefault();
      void this.list($<HTMLInputElement>("files-path").value.trim());
    };
    $("files-up").onclick = () => void this.list(this.dir.replace(/\/[^/]*\/?$/, "") || "/");
    $("files-more").onclick = () => void this.list(this.dir, this.next);
    $("files-download").onclick = () => {
      const p = $<HTMLInputElement>("files-path").value.trim();
      if (p.startsWith("/")) this.download(p);
      else this.say("Type an absolute path to download.", true);
    };
    $("files-close").onclick = () => $<HTMLDialogElement>("files").close();
    $<HTMLDialogElement>("files").onclose = () => this.host.focusBack();
  }

  /** upload sends files into the directory of the terminal they were dropped on (asked for when unknown), one after another. */
  async upload(files: File[], at: EventTarget | null): Promise<void> {
    if (files.length === 0 || !this.host.allowed()) return;
    let dir = this.host.cwd(at);
    if (!dir) dir = await this.askDir(files);
    if (!dir) return this.host.focusBack();
    for (const f of files) this.start(f, dir);
    this.host.focusBack();
  }

  /** start queues one upload (tests call it with a Source). */
  start(f: Source, dir: string): Upload | null {
    const name = uploadName(f.name);
    if (!this.host.connected() || !name) return null;
    // Each try asks for the client of the moment: one started on a
    // session that ends continues on the next.
    const u = new Upload(() => this.host.client(), f, dir, name, () => this.render());
    this.uploads.push(u);
    // Finished ones beyond the bound are forgotten, oldest first.
    while (this.uploads.length > MAX_SHOWN) {
      const i = this.uploads.findIndex((x) => x.phase === "done" || x.phase === "failed" || x.phase === "cancelled");
      if (i < 0) break;
      this.uploads.splice(i, 1);
    }
    this.queue = this.queue.then(() => (u.phase === "cancelled" ? undefined : u.run().catch(() => {})));
    this.render();
    return u;
  }

  /** askDir asks where to put files dropped on a terminal whose directory the page does not know (no OSC 7). */
  private askDir(files: File[]): Promise<string | null> {
    const d = $<HTMLDialogElement>("ask-dir");
    const input = $<HTMLInputElement>("ask-dir-path");
    $("ask-dir-text").textContent = `This terminal has not said which directory it is in (its shell sends no OSC 7). Where should ${files.length === 1 ? files[0]!.name : `these ${files.length} files`} go on the workload?`;
    input.value = this.host.home();
    d.returnValue = "";
    return new Promise((resolve) => {
      d.onclose = () => {
        const p = input.value.trim();
        resolve(d.returnValue === "ok" && p.startsWith("/") ? p.replace(/(.)\/+$/, "$1") : null);
      };
      d.showModal();
      input.focus();
      input.select();
    });
  }

  private drawn = new Map<Upload, { li: HTMLLIElement; sig: string }>(); // each upload's item, updated in place (a click or the focus stays on it)

  private render(): void {
    const ul = $("uploads");
    ul.hidden = this.uploads.length === 0;
    for (const [u, d] of this.drawn) {
      if (!this.uploads.includes(u)) {
        d.li.remove();
        this.drawn.delete(u);
      }
    }
    this.uploads.forEach((u, i) => {
      let d = this.drawn.get(u);
      if (!d) {
        d = { li: this.item(u), sig: "" };
        this.drawn.set(u, d);
      }
      this.update(u, d);
      if (ul.children[i] !== d.li) ul.insertBefore(d.li, ul.children[i] ?? null);
    });
  }

  private item(u: Upload): HTMLLIElement {
    const li = document.createElement("li");
    li.dataset.target = u.target;
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = u.name;
    name.title = u.target;
    const bar = document.createElement("progress");
    bar.max = 1;
    bar.setAttribute("aria-label", `Upload of ${u.name} to ${u.dir}`);
    const what = document.createElement("span");
    what.className = "what";
    const b = document.createElement("button");
    b.type = "button";
    li.append(name, bar, what, b);
    return li;
  }

  private update(u: Upload, d: { li: HTMLLIElement; sig: string }): void {
    const pct = `${Math.floor(100 * u.fraction)} %`;
    const text =
      u.phase === "waiting" ? `waiting for the host, ${pct} sent` : u.phase === "hashing" ? (u.hashed > 0 ? `checking the part the host kept, ${Math.floor((100 * u.hashed) / Math.max(1, u.size))} %` : "opening…") : u.phase === "sending" ? `sending ${pct}` : u.phase === "verifying" ? "verifying…" : u.phase === "done" ? `uploaded to ${u.dir}` : u.phase === "cancelled" ? "cancelled" : `failed: ${u.error}`;
    const sig = `${u.phase}\u0000${text}`;
    if (sig === d.sig) return;
    d.sig = sig;
    const li = d.li;
    li.dataset.phase = u.phase;
    li.querySelector("progress")!.value = u.fraction;
    li.querySelector(".what")!.textContent = text;
    const b = li.querySelector("button")!;
    const live = u.phase === "waiting" || u.phase === "hashing" || u.phase === "sending" || u.phase === "verifying";
    if (live && b.className !== "cancel") {
      b.className = "cancel";
      b.textContent = "Cancel";
      b.setAttribute("aria-label", `Cancel the upload of ${u.name}`);
      b.onclick = () => {
        u.cancel();
        if (u.phase === "hashing" && u.hashed === 0) u.phase = "cancelled"; // still queued
        this.render();
      };
    } else if (!live && b.className !== "dismiss icon") {
      const had = document.activeElement === b;
      b.className = "dismiss icon";
      b.textContent = "×";
      b.setAttribute("aria-label", `Dismiss ${u.name}`);
      b.onclick = () => {
        this.uploads.splice(this.uploads.indexOf(u), 1);
        this.render();
        this.host.focusBack();
      };
      if (had) b.focus();
    }
  }

  private openBrowser(): void {
    const d = $<HTMLDialogElement>("files");
    const start = this.host.cwd(null) ?? this.host.home();
    d.showModal();
    void this.list(start);
  }

  private say(text: string, error = false): void {
    const el = $("files-msg");
    el.textContent = text;
    el.classList.toggle("error", error);
  }

  /** list shows dir's entries, a page at a time (after: the next page's cursor). */
  async list(dir: string, after?: string): Promise<void> {
    const c = this.host.client();
    if (!c) return;
    if (!dir.startsWith("/")) return this.say("Type an absolute path.", true);
    dir = dir.replace(/(.)\/+$/, "$1");
    $<HTMLInputElement>("files-path").value = dir;
    let r: { entries: Entry[]; next?: string };
    try {
      r = await c.request("files/list", { path: dir, limit: LIST_PAGE, ...(after ? { cursor: after } : {}) });
    } catch (err) {
      return this.say(errorText(err), true);
    }
    const ul = $("files-list");
    if (!after) ul.replaceChildren();
    this.dir = dir;
    this.next = r.next || undefined;
    $("files-more").hidden = !this.next;
    for (const e of r.entries ?? []) ul.append(this.entry(dir, e));
    this.say(`${ul.children.length} entr${ul.children.length === 1 ? "y" : "ies"} in ${dir}${this.next ? " (more below)" : ""}`);
    if (!after) (ul.querySelector("a, button") as HTMLElement | null)?.focus();
  }

  private entry(dir: string, e: Entry): HTMLLIElement {
    const li = document.createElement("li");
    li.dataset.type = e.type;
    const path = dir === "/" ? `/${e.name}` : `${dir}/${e.name}`;
    if (e.type === "dir") {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "dir";
      b.textContent = e.name + "/";
      b.title = `Open ${path}`;
      b.onclick = () => void this.list(path);
      li.append(b);
    } else if (e.type === "file" || e.type === "symlink") {
      const a = document.createElement("a");
      a.href = downloadHref(path);
      a.download = e.name;
      a.className = "file";
      a.textContent = e.name + (e.target ? ` → ${e.target}` : "");
      a.title = `Download ${path}`;
      li.append(a);
      const size = document.createElement("span");
      size.className = "size";
      size.textContent = e.type === "file" ? sizeText(e.size ?? 0) : "link";
      li.append(size);
    } else {
      li.textContent = e.name;
      li.title = "not a regular file";
    }
    return li;
  }

  /** download has the browser fetch path from web/files: it streams to disk, the cookie authenticates it. */
  download(path: string): void {
    const a = document.createElement("a");
    a.href = downloadHref(path);
    a.download = path.slice(path.lastIndexOf("/") + 1);
    document.body.append(a);
    a.click();
    a.remove();
  }
}

function sizeText(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

export { pathFromCwd };
