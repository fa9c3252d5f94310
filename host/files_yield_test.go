package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TestFilesParkedYieldQuota: a file transfer kept for a reconnect (its
// client's link cut, as a cp killed with -9 leaves it) gives its quota
// place up when a new transfer of the same principal is refused by the
// quota (files.max_per_principal = 1): the new files/open succeeds once
// the host has parked the old one, instead of being refused for the
// whole grace (2 h). A forwarded TCP connection keeps its place: its far
// end cannot resume.
func TestFilesParkedYieldQuota(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.bin")
	if err := os.WriteFile(file, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, func(c *config.Config) {
		c.Files.Read, c.Files.Write = []string{dir}, []string{dir}
		c.Files.MaxPerPrincipal, c.Files.MaxTotal = 1, 4
	})
	hc := connect(t, srv)
	hc.initialize("c1")
	hc.mustCall(rpc.MethodFilesOpen, rpc.FilesOpenParams{Channel: "ahp-file:/f1", Path: file, Mode: "read"})
	hc.mustCall(rpc.MethodSubscribe, windowed("ahp-file:/f1", 64<<10, 16<<10))
	hc.until("tcp/data", func(m *msg) bool { return m.Method == rpc.MethodTCPData })
	hc.cut()

	// The host parks f1 once it has seen the cut; until then the quota
	// refuses (f1 is open). Bounded: without the yield, the refusal
	// would last the grace.
	hc2 := connect(t, srv)
	hc2.initialize("c2")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, _ := hc2.call(rpc.MethodFilesOpen, rpc.FilesOpenParams{Channel: "ahp-file:/f2", Path: file, Mode: "read"})
		if r.Error == nil {
			break
		}
		if r.Error.Code != rpc.CodePermissionDenied || !strings.Contains(r.Error.Message, "files.max_per_principal") {
			t.Fatalf("files/open: %d %s", r.Error.Code, r.Error.Message)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parked transfer still holds the only place after 10 s: %s", r.Error.Message)
		}
		time.Sleep(20 * time.Millisecond) // a bounded retry, as cp's quota wait does
	}
	// The place is f2's now: a third transfer is refused.
	e := hc2.callErr(rpc.MethodFilesOpen, rpc.FilesOpenParams{Channel: "ahp-file:/f3", Path: file, Mode: "read"}, rpc.CodePermissionDenied)
	if !strings.Contains(e.Message, "files.max_per_principal") {
		t.Errorf("a third transfer: %s", e.Message)
	}
}
