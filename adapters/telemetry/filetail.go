package telemetry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Bounds of the file tailer.
const (
	// maxTailedFiles bounds the files one files channel follows (open
	// descriptors): matches past it are left out (sorted by path) and
	// logged.
	maxTailedFiles = 64

	// initialTailBytes is how much of a file's end is read when a files
	// channel first starts (its backlog, like tail's last lines): the
	// lines that start in its last 64 KiB.
	initialTailBytes = 64 << 10

	// tailChunk is one read of a file.
	tailChunk = 32 << 10
)

// fileID is a file's identity: a file renamed keeps it, a new file at
// the same path has another.
type fileID struct{ dev, ino uint64 }

// tailed is one file a tailer follows.
type tailed struct {
	id       fileID
	path     string
	f        *os.File // nil between runs
	off      int64    // bytes read up to
	partial  []byte   // an unfinished line (at most MaxLineBytes)
	dropping bool     // the current line was cut: the rest up to \n is dropped
}

// fileTailer follows files by polling (stat every poll interval) rather
// than inotify (fsnotify): it works on every filesystem a log may live on
// (a pod's shared volume, NFS, overlay, FUSE, where inotify sees other
// writers' changes late or never), needs no watch per directory (the
// inotify limits are per user), and handles the three events the same
// way: new lines are bytes past the offset, a rotation is a new file
// identity at the path (the old file, by its open descriptor, is read to
// its end first), a truncation a size below the offset. The cost is up to
// one poll interval of latency and a stat per file per interval.
//
// Every line is handed once, in order, per file: lines across files are
// ordered by when a poll found them. A line rewritten by a truncation
// that grows the file past the old offset within one interval (copy and
// truncate rotation) is not seen; lines appended to a file renamed away
// after its rotation was noticed are not either.
type fileTailer struct {
	patterns  []string
	poll      time.Duration
	log       hclog.Logger
	truncated *atomic.Uint64

	files   map[fileID]*tailed // kept across runs, without descriptors
	started bool               // the first scan happened
	warned  bool               // maxTailedFiles exceeded was logged
	// refusedLinks are the links not followed, logged once each (at most
	// maxTailedFiles remembered).
	refusedLinks map[string]bool
}

