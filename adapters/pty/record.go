package pty

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Session recordings (docs/operations.md "Recordings"): each terminal's
// output in asciicast v2 (https://docs.asciinema.org/manual/asciicast/v2/),
// one file a terminal, which `asciinema play` and `asciinema cat` read.

// RecordConfig is the terminal block's recording settings.
type RecordConfig struct {
	// Dir is the directory of the recordings ("": none are made).
	Dir string
	// MaxBytes bounds one recording's file; DirMaxBytes the recordings
	// of Dir together (bytes).
	MaxBytes, DirMaxBytes int64
	// Input records keystrokes ("i" events) too.
	Input bool
}

// RecordingExt ends every recording's file name.
const RecordingExt = ".cast"

// stopNoteReserve is kept free under MaxBytes for the marker event that
// says a recording stopped at its bound.
const stopNoteReserve = 160

// Recordings makes a terminal's recordings in one directory and keeps it
// under its bound: before a recording starts, the oldest finished ones
// are removed until the new one's MaxBytes fits. Its methods are safe
// for concurrent use.
type Recordings struct {
	cfg RecordConfig
	now func() time.Time

	mu     sync.Mutex
	active map[string]bool // the paths being written

	removed atomic.Uint64 // recordings removed to keep the bound
	cut     atomic.Uint64 // recordings stopped at MaxBytes
}

