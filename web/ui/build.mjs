// Builds the page into ../dist (committed, embedded by package web):
//   node build.mjs           write ../dist
//   node build.mjs --check   fail when ../dist differs from a fresh build
//   node build.mjs --tests   bundle test/*.test.ts into .test-out/ for node --test
// esbuild's output depends only on the sources and the versions pinned in
// package-lock.json, so a build is reproducible.
import * as esbuild from "esbuild";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const here = new URL(".", import.meta.url).pathname;
const args = process.argv.slice(2);

async function build(out) {
  mkdirSync(join(out, "assets"), { recursive: true });
  await esbuild.build({
    absWorkingDir: here,
    entryPoints: { app: "src/main.ts" },
    bundle: true,
    format: "esm",
    target: "es2022",
    minify: true,
    legalComments: "eof",
    outdir: join(out, "assets"),
    logLevel: "warning",
  });
  await esbuild.build({
    absWorkingDir: here,
    entryPoints: { app: "src/app.css" },
    bundle: true,
    minify: true,
    outdir: join(out, "assets"),
    logLevel: "warning",
  });
  copyFileSync(join(here, "index.html"), join(out, "index.html"));
}

function files(dir, prefix = "") {
  return readdirSync(join(dir, prefix), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(dir, join(prefix, e.name)) : [join(prefix, e.name)],
  );
}

const dist = join(here, "..", "dist");
if (args.includes("--tests")) {
  rmSync(join(here, ".test-out"), { recursive: true, force: true });
  const tests = readdirSync(join(here, "test")).filter((f) => f.endsWith(".test.ts"));
  await esbuild.build({
    absWorkingDir: here,
    entryPoints: tests.map((f) => join("test", f)),
    bundle: true,
    platform: "node",
    format: "esm",
    outdir: ".test-out",
    outExtension: { ".js": ".mjs" },
    packages: "external",
    logLevel: "warning",
  });
} else if (args.includes("--check")) {
  const tmp = mkdtempSync(join(tmpdir(), "sidecar-web-"));
  try {
    await build(tmp);
    const want = files(tmp).sort();
    const have = files(dist).sort();
    const stale = want.filter((f) => !have.includes(f) || !readFileSync(join(tmp, f)).equals(readFileSync(join(dist, f))));
    const extra = have.filter((f) => !want.includes(f));
    if (stale.length || extra.length) {
      console.error(`web/dist is not what web/ui builds (run make web): ${[...stale, ...extra].join(", ")}`);
      process.exit(1);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
} else {
  rmSync(dist, { recursive: true, force: true });
  await build(dist);
}