// Run implements hostLogReader.
func (t *fileTailer) Run(ctx context.Context, emit func(LineRecord) bool, primed func()) error {
	if t.files == nil {
		t.files = map[fileID]*tailed{}
	}
	defer func() {
		for _, tf := range t.files {
			if tf.f != nil {
				tf.f.Close()
				tf.f = nil
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if !t.scan(ctx, emit) {
			return nil
		}
		if !t.started {
			t.started = true
			primed()
		}
		timer.Reset(t.poll)
	}
}

// scan finds the files the patterns match now, reads the ones gone (a
// rotation) to their end, then every other one; false when emit said
// ctx ended.
func (t *fileTailer) scan(ctx context.Context, emit func(LineRecord) bool) bool {
	var paths []string
	for _, p := range t.patterns {
		m, _ := filepath.Glob(p) // patterns are checked by config
		paths = append(paths, m...)
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	seen := map[fileID]bool{}
	var order []*tailed
	for _, p := range paths {
		real, ok := t.resolve(p)
		if !ok {
			continue
		}
		st, err := os.Lstat(real) // a link swapped in since is not regular
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		id := idOf(st)
		if seen[id] {
			continue // a second name of a file already followed
		}
		tf := t.files[id]
		if tf == nil {
			if len(t.files) >= maxTailedFiles {
				if !t.warned {
					t.log.Warn("too many log files match; the rest are not followed", "max", maxTailedFiles, "path", p)
					t.warned = true
				}
				continue
			}
			tf = &tailed{id: id, path: p}
			t.files[id] = tf
			if !t.started && st.Size() > initialTailBytes {
				// The backlog: from the first line that starts in the
				// file's last initialTailBytes.
				tf.off = st.Size() - initialTailBytes
				tf.dropping = true
			}
		}
		tf.path = p
		if tf.f == nil {
			// O_NOFOLLOW: a link swapped in since the check is not opened.
			f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				continue
			}
			if fst, err := f.Stat(); err != nil || idOf(fst) != id {
				f.Close()
				continue // replaced between the two: next poll
			}
			tf.f = f
			if tf.dropping && tf.off > 0 && len(tf.partial) == 0 {
				var b [1]byte
				if _, err := f.ReadAt(b[:], tf.off-1); err == nil && b[0] == '\n' {
					tf.dropping = false // the tail starts with a whole line
				}
			}
		}
		seen[id] = true
		order = append(order, tf)
	}
	// Files no pattern matches any more: rotated away or deleted. What
	// their descriptor still reads comes first, then they are let go.
	var gone []*tailed
	for id, tf := range t.files {
		if !seen[id] {
			gone = append(gone, tf)
		}
	}
	slices.SortFunc(gone, func(a, b *tailed) int { return bytes.Compare([]byte(a.path), []byte(b.path)) })
	for _, tf := range gone {
		if tf.f != nil {
			if !t.read(ctx, tf, emit) {
				return false
			}
			if len(tf.partial) > 0 && !t.line(tf, tf.partial, emit) {
				return false
			}
			tf.f.Close()
		}
		delete(t.files, tf.id)
	}
	for _, tf := range order {
		if !t.read(ctx, tf, emit) {
			return false
		}
	}
	return true
}

// resolve returns the path to read for p, a path the patterns match: p
// itself, or for a symbolic link its target (resolved to the end) when
// telemetry.log_files lists that too; false when p may not be followed.
// Whoever can write a log directory is often less privileged than the
// daemon: a link planted there (app.log -> /etc/shadow) must not make the
// daemon read what it points to. A refused link is logged once. The
// caller opens the result without following a link (O_NOFOLLOW).
func (t *fileTailer) resolve(p string) (string, bool) {
	lst, err := os.Lstat(p)
	if err != nil {
		return "", false
	}
	if lst.Mode()&os.ModeSymlink == 0 {
		return p, true
	}
	target, err := filepath.EvalSymlinks(p)
	if err == nil {
		for _, pat := range t.patterns {
			if ok, _ := filepath.Match(pat, target); ok || pat == target {
				return target, true
			}
		}
	}
	if t.refusedLinks == nil {
		t.refusedLinks = map[string]bool{}
	}
	if !t.refusedLinks[p] && len(t.refusedLinks) < maxTailedFiles {
		t.refusedLinks[p] = true
		t.log.Warn("log file not followed: a symbolic link to a path telemetry.log_files does not list", "path", p, "target", target)
	}
	return "", false
}

func idOf(st os.FileInfo) fileID {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(s.Dev), ino: s.Ino}
	}
	return fileID{}
}

// read hands the lines of tf past its offset to emit; a file shorter
// than the offset was truncated and is read from its start.
func (t *fileTailer) read(ctx context.Context, tf *tailed, emit func(LineRecord) bool) bool {
	if st, err := tf.f.Stat(); err == nil && st.Size() < tf.off {
		tf.off, tf.partial, tf.dropping = 0, nil, false
	}
	buf := make([]byte, tailChunk)
	for ctx.Err() == nil {
		n, err := tf.f.ReadAt(buf, tf.off)
		if n > 0 {
			tf.off += int64(n)
			if !t.feed(tf, buf[:n], emit) {
				return false
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.log.Warn("cannot read a log file", "path", tf.path, "error", err)
			}
			return true
		}
	}
	return false
}

// feed splits data into lines (partial holds an unfinished one), each
// cut at MaxLineBytes.
func (t *fileTailer) feed(tf *tailed, data []byte, emit func(LineRecord) bool) bool {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !tf.dropping {
				tf.partial = append(tf.partial, data...)
				if len(tf.partial) > MaxLineBytes {
					if !t.line(tf, tf.partial, emit) {
						return false
					}
					tf.dropping = true
				}
			}
			return true
		}
		chunk := data[:i]
		data = data[i+1:]
		if tf.dropping {
			tf.dropping = false
			continue
		}
		line := chunk
		if len(tf.partial) > 0 {
			line = append(tf.partial, chunk...)
		}
		if !t.line(tf, line, emit) {
			return false
		}
	}
	return true
}

// line emits one line (a trailing \r dropped) and empties partial.
func (t *fileTailer) line(tf *tailed, b []byte, emit func(LineRecord) bool) bool {
	tf.partial = tf.partial[:0]
	b = bytes.TrimSuffix(b, []byte("\r"))
	body, cut := cutLine(b)
	attrs := []kv{attrStr("log.file.path", tf.path), attrStr("log.file.name", filepath.Base(tf.path))}
	if cut {
		t.truncated.Add(1)
		attrs = append(attrs, attrBool("sidecar.log.truncated", true))
	}
	return emit(LineRecord{Observed: time.Now(), Body: body, Attrs: attrs})
}
