package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPreviewThroughput measures one 1 GiB download (or
// $SIDECAR_PREVIEW_BIG_MIB) from the loopback app directly, through the
// preview, and through sidecar forward -L: MiB/s and the daemon's peak
// RSS during each. A measurement, not a check: it runs only with
// SIDECAR_PREVIEW_BENCH=1, on an otherwise idle machine (docs/operations.md
// §7 has the figures).
func TestPreviewThroughput(t *testing.T) {
	if os.Getenv("SIDECAR_PREVIEW_BENCH") != "1" {
		t.Skip("a measurement: SIDECAR_PREVIEW_BENCH=1 runs it")
	}
	n := int64(1 << 30)
	if v, err := strconv.Atoi(os.Getenv("SIDECAR_PREVIEW_BIG_MIB")); err == nil && v > 0 {
		n = int64(v) << 20
	}
	app := startPreviewApp(t)
	s := startServer(t, "")
	fw := tcpStartForward(t, s, fmt.Sprintf("-L 0:127.0.0.1:%d", app.port))
	want := bigSHA256(n)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	plain := &http.Client{Transport: tr}
	path := "/big?n=" + strconv.FormatInt(n, 10)
	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
		hdr  http.Header
	}{
		{"direct", plain, fmt.Sprintf("http://127.0.0.1:%d%s", app.port, path), nil},
		{"preview", s.previewClient(t), s.previewURL(app.port, path), http.Header{"Authorization": {"Bearer " + s.token}}},
		{"forward -L", plain, "http://" + fw.addrs[0] + path, nil},
	} {
		peak := rssWatch(t, s.p.cmd.Process.Pid)
		start := time.Now()
		resp := do(t, tc.c, "GET", tc.url, nil, tc.hdr)
		h := sha256.New()
		got, err := io.Copy(h, resp.Body)
		took := time.Since(start)
		rss := peak()
		if err != nil || got != n || hex.EncodeToString(h.Sum(nil)) != want {
			t.Fatalf("%s: %d of %d bytes, %v, SHA-256 mismatch?", tc.name, got, n, err)
		}
		t.Logf("%-10s %5d MiB in %6.2fs: %7.1f MiB/s, daemon peak RSS %5.1f MiB", tc.name, n>>20, took.Seconds(), float64(n>>20)/took.Seconds(), float64(rss)/(1<<20))
	}
}

// rssWatch samples pid's resident set every 20 ms until the returned
// function is called, which returns the peak (bytes).
func rssWatch(t *testing.T, pid int) func() int64 {
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
				for line := range strings.SplitSeq(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
						if kb*1024 > peak.Load() {
							peak.Store(kb * 1024)
						}
					}
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		wg.Wait()
		return peak.Load()
	}
}
