package files

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/internal/pipehash"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TestReaderHashes: a read channel's endpoint hashes what it reads, the
// kept prefix included, and at the end of the file gives the sum of the
// whole file, with whether its size and mtime are those of the open.
func TestReaderHashes(t *testing.T) {
	data := make([]byte, 100_000)
	for i := range data {
		data[i] = byte(i * 31)
	}
	p := filepath.Join(t.TempDir(), "f")
	mustWrite(t, p, string(data), 0o644)
	for _, tt := range []struct {
		name      string
		prefix    int64
		touch     bool
		unchanged bool
	}{{"whole", 0, false, true}, {"after a prefix", 4321, false, true}, {"changed meanwhile", 0, true, false}} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, _ := f.Stat()
			h := sha256.New()
			if err := hashPrefix(f, tt.prefix, h); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Seek(tt.prefix, io.SeekStart); err != nil {
				t.Fatal(err)
			}
			var got string
			calls, same := 0, false
			r := &reader{f: f, h: pipehash.New(h), size: fi.Size(), mtime: fi.ModTime(), done: func() {},
				ended: func(sum string, unchanged bool) { got, same = sum, unchanged; calls++ }}
			buf := make([]byte, 7000)
			n, _ := io.ReadFull(r, buf)
			if tt.touch {
				later := fi.ModTime().Add(time.Second)
				if err := os.Chtimes(p, later, later); err != nil {
					t.Fatal(err)
				}
			}
			rest, err := io.ReadAll(r)
			if err != nil || int64(n+len(rest)) != fi.Size()-tt.prefix {
				t.Fatalf("read %d+%d bytes, %v", n, len(rest), err)
			}
			_, _ = r.Read(buf) // a read after the end: no second call
			r.Close()
			if calls != 1 || got != sum(data) || same != tt.unchanged {
				t.Errorf("ended %d times with %s, unchanged %v; want once with %s, %v", calls, got, same, sum(data), tt.unchanged)
			}
		})
	}
}

// TestStatSentSum: files/stat with a channel answers the sum that
// channel's read gave (the file not read again: here a sum it does not
// have, to show it), once, only to the client that read that path; then,
// and for anyone else, the file is hashed.
func TestStatSentSum(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	mustWrite(t, p, "hello", 0o644)
	k := newKind(t, nil)
	const uri, fake = "ahp-file:/s1", "0000000000000000000000000000000000000000000000000000000000000000"
	k.sent.put(uri, sentSum{clientID: alice.ClientID, path: p, sha256: fake})
	stat := func(c string, path string) string {
		t.Helper()
		res, e := call(k, caller(c), rpc.MethodFilesStat, fmt.Sprintf(`{"path":%s,"sha256":true,"channel":%q}`, jsonString(path), uri))
		if e != nil {
			t.Fatal(e)
		}
		return res.(rpc.FileInfo).SHA256
	}
	real := sum([]byte("hello"))
	if got := stat("c2", p); got != real {
		t.Errorf("another client's stat: %s", got)
	}
	mustWrite(t, filepath.Join(dir, "g"), "hello", 0o644)
	if got := stat(alice.ClientID, filepath.Join(dir, "g")); got != real {
		t.Errorf("a stat of another path: %s", got)
	}
	if got := stat(alice.ClientID, p); got != fake {
		t.Errorf("the reader's stat: %s, want the sum the read gave", got)
	}
	if got := stat(alice.ClientID, p); got != real || k.sent.len() != 0 {
		t.Errorf("a second stat: %s, %d sums held", got, k.sent.len())
	}
	k.sent.put(uri, sentSum{clientID: alice.ClientID, path: p, sha256: fake})
	k.ClientGone(alice.ClientID)
	if k.sent.len() != 0 {
		t.Error("a gone client's sums are kept")
	}
}

// TestSentSumsBound: at most MaxSentSums sums are held, the oldest
// dropped first, however many are put and taken.
func TestSentSumsBound(t *testing.T) {
	var s sentSums
	uri := func(i int) string { return fmt.Sprintf("ahp-file:/%d", i) }
	for i := range MaxSentSums + 10 {
		s.put(uri(i), sentSum{clientID: "c", path: "/f", sha256: fmt.Sprint(i)})
	}
	if s.len() != MaxSentSums {
		t.Fatalf("%d held, want %d", s.len(), MaxSentSums)
	}
	if _, ok := s.take(uri(9), "c", "/f"); ok {
		t.Error("the 10th oldest was kept")
	}
	if got, ok := s.take(uri(10), "c", "/f"); !ok || got != "10" {
		t.Errorf("the 11th: %q %v", got, ok)
	}
	// Put and taken many times over: the order kept stays bounded too.
	for i := range 10 * MaxSentSums {
		s.put(uri(-i-1), sentSum{clientID: "c", path: "/f"})
		s.take(uri(-i-1), "c", "/f")
	}
	if s.len() > MaxSentSums || len(s.order) > 2*MaxSentSums {
		t.Errorf("%d held, %d in order", s.len(), len(s.order))
	}
}

// caller is alice's caller with another client id when c differs.
func caller(c string) adapters.Caller {
	a := alice
	a.ClientID = c
	return a
}
