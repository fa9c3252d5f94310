package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestCopyEachBound: a tree's files are copied at most Parallel at once
// (DefaultParallel, 4, when 0), and that many do run at once; every item
// is copied once.
func TestCopyEachBound(t *testing.T) {
	for _, tt := range []struct{ parallel, items, want int }{
		{0, 10, DefaultParallel}, {-1, 10, DefaultParallel}, {1, 5, 1}, {2, 9, 2}, {10, 3, 3},
	} {
		t.Run(fmt.Sprintf("%d of %d", tt.parallel, tt.items), func(t *testing.T) {
			var mu sync.Mutex
			active, most := 0, 0
			seen := map[int]int{}
			full := make(chan struct{}) // closed once want run at once
			release := make(chan struct{})
			items := make([]int, tt.items)
			for i := range items {
				items[i] = i
			}
			go func() {
				select {
				case <-full:
				case <-time.After(10 * time.Second):
				}
				close(release)
			}()
			copyEach(tt.parallel, items, func(i int) {
				mu.Lock()
				active++
				seen[i]++
				most = max(most, active)
				if active == tt.want && most == tt.want && seen[i] == 1 && len(seen) == tt.want {
					close(full)
				}
				mu.Unlock()
				<-release
				mu.Lock()
				active--
				mu.Unlock()
			})
			if most != tt.want || len(seen) != tt.items {
				t.Errorf("at most %d at once, %d items copied; want %d and %d", most, len(seen), tt.want, tt.items)
			}
			for i, n := range seen {
				if n != 1 {
					t.Errorf("item %d copied %d times", i, n)
				}
			}
		})
	}
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestDownloadResume: a partial file whose prefix is the source's is
// continued (only the rest is received); one whose prefix differs is
// started again; both results are exact, with the source's mode and
// mtime, and no partial file is left.
func TestDownloadResume(t *testing.T) {
	c := testHostConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.bin")
	data := randomBytes(1<<20+123, 1)
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(1_700_000_000, 5)
	if err := os.Chtimes(src, mt, mt); err != nil {
		t.Fatal(err)
	}
	const kept = 300 << 10
	for _, tt := range []struct {
		name    string
		partial []byte
		want    int64 // bytes received
	}{
		{"prefix matches", data[:kept], int64(len(data) - kept)},
		{"prefix differs", append(bytes.Clone(data[:kept-1]), data[kept-1]^1), int64(len(data))},
		{"partial longer than the source", append(bytes.Clone(data), 'x'), int64(len(data))},
		{"no partial", nil, int64(len(data))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "dst.bin")
			part := filepath.Join(filepath.Dir(dst), partialName("dst.bin"))
			if tt.partial != nil {
				if err := os.WriteFile(part, tt.partial, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var progress int64
			var mu sync.Mutex
			res, err := Download(ctx, c, src, dst, CopyOptions{Progress: func(n int64) { mu.Lock(); progress += n; mu.Unlock() }})
			if err != nil || len(res.Failed) > 0 {
				t.Fatalf("Download: %v %v", err, res.Failed)
			}
			if res.Bytes != tt.want || res.Files != 1 || progress != int64(len(data)) {
				t.Errorf("received %d bytes (progress %d), %d files; want %d of %d", res.Bytes, progress, res.Files, tt.want, len(data))
			}
			got, err := os.ReadFile(dst)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("result: %d bytes, exact %v, %v", len(got), bytes.Equal(got, data), err)
			}
			if st, _ := os.Stat(dst); st.Mode() != 0o640 || !st.ModTime().Equal(mt) {
				t.Errorf("mode %v mtime %v", st.Mode(), st.ModTime())
			}
			if _, err := os.Stat(part); !os.IsNotExist(err) {
				t.Errorf("partial file left: %v", err)
			}
		})
	}
}

// TestUploadResume: the host's partial file is continued when its prefix
// is the local file's (only the rest is sent), started again when it
// differs; both results are exact.
func TestUploadResume(t *testing.T) {
	c := testHostConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := filepath.Join(t.TempDir(), "src.bin")
	data := randomBytes(1<<20+77, 2)
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	const kept = 200 << 10
	for _, tt := range []struct {
		name    string
		partial []byte
		want    int64 // bytes sent
	}{
		{"prefix matches", data[:kept], int64(len(data) - kept)},
		{"whole file kept", data, 0},
		{"prefix differs", append(bytes.Clone(data[:kept-1]), data[kept-1]^1), int64(len(data))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			dst := filepath.Join(dir, "dst.bin")
			part := filepath.Join(dir, partialName("dst.bin"))
			if err := os.WriteFile(part, tt.partial, 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := Upload(ctx, c, src, dst, CopyOptions{})
			if err != nil || len(res.Failed) > 0 {
				t.Fatalf("Upload: %v %v", err, res.Failed)
			}
			if res.Bytes != tt.want || res.Files != 1 {
				t.Errorf("sent %d bytes, %d files; want %d", res.Bytes, res.Files, tt.want)
			}
			got, err := os.ReadFile(dst)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("result: %d bytes, exact %v, %v", len(got), bytes.Equal(got, data), err)
			}
			if _, err := os.Stat(part); !os.IsNotExist(err) {
				t.Errorf("partial file left: %v", err)
			}
		})
	}
}

