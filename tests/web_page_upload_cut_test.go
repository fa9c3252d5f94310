package tests

// A page upload through cuts of the page's link, in headless Chromium
// against the real binary behind a fault relay.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/adapters/files"
	"github.com/sidecar-dev/sidecar/tests/fault"
)

// TestWebPageUploadCut: a 48 MiB file dropped on a terminal is cut off
// twice mid-transfer (the relay resets the page's link once 16 MiB, then
// 16 MiB more, have gone up: the page's base64, compressed by the
// WebSocket, is about as large as the file): the page reconnects and
// opens the transfer again by itself, continuing the part the host kept
// (its last try hashed that part instead of sending it), and the file
// lands with the source's SHA-256 (in Go and `sha256sum` in the
// terminal), no partial file left beside it, the page saying it is
// uploaded. Each cut is a link lost and resumed, not a new session.
func TestWebPageUploadCut(t *testing.T) {
	chromiumPath(t)
	s, relay, b := relayedPage(t, "")
	dir := t.TempDir()
	b.cdWithOSC7(dir)

	const name, size = "cut.bin", 48 << 20
	const cutAfter = 16 << 20 // bytes up, counted from the arm
	src, sum := randomFile(t, t.TempDir(), name, size)
	await := func(what string, cond func() bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := relay.Await(ctx, cond); err != nil {
			t.Fatalf("%s: not within %v (%d bytes up, %d connections accepted)", what, waitTimeout, relay.Bytes(fault.Up), relay.Accepted())
		}
	}
	up0 := relay.Bytes(fault.Up)
	relay.CutAfter(cutAfter, fault.Up)
	b.dropFile(src)
	for i := 1; i <= 2; i++ {
		await(fmt.Sprintf("cut %d", i), func() bool { return !relay.Armed(fault.Up) })
		if i == 1 {
			relay.CutAfter(cutAfter, fault.Up) // counted on the links after this cut
		}
		// Mid-transfer: the host has part of it, the target is not there yet.
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after cut %d the target exists (%v): the cut was not mid-transfer", i, err)
		}
	}
	b.poll("upload done", `sidecarPage.uploads().some((u) => u.phase === "done")`, 2*waitTimeout)
	b.poll("said so", fmt.Sprintf(`(() => { const li = document.querySelector("#uploads li[data-phase=done]"); return li !== null && li.querySelector(".what").textContent === %q && li.querySelector("progress").value === 1; })()`, "uploaded to "+dir), waitTimeout)
	var ups []struct {
		Target, Phase, Error string
		Size, Sent, Hashed   int
	}
	if err := b.eval(`sidecarPage.uploads()`, &ups); err != nil || len(ups) != 1 {
		t.Fatalf("uploads %+v (%v), want one", ups, err)
	}
	u := ups[0]
	t.Logf("upload %+v; %d MiB went up through the relay", u, (relay.Bytes(fault.Up)-up0)>>20)
	if u.Target != filepath.Join(dir, name) || u.Size != size || u.Sent != size {
		t.Errorf("upload %+v, want %d of %d bytes sent to %s", u, size, size, filepath.Join(dir, name))
	}
	// The last try continued the host's part: it hashed that part
	// instead of sending it.
	if u.Hashed <= 0 || u.Hashed >= size {
		t.Errorf("the last try hashed %d bytes: it did not continue the part the host kept", u.Hashed)
	}
	if got := fileSum(t, filepath.Join(dir, name)); got != sum {
		t.Fatalf("uploaded file SHA-256 %s, want %s", got, sum)
	}
	if _, err := os.Stat(filepath.Join(dir, files.PartialName(name))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("partial file left beside the target: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("in the target's directory: %v, want only %s", ents, name)
	}
	// Each cut was a lost link the page resumed, not a new session.
	if got := strings.Count(s.p.stderr.String(), `"@message":"client initialized"`); got != 1 {
		t.Errorf("the host saw %d initializes, want 1 (the page should resume its session after each cut)", got)
	}
	b.typeText("sha256sum " + name + "\r")
	b.poll("sha256sum in the terminal", screenHas(`^`+sum+`  `+name+`$`), waitTimeout)
}