// NewRecordings returns the recordings of cfg (nil when cfg.Dir is "").
func NewRecordings(cfg RecordConfig, now func() time.Time) *Recordings {
	if cfg.Dir == "" {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	return &Recordings{cfg: cfg, now: now, active: map[string]bool{}}
}

// Removed returns how many recordings were removed to keep the
// directory's bound; Cut how many stopped at their own.
func (rs *Recordings) Removed() uint64 { return rs.removed.Load() }

// Cut returns how many recordings stopped at MaxBytes.
func (rs *Recordings) Cut() uint64 { return rs.cut.Load() }

// Start begins the recording of terminal uri, cols by rows, whose
// environment names env (TERM and SHELL are kept in the header): a new
// file <UTC time>-<id>.cast in the directory, created 0600, its header
// written. An error: the directory cannot be written, or its bound
// leaves no room (every recording in it is still being written).
func (rs *Recordings) Start(uri string, cols, rows int, env map[string]string) (*Recorder, error) {
	if err := os.MkdirAll(rs.cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	start := rs.now()
	id := strings.TrimPrefix(uri, "ahp-terminal:/")
	name := start.UTC().Format("20060102T150405.000000Z") + "-" + safeName(id) + RecordingExt
	path := filepath.Join(rs.cfg.Dir, name)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err := rs.makeRoomLocked(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	hdrEnv := map[string]string{}
	for _, k := range []string{"TERM", "SHELL"} {
		if v, ok := env[k]; ok {
			hdrEnv[k] = v
		}
	}
	hdr, _ := json.Marshal(struct {
		Version   int               `json:"version"`
		Width     int               `json:"width"`
		Height    int               `json:"height"`
		Timestamp int64             `json:"timestamp"`
		Env       map[string]string `json:"env"`
		Title     string            `json:"title,omitempty"`
	}{2, cols, rows, start.Unix(), hdrEnv, id})
	hdr = append(hdr, '\n')
	if _, err := f.Write(hdr); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	rs.active[path] = true
	return &Recorder{rs: rs, f: f, path: path, start: start, written: int64(len(hdr)), max: rs.cfg.MaxBytes, input: rs.cfg.Input}, nil
}

// makeRoomLocked removes the oldest finished recordings of the
// directory until the others and one more of MaxBytes fit DirMaxBytes.
func (rs *Recordings) makeRoomLocked() error {
	entries, err := os.ReadDir(rs.cfg.Dir)
	if err != nil {
		return err
	}
	type rec struct {
		path string
		size int64
		mod  time.Time
	}
	var recs []rec
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), RecordingExt) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		p := filepath.Join(rs.cfg.Dir, e.Name())
		total += fi.Size()
		if rs.active[p] {
			total += max(rs.cfg.MaxBytes-fi.Size(), 0) // what it may still grow
			continue
		}
		recs = append(recs, rec{p, fi.Size(), fi.ModTime()})
	}
	slices.SortFunc(recs, func(a, b rec) int {
		if c := a.mod.Compare(b.mod); c != 0 {
			return c
		}
		return strings.Compare(a.path, b.path)
	})
	for total+rs.cfg.MaxBytes > rs.cfg.DirMaxBytes && len(recs) > 0 {
		if err := os.Remove(recs[0].path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		total -= recs[0].size
		recs = recs[1:]
		rs.removed.Add(1)
	}
	if total+rs.cfg.MaxBytes > rs.cfg.DirMaxBytes {
		return fmt.Errorf("%s: no room for another recording: the recordings being written take terminal.record_dir_max_bytes (%d bytes)", rs.cfg.Dir, rs.cfg.DirMaxBytes)
	}
	return nil
}

// safeName is id with every byte but letters, digits, '-', '_' and '.'
// replaced with '_' (at most 64 bytes): a file name part.
func safeName(id string) string {
	b := []byte(id)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

// Recorder is one terminal's recording: each event a line
// [seconds since start, code, data]. It stops at its MaxBytes, saying so
// in a last marker event ("m"). Its methods are safe for concurrent use;
// after Close they do nothing.
type Recorder struct {
	rs    *Recordings
	path  string
	start time.Time
	max   int64
	input bool

	mu      sync.Mutex
	f       *os.File
	written int64
	stopped bool
	buf     bytes.Buffer
}

// Path returns the recording's file.
func (r *Recorder) Path() string { return r.path }

// Output records text the terminal wrote ("o").
func (r *Recorder) Output(text []byte) { r.event("o", text) }

// Input records keystrokes ("i") when the configuration asks for them.
func (r *Recorder) Input(data []byte) {
	if r.input {
		r.event("i", data)
	}
}

// Resize records a new size ("r", "COLSxROWS").
func (r *Recorder) Resize(cols, rows int) {
	r.event("r", []byte(strconv.Itoa(cols)+"x"+strconv.Itoa(rows)))
}

func (r *Recorder) event(code string, data []byte) {
	if len(data) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil || r.stopped {
		return
	}
	elapsed := r.rs.now().Sub(r.start).Seconds()
	r.buf.Reset()
	appendEvent(&r.buf, elapsed, code, data)
	if r.written+int64(r.buf.Len())+stopNoteReserve > r.max {
		r.stopped = true
		r.rs.cut.Add(1)
		r.buf.Reset()
		appendEvent(&r.buf, elapsed, "m", []byte(fmt.Sprintf("sidecar: recording stopped at terminal.record_max_bytes (%d bytes)", r.max)))
	}
	n, err := r.f.Write(r.buf.Bytes())
	r.written += int64(n)
	if err != nil {
		r.stopped = true
	}
}

// appendEvent appends the event line [elapsed, code, data] (data as a
// JSON string: invalid UTF-8 becomes U+FFFD).
func appendEvent(buf *bytes.Buffer, elapsed float64, code string, data []byte) {
	buf.WriteByte('[')
	buf.WriteString(strconv.FormatFloat(elapsed, 'f', 6, 64))
	buf.WriteString(`,"`)
	buf.WriteString(code)
	buf.WriteString(`",`)
	s := string(data)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // ends with a newline
	buf.Truncate(buf.Len() - 1)
	buf.WriteString("]\n")
}

// Close ends the recording: the file is closed, and counts as finished
// for the directory's bound.
func (r *Recorder) Close() {
	r.mu.Lock()
	f := r.f
	r.f = nil
	r.mu.Unlock()
	if f == nil {
		return
	}
	_ = f.Close()
	r.rs.mu.Lock()
	delete(r.rs.active, r.path)
	r.rs.mu.Unlock()
}