// TestCopyRetryableDiskFull: a full disk, disk quota or read-only file
// system is not tried again (each try would fail the same), a lost
// stream is.
func TestCopyRetryableDiskFull(t *testing.T) {
	for _, err := range []error{
		&fs.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC},
		&fs.PathError{Op: "write", Path: "x", Err: syscall.EDQUOT},
		&fs.PathError{Op: "open", Path: "x", Err: syscall.EROFS},
	} {
		if copyRetryable(err) {
			t.Errorf("copyRetryable(%v) = true", err)
		}
	}
	if !copyRetryable(io.ErrUnexpectedEOF) {
		t.Error("copyRetryable(io.ErrUnexpectedEOF) = false")
	}
}

// TestCopyUnchanged: a file the destination already holds (size, mtime
// and SHA-256) is not sent again, either way; one that differs only in
// its bytes (same size and mtime) is, and so is any with Force.
func TestCopyUnchanged(t *testing.T) {
	c := testHostConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src.bin")
	data := randomBytes(1<<20+5, 3)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mt := time.Unix(1_700_000_000, 123456789)
	if err := os.Chtimes(src, mt, mt); err != nil {
		t.Fatal(err)
	}
	// corrupt flips one byte of p, its size and mtime kept.
	corrupt := func(p string) {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 1
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	full := int64(len(data))
	for _, tt := range []struct {
		name string
		copy func(dst string, opts CopyOptions) (CopyResult, error)
	}{
		{"upload", func(dst string, opts CopyOptions) (CopyResult, error) { return Upload(ctx, c, src, dst, opts) }},
		{"download", func(dst string, opts CopyOptions) (CopyResult, error) { return Download(ctx, c, src, dst, opts) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "dst.bin")
			for i, step := range []struct {
				before           func()
				force            bool
				bytes            int64
				files, unchanged int
			}{
				{nil, false, full, 1, 0},
				{nil, false, 0, 0, 1},
				{func() { corrupt(dst) }, false, full, 1, 0},
				{nil, true, full, 1, 0},
			} {
				if step.before != nil {
					step.before()
				}
				var progress atomic.Int64
				res, err := tt.copy(dst, CopyOptions{Force: step.force, Progress: func(n int64) { progress.Add(n) }})
				if err != nil || len(res.Failed) > 0 {
					t.Fatalf("step %d: %v %v", i, err, res.Failed)
				}
				if res.Bytes != step.bytes || res.Files != step.files || res.Unchanged != step.unchanged || res.Entries != 1 || progress.Load() != full {
					t.Errorf("step %d: sent %d bytes, %d files, %d unchanged, %d entries, progress %d; want %d, %d, %d, 1, %d",
						i, res.Bytes, res.Files, res.Unchanged, res.Entries, progress.Load(), step.bytes, step.files, step.unchanged, full)
				}
				if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("step %d: result exact %v, %v", i, bytes.Equal(got, data), err)
				}
			}
		})
	}
}

// TestUploadStopsAtHostOutcome: a host that cannot write the partial file
// (here past RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC) tells the
// reason at once, and the upload stops there instead of sending the rest
// of the file first: far fewer bytes sent than the file holds, the
// reason named, no retry.
func TestUploadStopsAtHostOutcome(t *testing.T) {
	c := testHostConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := filepath.Join(t.TempDir(), "src.bin")
	const size = 16 << 20
	if err := os.WriteFile(src, randomBytes(size, 4), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "dst.bin")
	// The whole process's limit (Go ignores SIGXFSZ: writes past it fail
	// with EFBIG), restored at once after.
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = 1 << 20
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	res, err := Upload(ctx, c, src, dst, CopyOptions{})
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err != nil || len(res.Failed) != 1 || res.Files != 0 {
		t.Fatalf("Upload: %v, %+v", err, res)
	}
	if msg := res.Failed[0].Err.Error(); msg != "dst.bin: writing the partial file: file too large; the partial file is discarded" {
		t.Errorf("reason %q", msg)
	}
	if res.Bytes >= size/2 {
		t.Errorf("sent %d of %d bytes after the host's outcome: did not stop", res.Bytes, size)
	}
	t.Logf("sent %d of %d bytes", res.Bytes, size)
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("target exists: %v", err)
	}
}
