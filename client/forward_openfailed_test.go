package client

import (
	"strings"
	"sync"
	"testing"
)

// syncBuf is a Log safe for concurrent writes.
type syncBuf struct {
	mu    sync.Mutex
	lines []string
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, string(p))
	return len(p), nil
}

// TestOpenFailedRateLimited: a burst of 600 connections that fail to open
// alike prints one line, and Close the count of the 599 held back, not
// 600 lines; another failure is printed at once.
func TestOpenFailedRateLimited(t *testing.T) {
	var log syncBuf
	fw := NewForwarder(nil, ForwarderOptions{Log: &log})
	for range 600 {
		fw.logOpenFailed("%s -> %s: open failed: %s", "127.0.0.1:1", "127.0.0.1:2", "limit")
	}
	fw.logOpenFailed("%s -> %s: open failed: %s", "127.0.0.1:3", "127.0.0.1:2", "refused")
	fw.Close()
	want := []string{
		"127.0.0.1:1 -> 127.0.0.1:2: open failed: limit\n",
		"127.0.0.1:3 -> 127.0.0.1:2: open failed: refused\n",
		"599 more forwarded connection(s) failed to open (repeated lines held back: one a second at most)\n",
	}
	if strings.Join(log.lines, "") != strings.Join(want, "") {
		t.Fatalf("lines:\n%q\nwant:\n%q", log.lines, want)
	}
}
