package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// olderHost is the host's end of the pipe made to look like a host from
// before files/commit (docs/protocol.md "File channels"): its initialize
// result advertises files without "commit", and a files/commit reaches
// the host under a method it does not know, so it is answered -32601 as
// an older host answers it. It keeps every files/open for writing and
// counts the files/commit calls.
type olderHost struct {
	transport.MessageConn

	mu         sync.Mutex
	advertised int                   // initialize results rewritten
	opens      []rpc.FilesOpenParams // files/open with mode "write", in order
	commits    int                   // files/commit calls
}

var (
	withCommit    = []byte(`"files":{"maxListEntries":1000,"commit":true}`)
	withoutCommit = []byte(`"files":{"maxListEntries":1000}`)
)

func (o *olderHost) WriteMessage(ctx context.Context, text []byte) error {
	if bytes.Contains(text, withCommit) {
		text = bytes.Replace(text, withCommit, withoutCommit, 1)
		o.mu.Lock()
		o.advertised++
		o.mu.Unlock()
	}
	return o.MessageConn.WriteMessage(ctx, text)
}

func (o *olderHost) ReadMessage(ctx context.Context) ([]byte, error) {
	m, err := o.MessageConn.ReadMessage(ctx)
	if err != nil || len(m) == 0 || m[0] != '{' || !bytes.Contains(m, []byte(`"files/`)) {
		return m, err // binary data messages too
	}
	var req struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(m, &req) != nil {
		return m, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch req.Method {
	case rpc.MethodFilesOpen:
		var p rpc.FilesOpenParams
		if json.Unmarshal(req.Params, &p) == nil && p.Mode == "write" {
			o.opens = append(o.opens, p)
		}
	case rpc.MethodFilesCommit:
		o.commits++
		m = bytes.Replace(m, []byte(`"`+rpc.MethodFilesCommit+`"`), []byte(`"files/commit-unknown"`), 1)
	}
	return m, nil
}

// seen returns the write opens and commits seen so far, and forgets them.
func (o *olderHost) seen() ([]rpc.FilesOpenParams, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	opens, commits := o.opens, o.commits
	o.opens, o.commits = nil, 0
	return opens, commits
}

// TestUploadOlderHost: to a host that does not advertise files/commit,
// Upload states the file's SHA-256 at files/open (a pass over the file
// before sending) and never calls files/commit: a fresh upload and one
// continuing the host's partial file (and one whose partial file differs,
// opened again without resume) land the exact bytes, each files/open
// carrying the source's sum, no partial file left.
func TestUploadOlderHost(t *testing.T) {
	var older *olderHost
	c := testHostConnVia(t, func(mc transport.MessageConn) transport.MessageConn {
		older = &olderHost{MessageConn: mc}
		return older
	})
	if f := c.Initialized().Files; f == nil || f.Commit || older.advertised != 1 {
		t.Fatalf("the client sees files %+v (%d initialize results rewritten); want files without commit", f, older.advertised)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := filepath.Join(t.TempDir(), "src.bin")
	data := randomBytes(3<<20+333, 5)
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	sum := hex.EncodeToString(h[:])
	const kept = 1<<20 + 7
	for _, tt := range []struct {
		name    string
		partial []byte // the host's partial file before; nil: none
		want    int64  // bytes sent
		resumes []bool // each write open's resume
	}{
		{"fresh", nil, int64(len(data)), []bool{true}},
		{"prefix kept", data[:kept], int64(len(data) - kept), []bool{true}},
		{"prefix differs", append(bytes.Clone(data[:kept-1]), data[kept-1]^1), int64(len(data)), []bool{true, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			dst := filepath.Join(dir, "dst.bin")
			part := filepath.Join(dir, partialName("dst.bin"))
			if tt.partial != nil {
				if err := os.WriteFile(part, tt.partial, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			res, err := Upload(ctx, c, src, dst, CopyOptions{})
			opens, commits := older.seen()
			if err != nil || len(res.Failed) > 0 {
				t.Fatalf("Upload: %v %v (opens %+v, %d commits)", err, res.Failed, opens, commits)
			}
			if res.Bytes != tt.want || res.Files != 1 {
				t.Errorf("sent %d bytes, %d files; want %d, 1", res.Bytes, res.Files, tt.want)
			}
			if commits != 0 {
				t.Errorf("%d files/commit calls to a host that does not serve it", commits)
			}
			// The open again without resume may be tried more than once:
			// the host can take it before the reset of the first and
			// find the file still being written (uploadOnce retries).
			if len(opens) < len(tt.resumes) || (len(tt.resumes) == 1 && len(opens) != 1) {
				t.Fatalf("write opens %+v, want %d", opens, len(tt.resumes))
			}
			for i, p := range opens {
				want := tt.resumes[min(i, len(tt.resumes)-1)]
				if p.SHA256 != sum || p.Resume != want || p.Size == nil || *p.Size != int64(len(data)) {
					t.Errorf("write open %d: sha256 %q, resume %v, size %v; want %s, %v, %d", i, p.SHA256, p.Resume, p.Size, sum, want, len(data))
				}
			}
			got, err := os.ReadFile(dst)
			if g := sha256.Sum256(got); err != nil || hex.EncodeToString(g[:]) != sum {
				t.Fatalf("result: %d bytes, SHA-256 %x, %v; want %s", len(got), g, err, sum)
			}
			if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o640 {
				t.Errorf("result mode %v, %v; want 0640", fi.Mode(), err)
			}
			if _, err := os.Stat(part); !os.IsNotExist(err) {
				t.Errorf("partial file left: %v", err)
			}
		})
	}
}
