package client

import (
	"cmp"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// The transport memory of --transport auto: per origin (scheme, host,
// port and base path), which transport connected last, so that the next
// connect tries it first (dial_transportio.go). It is a cache: a file
// that is missing, unreadable, corrupt or too big reads as empty, and is
// replaced on the next write.
const (
	// memoryMaxOrigins bounds the origins kept; the least recently
	// written go first. Each takes under 200 bytes.
	memoryMaxOrigins = 64
	// memoryMaxFileBytes bounds what is read of the file: a bigger one is
	// no file we wrote (64 origins take about 12 KiB) and reads as empty.
	memoryMaxFileBytes = 64 << 10
	// rememberWebSocketFor is how long a remembered WebSocket outcome is
	// trusted. After it the race runs again (paying the WebTransport
	// grace once), so that a network that lets UDP through again gets
	// WebTransport back; without it, one connect from a network that
	// blocks UDP would pin an origin to WebSocket for good.
	rememberWebSocketFor = time.Hour
	// memoryVersion is the file's format; another reads as empty.
	memoryVersion = 1
)

// DefaultTransportMemory returns the file the sidecar CLI remembers
// transports in: sidecar/transports.json under os.UserCacheDir
// ($XDG_CACHE_HOME, else ~/.cache, on Linux), or "" (remember nothing)
// when there is no such directory.
func DefaultTransportMemory() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "sidecar", "transports.json")
}

// memoryFile is the file's JSON.
type memoryFile struct {
	Version int                     `json:"version"`
	Origins map[string]memoryRecord `json:"origins"`
}

// memoryRecord is what is remembered of one origin.
type memoryRecord struct {
	Transport string    `json:"transport"` // TransportWebTransport or TransportWebSocket
	At        time.Time `json:"at"`        // when the race (both tried) chose it
}

// transportMemory reads and writes the file at path ("" remembers
// nothing). Writes of one process are serialized; between processes the
// last rename wins, and both wrote a whole file.
type transportMemory struct {
	path string
	mu   sync.Mutex
}

// memories holds one transportMemory per path, for the lock.
var memories sync.Map // path -> *transportMemory

func memoryAt(path string) *transportMemory {
	if path == "" {
		return nil
	}
	m, _ := memories.LoadOrStore(path, &transportMemory{path: path})
	return m.(*transportMemory)
}

// load reads the file; anything wrong with it reads as no origins.
func (m *transportMemory) load() memoryFile {
	empty := memoryFile{Version: memoryVersion, Origins: map[string]memoryRecord{}}
	f, err := os.Open(m.path)
	if err != nil {
		return empty
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, memoryMaxFileBytes+1))
	if err != nil || len(b) > memoryMaxFileBytes {
		return empty
	}
	var mf memoryFile
	if json.Unmarshal(b, &mf) != nil || mf.Version != memoryVersion || mf.Origins == nil {
		return empty
	}
	return mf
}

// lookup returns the transport remembered for origin, "" when none (or
// a WebSocket one older than rememberWebSocketFor at now).
func (m *transportMemory) lookup(origin string, now time.Time) string {
	if m == nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.load().Origins[origin]
	switch {
	case !ok:
		return ""
	case r.Transport == TransportWebSocket && now.Sub(r.At) < rememberWebSocketFor && !r.At.After(now):
		return r.Transport
	case r.Transport == TransportWebTransport:
		return r.Transport
	}
	return ""
}

// remember records transport for origin at now, dropping the oldest
// origins beyond memoryMaxOrigins, and writes the file atomically (a
// temporary file in the same directory, mode 0600, renamed over it). A
// failure is returned for tests; the dial goes on without memory.
func (m *transportMemory) remember(origin, transport string, now time.Time) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mf := m.load()
	mf.Origins[origin] = memoryRecord{Transport: transport, At: now.UTC()}
	if over := len(mf.Origins) - memoryMaxOrigins; over > 0 {
		keys := slices.SortedFunc(maps.Keys(mf.Origins), func(a, b string) int {
			return cmp.Or(mf.Origins[a].At.Compare(mf.Origins[b].At), cmp.Compare(a, b))
		})
		for _, k := range keys[:over] {
			delete(mf.Origins, k)
		}
	}
	b, err := json.Marshal(mf)
	if err != nil {
		return err
	}
	dir := filepath.Dir(m.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".transports-*.tmp") // mode 0600
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), m.path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
