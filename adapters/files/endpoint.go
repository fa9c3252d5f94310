package files

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/internal/pipehash"
	"github.com/sidecar-dev/sidecar/rpc"
)

// PartialSuffix ends the name of a partial file: ".<name>.sidecar-part"
// beside its target.
const PartialSuffix = ".sidecar-part"

// PartialName is the partial file of a target's base name.
func PartialName(base string) string { return "." + base + PartialSuffix }

// IsPartialName reports whether base is the partial file name of some
// target (".X.sidecar-part"). Such a name is never written as a target
// (files/open write, files/put): targets and partial files then never
// share a name, so no transfer writes over another's partial file.
func IsPartialName(base string) bool {
	return len(base) > len(PartialSuffix)+1 && strings.HasPrefix(base, ".") && strings.HasSuffix(base, PartialSuffix)
}

// reader is the Endpoint of a file being read: the channel's stream is
// the file from its offset on; the client sends nothing (a byte it sends
// resets the channel). The bytes are hashed as they are read (h holds
// the prefix the client kept); at the end of the file the sum is given
// to ended, with whether the file's size and modification time are
// still those of the open. The hash runs on its own goroutine
// (pipehash), beside the reads.
type reader struct {
	f     *os.File
	h     *pipehash.Hash
	size  int64
	mtime time.Time
	ended func(sum string, unchanged bool)
	done  func()
	once  sync.Once
	// read counts the bytes read; eof is set at the file's end (the
	// reader's goroutine; Close reads them after it ended).
	read int64
	eof  bool
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	r.read += int64(n)
	if err == io.EOF {
		r.eof = true
	}
	r.h.Write(p[:n])
	if err == io.EOF && r.ended != nil {
		fi, serr := r.f.Stat()
		r.ended(hex.EncodeToString(r.h.Sum()), serr == nil && fi.Size() == r.size && fi.ModTime().Equal(r.mtime))
		r.ended = nil
	}
	return n, err
}

func (r *reader) Write([]byte) (int, error) {
	return 0, errors.New("a file channel opened for reading takes no data")
}

func (r *reader) CloseWrite() error   { return nil }
func (r *reader) SetLinger(int) error { return nil }
func (r *reader) Close() error {
	r.once.Do(func() {
		r.h.Close()
		_ = r.f.Close()
		r.done()
	})
	return nil
}

// writer is the Endpoint of a file being written: the client's bytes go
// to the partial file; after its end of stream the size and SHA-256 are
// checked and the partial file renamed onto the target. The stream toward
// the client then ends: empty on success, else the reason as UTF-8 text
// (then tcp/eof). The SHA-256 is stated at the open, or by files/commit
// (state) before or after the end of stream: the check runs once it has
// both. The hash runs on its own goroutine (pipehash), beside the writes.
type writer struct {
	dir    *os.Root // the target's directory
	base   string   // the target's name in dir
	f      *os.File // the partial file
	h      *pipehash.Hash
	size   int64 // stated
	mode   os.FileMode
	mtime  time.Time
	offset int64 // bytes of the file written (partial included)
	done   func()
	// ended, if set, is told at Close whether the file was committed,
	// the bytes written by this transfer, and why it failed ("" if not).
	ended func(committed bool, from, to int64, why string)
	from  int64 // the offset the transfer started at
	// ch is the writer's channel once attached (set under Kind.mu);
	// closed is closed once done ran.
	ch      *tcp.Channel
	closed  chan struct{}
	closing atomic.Bool // Close began

	result    chan struct{} // closed once outcome is set
	outcome   []byte        // what Read returns: the reason of a failure, or nothing
	closeOnce sync.Once
	rmu       sync.Mutex
	committed bool
	sum       string // stated (under rmu)
	eof       bool   // the client's end of stream came (under rmu)
	failed    bool   // the partial file could not be written (Write, fail)
	// cmu is held while the file is checked and renamed (finish), so that
	// Close does not close it under the check.
	cmu      sync.Mutex
	finished bool // under cmu
}

func (w *writer) Write(p []byte) (int, error) {
	if w.offset+int64(len(p)) > w.size {
		return 0, fmt.Errorf("more than the %d bytes stated for %s", w.size, w.base)
	}
	if w.failed {
		return len(p), nil // the outcome is told; the rest is dropped
	}
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.offset += int64(n)
	if err != nil {
		w.fail(err)
		return len(p), nil
	}
	return n, nil
}

