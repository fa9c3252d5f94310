package pty

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// readCast returns a recording's header and events.
func readCast(t *testing.T, path string) (map[string]any, [][]any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var hdr map[string]any
	var evs [][]any
	for sc.Scan() {
		if hdr == nil {
			if err := json.Unmarshal(sc.Bytes(), &hdr); err != nil {
				t.Fatalf("header %q: %v", sc.Text(), err)
			}
			continue
		}
		var ev []any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || len(ev) != 3 {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return hdr, evs
}

// TestRecordingShape: the header says version 2, the size, the start
// and TERM; events are [seconds, code, data] in order: output, a
// resize; keystrokes only with Input. The file is 0600.
func TestRecordingShape(t *testing.T) {
	for _, input := range []bool{false, true} {
		dir := t.TempDir()
		clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
		rs := NewRecordings(RecordConfig{Dir: filepath.Join(dir, "rec"), MaxBytes: 1 << 20, DirMaxBytes: 4 << 20, Input: input}, clk.now)
		r, err := rs.Start("ahp-terminal:/t 1", 80, 24, map[string]string{"TERM": "xterm-256color", "SHELL": "/bin/sh", "SECRET": "x"})
		if err != nil {
			t.Fatal(err)
		}
		clk.add(1500 * time.Millisecond)
		r.Output([]byte("héllo\r\n\x1b[1m<b>\x1b[0m"))
		r.Input([]byte("ls\r"))
		clk.add(time.Second)
		r.Resize(100, 30)
		r.Close()
		r.Output([]byte("after close")) // ignored
		fi, err := os.Stat(r.Path())
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || !strings.HasSuffix(r.Path(), "-t_1.cast") {
			t.Fatalf("file %s mode %v, want 0600 and -t_1.cast", r.Path(), fi.Mode().Perm())
		}
		hdr, evs := readCast(t, r.Path())
		if hdr["version"] != 2.0 || hdr["width"] != 80.0 || hdr["height"] != 24.0 || hdr["timestamp"] != 1_800_000_000.0 {
			t.Fatalf("header %v", hdr)
		}
		if env := hdr["env"].(map[string]any); len(env) != 2 || env["TERM"] != "xterm-256color" {
			t.Fatalf("header env %v: want TERM and SHELL only", env)
		}
		want := [][]any{{1.5, "o", "héllo\r\n\x1b[1m<b>\x1b[0m"}}
		if input {
			want = append(want, []any{1.5, "i", "ls\r"})
		}
		want = append(want, []any{2.5, "r", "100x30"})
		if len(evs) != len(want) {
			t.Fatalf("input %v: events %v, want %v", input, evs, want)
		}
		for i := range want {
			for j := range want[i] {
				if evs[i][j] != want[i][j] {
					t.Fatalf("input %v: event %d %v, want %v", input, i, evs[i], want[i])
				}
			}
		}
	}
}

// TestRecordingMaxBytes: a recording stops before record_max_bytes, its
// last event a marker saying so; the file never passes the bound.
func TestRecordingMaxBytes(t *testing.T) {
	const max = 4096
	rs := NewRecordings(RecordConfig{Dir: t.TempDir(), MaxBytes: max, DirMaxBytes: 10 * max}, nil)
	r, err := rs.Start("ahp-terminal:/big", 80, 24, nil)
	if err != nil {
		t.Fatal(err)
	}
	chunk := []byte(strings.Repeat("x", 100))
	for range 100 {
		r.Output(chunk)
	}
	r.Close()
	fi, _ := os.Stat(r.Path())
	if fi.Size() > max {
		t.Fatalf("recording of %d bytes, over its bound %d", fi.Size(), max)
	}
	_, evs := readCast(t, r.Path())
	last := evs[len(evs)-1]
	if last[1] != "m" || !strings.Contains(last[2].(string), "record_max_bytes") {
		t.Fatalf("last event %v, want the stop marker", last)
	}
	if n := len(evs) - 1; n < 30 || rs.Cut() != 1 {
		t.Fatalf("%d output events kept, %d cut: want about %d before the bound, 1 cut", n, rs.Cut(), max/120)
	}
}

// TestRecordingRotation: the directory stays under record_dir_max_bytes:
// the oldest finished recordings are removed for a new one, one still
// being written never; with no room left a recording is refused.
func TestRecordingRotation(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	const max = 1000
	rs := NewRecordings(RecordConfig{Dir: dir, MaxBytes: max, DirMaxBytes: 3 * max}, clk.now)
	var paths []string
	for i := range 5 {
		r, err := rs.Start("ahp-terminal:/t", 80, 24, nil)
		if err != nil {
			t.Fatalf("recording %d: %v", i, err)
		}
		for range 20 {
			r.Output([]byte(strings.Repeat("y", 40)))
		}
		r.Close()
		// Finished recordings age: mtime is what rotation orders by.
		mt := clk.now()
		_ = os.Chtimes(r.Path(), mt, mt)
		paths = append(paths, r.Path())
		clk.add(time.Second)
	}
	var total int64
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fi, _ := e.Info()
		total += fi.Size()
		left = append(left, filepath.Join(dir, e.Name()))
	}
	// Each start left room for one more of max beside the others: two
	// finished ones and the new one.
	if total > 3*max || len(left) != 3 || left[0] != paths[2] || left[2] != paths[4] {
		t.Fatalf("left %v (%d bytes), want the newest three of %v", left, total, paths)
	}
	if rs.Removed() != 2 {
		t.Fatalf("removed %d, want 2", rs.Removed())
	}
	// Recordings being written are never removed: with three open (the
	// finished ones removed for them) the fourth is refused.
	var open []*Recorder
	for range 3 {
		r, err := rs.Start("ahp-terminal:/open", 80, 24, nil)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, r)
		clk.add(time.Second)
	}
	if _, err := rs.Start("ahp-terminal:/more", 80, 24, nil); err == nil || !strings.Contains(err.Error(), "record_dir_max_bytes") {
		t.Fatalf("a fourth recording beside three open ones: %v, want refused", err)
	}
	for _, r := range open {
		if _, err := os.Stat(r.Path()); err != nil {
			t.Fatalf("open recording removed: %v", err)
		}
		r.Close()
	}
}
