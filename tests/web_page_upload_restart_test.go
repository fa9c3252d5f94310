package tests

// A page upload through a restart of the daemon, in headless Chromium
// against the real binary behind a fault relay.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/adapters/files"
	"github.com/sidecar-dev/sidecar/tests/fault"
)

// TestWebPageUploadHostRestarted: a 48 MiB file dropped on a terminal is
// under way when the daemon is stopped (SIGTERM, once 16 MiB have gone
// up) and started again (a twin: the same config, state and token)
// behind the page's relay. The page's resume is refused by the new
// daemon, so it starts a new session with a new client; the upload's
// next try opens the transfer on that client, continues the partial
// file the stopped daemon left (it hashed exactly that part instead of
// sending it), and the file lands with the source's SHA-256, no partial
// file beside it, the page saying it is uploaded.
func TestWebPageUploadHostRestarted(t *testing.T) {
	chromiumPath(t)
	s, relay, b := relayedPage(t, "")
	dir := t.TempDir()
	b.cdWithOSC7(dir)

	const name, size = "restart.bin", 48 << 20
	const stopAfter = 16 << 20 // bytes up through the relay
	src, sum := randomFile(t, t.TempDir(), name, size)
	target, partial := filepath.Join(dir, name), filepath.Join(dir, files.PartialName(name))
	up0 := relay.Bytes(fault.Up)
	b.dropFile(src)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := relay.Await(ctx, func() bool { return relay.Bytes(fault.Up)-up0 >= stopAfter }); err != nil {
		t.Fatalf("%d MiB up within %v: %d bytes went", stopAfter>>20, waitTimeout, relay.Bytes(fault.Up)-up0)
	}
	// No more of the file reaches the daemon from here (its shutdown
	// keeps serving for a moment, time enough for the rest on a quiet
	// machine): the relay holds everything until the twin is up.
	relay.Stall(true)
	stopped := time.Now()
	s.p.kill(t)
	// Mid-transfer: the stopped daemon left a partial file, no target.
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after the stop the target exists (%v): the stop was not mid-transfer", err)
	}
	fi, err := os.Stat(partial)
	if err != nil || fi.Size() <= 0 || fi.Size() >= size {
		t.Fatalf("the stopped daemon's partial file: %v (%v), want part of the %d bytes", fi, err, size)
	}
	kept := fi.Size()
	twin := startTwin(t, s)
	relay.SetTarget(twin.host)
	relay.Stall(false)
	// Between sessions the upload waits for the next one, spending none
	// of its tries.
	initialized := func(text string) bool { return strings.Contains(text, `"@message":"client initialized"`) }
	if _, ok := twin.p.stderr.waitMatch(waitTimeout, initialized); !ok {
		t.Fatalf("the page started no session on the restarted daemon within %v", waitTimeout)
	}
	t.Logf("the page had a new session %v after the stop", time.Since(stopped).Round(time.Millisecond))

	b.poll("upload ended", `sidecarPage.uploads().some((u) => u.phase === "done" || u.phase === "failed")`, 2*waitTimeout)
	var phase []string
	if err := b.eval(`sidecarPage.uploads().map((u) => u.phase + ": " + u.error)`, &phase); err != nil || len(phase) != 1 || phase[0] != "done: " {
		t.Fatalf("upload %q (%v), want done (a failure here: its tries stayed on the stopped daemon's client?)", phase, err)
	}
	b.poll("said so", fmt.Sprintf(`(() => { const li = document.querySelector("#uploads li[data-phase=done]"); return li !== null && li.querySelector(".what").textContent === %q && li.querySelector("progress").value === 1; })()`, "uploaded to "+dir), waitTimeout)
	var ups []struct {
		Target, Phase, Error string
		Size, Sent, Hashed   int64
	}
	if err := b.eval(`sidecarPage.uploads()`, &ups); err != nil || len(ups) != 1 {
		t.Fatalf("uploads %+v (%v), want one", ups, err)
	}
	u := ups[0]
	t.Logf("upload %+v; the stopped daemon kept %d bytes; %d MiB went up through the relay", u, kept, (relay.Bytes(fault.Up)-up0)>>20)
	if u.Target != target || u.Size != size || u.Sent != size {
		t.Errorf("upload %+v, want %d of %d bytes sent to %s", u, size, size, target)
	}
	// The try on the new session continued the part the stopped daemon
	// kept: it hashed exactly that part instead of sending it.
	if u.Hashed != kept {
		t.Errorf("the last try hashed %d bytes, want the %d the stopped daemon kept", u.Hashed, kept)
	}
	if got := fileSum(t, target); got != sum {
		t.Fatalf("uploaded file SHA-256 %s, want %s", got, sum)
	}
	if _, err := os.Stat(partial); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("partial file left beside the target: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("in the target's directory: %v, want only %s", ents, name)
	}
	// The upload went on a new session (the twin's only initialize).
	if got := strings.Count(twin.p.stderr.String(), `"@message":"client initialized"`); got != 1 {
		t.Errorf("the restarted daemon saw %d initializes, want 1 (the page's new session)", got)
	}
}