// fail ends a transfer whose partial file cannot be written (a full
// disk): the reason goes to the client at once as the outcome (not a
// reset, which a client takes for a lost connection and tries again),
// the partial file is discarded so that it does not keep the disk full,
// and the client's remaining bytes are dropped.
func (w *writer) fail(err error) {
	w.failed = true
	why := err
	var pe *os.PathError
	if errors.As(err, &pe) {
		why = pe.Err
	}
	msg := fmt.Sprintf("%s: writing the partial file: %v", w.base, why)
	switch {
	case errors.Is(err, syscall.ENOSPC):
		msg += " (ENOSPC)"
	case errors.Is(err, syscall.EDQUOT):
		msg += " (EDQUOT)"
	}
	_ = w.f.Truncate(0)
	w.offset = 0
	w.rmu.Lock()
	w.outcome = []byte(msg + "; the partial file is discarded")
	w.rmu.Unlock()
	w.closeOnce.Do(func() { close(w.result) })
}

// CloseWrite is the client's end of stream, after every byte: verify and
// rename into place.
func (w *writer) CloseWrite() error {
	w.rmu.Lock()
	w.eof = true
	ready := w.sum != ""
	w.rmu.Unlock()
	if ready {
		w.finish()
	}
	return nil
}

// state is files/commit: the SHA-256 of the whole file, stated once
// (again the same is no error); with the end of stream already in, the
// file is checked and renamed now.
func (w *writer) state(sum string) *rpc.Error {
	w.rmu.Lock()
	if w.sum != "" {
		old := w.sum
		w.rmu.Unlock()
		if old != sum {
			return rpc.Errorf(rpc.CodeInvalidParams, "%s: SHA-256 %s differs from the %s already stated: refused", w.base, sum, old)
		}
		return nil
	}
	w.sum = sum
	ready := w.eof
	w.rmu.Unlock()
	if ready {
		w.finish()
	}
	return nil
}

// finish checks and renames the partial file once both the end of stream
// and the sum are in (called once: by the second of them), and tells the
// outcome.
func (w *writer) finish() {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	if w.finished || w.failed {
		return // closed meanwhile, or the outcome is already told
	}
	w.finished = true
	err := w.commit()
	w.rmu.Lock()
	if err != nil {
		w.outcome = []byte(err.Error())
	} else {
		w.committed = true
	}
	w.rmu.Unlock()
	w.closeOnce.Do(func() { close(w.result) })
}

func (w *writer) commit() error {
	if w.offset != w.size {
		return fmt.Errorf("%s: %d bytes received, %d stated; the partial file is kept", w.base, w.offset, w.size)
	}
	w.rmu.Lock()
	sum := w.sum
	w.rmu.Unlock()
	if got := hex.EncodeToString(w.h.Sum()); got != sum {
		_ = w.f.Truncate(0)
		return fmt.Errorf("%s: SHA-256 %s of the bytes received differs from the %s stated; the partial file is discarded", w.base, got, sum)
	}
	if err := w.f.Chmod(w.mode); err != nil {
		return fmt.Errorf("%s: %v", w.base, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("%s: %v", w.base, err)
	}
	part := PartialName(w.base)
	if err := w.dir.Chtimes(part, w.mtime, w.mtime); err != nil {
		return fmt.Errorf("%s: %v", w.base, err)
	}
	if err := w.dir.Rename(part, w.base); err != nil {
		return fmt.Errorf("%s: %v", w.base, err)
	}
	return nil
}

// Read waits for the outcome: the reason of a failure, then io.EOF.
func (w *writer) Read(p []byte) (int, error) {
	<-w.result
	w.rmu.Lock()
	defer w.rmu.Unlock()
	if len(w.outcome) == 0 {
		return 0, io.EOF
	}
	n := copy(p, w.outcome)
	w.outcome = w.outcome[n:]
	return n, nil
}

func (w *writer) SetLinger(int) error { return nil }

// Close ends the transfer: a file not committed stays partial, for a
// later resume.
func (w *writer) Close() error {
	w.closing.Store(true)
	w.cmu.Lock()
	w.finished = true
	w.cmu.Unlock()
	w.h.Close()
	w.rmu.Lock()
	if !w.committed && len(w.outcome) == 0 {
		w.outcome = nil
	}
	committed := w.committed
	why := string(w.outcome)
	w.rmu.Unlock()
	w.closeOnce.Do(func() { close(w.result) })
	if w.ended != nil {
		w.ended(committed, w.from, w.offset, why)
	}
	_ = w.f.Close()
	if !committed && w.offset == 0 {
		// An empty partial file continues nothing: it is not left
		// behind (a transfer refused by the quota, or cut at once).
		_ = w.dir.Remove(PartialName(w.base))
	}
	_ = w.dir.Close()
	w.done()
	return nil
}

// hashPrefix feeds h the first n bytes of f, from its start.
func hashPrefix(f *os.File, n int64, h hash.Hash) error {
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, n)); err != nil {
		return err
	}
	return nil
}

func newHash() hash.Hash { return sha256.New() }
