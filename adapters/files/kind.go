package files

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/auth"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/internal/pipehash"
	"github.com/sidecar-dev/sidecar/rpc"
)

// MaxListEntries bounds one files/list page (and is its default size).
const MaxListEntries = 1000

// MaxID bounds the id part of an ahp-file: URI (as adapters/tcp.MaxID).
const MaxID = tcp.MaxID

// Kind is the file channel kind on the host's registry (NewKind).
type Kind struct {
	env    adapters.Env
	log    hclog.Logger
	guard  *adapters.Guard
	pol    Policy
	tb     *tcp.Table
	quota  adapters.QuotaLimits
	quotas *adapters.Quotas

	mu      sync.Mutex
	writing map[string]*writer // partial files being written, by path
	byChan  map[string]*writer // the same, by channel URI (files/commit)

	sent sentSums // what read channels sent, for files/stat
}

// NewKind is the file kind's adapters.Factory: the files block's policy
// and quotas, the tcp block's windows.
func NewKind(env adapters.Env) (adapters.Kind, error) {
	cfg := env.Config
	log := env.Log.Named("files")
	k := &Kind{env: env, log: log, guard: env.Guard, quotas: env.Quotas, writing: map[string]*writer{}, byChan: map[string]*writer{},
		pol: Policy{Read: cfg.Files.Read, Write: cfg.Files.Write, Own: cfg.OwnPaths()},
		quota: adapters.QuotaLimits{
			Total: cfg.Files.MaxTotal, PerPrincipal: cfg.Files.MaxPerPrincipal,
			Name: "file transfer", Counted: "open", Block: "files", Advice: "wait for one to end",
		},
	}
	k.tb = tcp.NewTable(tcp.TableConfig{
		Quotas: env.Quotas,
		Quota:  &k.quota,
		Limits: delivery.Limits{
			WindowBytes:       delivery.UTF16Bytes(cfg.TCP.WindowBytes),
			MaximumFrameBytes: delivery.UTF16Bytes(cfg.TCP.MaximumFrameBytes),
		},
		Budget: adapters.WindowBudget{Total: delivery.UTF16Bytes(cfg.TCP.WindowBytesPerClient), First: tcp.FirstWindowBytes},
		Seq:    env.Journal.Seq,
		Log:    log,
		Label:  "file",
		// A parked transfer (its client lost, perhaps killed) gives
		// its quota entry to a new one of the same principal: a resume
		// continues from the partial file anyway.
		YieldParked: true,
	})
	return k, nil
}

// Table returns the kind's channels (tests).
func (k *Kind) Table() *tcp.Table { return k.tb }

// Name implements adapters.Kind.
func (k *Kind) Name() string { return "files" }

// Labels implements adapters.Kind.
func (k *Kind) Labels() []string { return []string{"file"} }

// Lookup implements adapters.Kind: a file channel exists only for the
// connection that opened it (or resumed it).
func (k *Kind) Lookup(uri string, caller adapters.Caller) adapters.Channel {
	if !strings.HasPrefix(uri, rpc.FileScheme) {
		return nil
	}
	if tc := k.tb.Channel(uri); tc != nil && tc.OwnedBy(caller.Conn) {
		return tc
	}
	return nil
}

// Requests implements adapters.Kind: files/open (beside the lane: it may
// hash a prefix), files/stat (beside: it may hash a file), files/list,
// files/put, files/commit (beside: it may sync and rename the file).
func (k *Kind) Requests() []adapters.Request {
	return []adapters.Request{
		{Method: rpc.MethodFilesCommit, Beside: true, Permission: auth.FilesWrite, Serve: k.commit},
		{Method: rpc.MethodFilesOpen, Beside: true, Permission: auth.FilesRead, Serve: k.open}, // "write" checks files.write too
		{Method: rpc.MethodFilesStat, Beside: true, Permission: auth.FilesRead, Serve: k.stat},
		{Method: rpc.MethodFilesList, Beside: true, Permission: auth.FilesRead, Serve: k.list},
		{Method: rpc.MethodFilesPut, Permission: auth.FilesWrite, Serve: k.put},
	}
}

// Advertise implements adapters.Kind: files {maxListEntries, commit}.
func (k *Kind) Advertise(res *rpc.InitializeResult) {
	res.Files = &rpc.FilesCapability{MaxListEntries: MaxListEntries, Commit: true}
}

// ConnEnded implements adapters.Kind: the connection's transfers end,
// except those parked for a reconnect.
func (k *Kind) ConnEnded(conn adapters.ConnID) { k.tb.CloseConn(conn, "client connection closed") }

// ClientGone implements adapters.Kind: the sums of what the client's
// read channels sent are forgotten.
func (k *Kind) ClientGone(clientID string) { k.sent.forget(clientID) }

// Metrics implements adapters.Kind: sidecar_file_transfers.
func (k *Kind) Metrics() []adapters.Metric {
	_, open, draining := k.tb.Counts()
	return []adapters.Metric{{Name: "file_transfers", Help: "File transfers (file channels) open now.", Value: float64(open + draining)}}
}

// Shutdown implements adapters.Kind.
func (k *Kind) Shutdown(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		k.tb.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// target resolves path and entry: the directory the file is in, as an
// os.Root that refuses to be left, and its name there. A hostile entry is
// refused by name.
func target(path, entry string) (dir *os.Root, base, full string, e *rpc.Error) {
	if e := checkPath(path); e != nil {
		return nil, "", "", e
	}
	full = path
	parent, base := filepath.Dir(path), filepath.Base(path)
	var r *os.Root
	var err error
	if entry != "" {
		if err := rpc.CheckEntry(entry); err != nil {
			return nil, "", "", rpc.Errorf(rpc.CodeInvalidParams, "refused entry of %s: %v", path, err)
		}
		full = filepath.Join(path, entry)
		dest, err := os.OpenRoot(path)
		if err != nil {
			return nil, "", "", fsError(path, err)
		}
		defer dest.Close()
		sub, b := filepath.Split(entry)
		base = b
		if sub == "" {
			r, err = dest.OpenRoot(".")
		} else {
			r, err = dest.OpenRoot(strings.TrimSuffix(sub, "/"))
		}
		if err != nil {
			if strings.Contains(err.Error(), "escapes") || errors.Is(err, os.ErrPermission) && !errors.Is(err, fs.ErrNotExist) {
				return nil, "", "", rpc.Errorf(rpc.CodePermissionDenied, "refused entry %s of %s: it leads out of the destination (a symbolic link)", entry, path)
			}
			return nil, "", "", fsError(full, err)
		}
		return r, base, full, nil
	}
	r, err = os.OpenRoot(parent)
	if err != nil {
		return nil, "", "", fsError(parent, err)
	}
	return r, base, full, nil
}

// fsError is a system error on path as a JSON-RPC error naming it.
func fsError(path string, err error) *rpc.Error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	code := int64(rpc.CodeInternalError)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code = rpc.CodeNotFound
	case errors.Is(err, fs.ErrPermission):
		code = rpc.CodePermissionDenied
		return rpc.Errorf(code, "%s: permission denied (the daemon's user may not)", path)
	case strings.Contains(err.Error(), "escapes"):
		return rpc.Errorf(rpc.CodePermissionDenied, "%s: refused, it leads out of the destination (a symbolic link)", path)
	}
	return rpc.Errorf(code, "%s: %v", path, err)
}

// open is files/open.
func (k *Kind) open(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.FilesOpenParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	id, ok := strings.CutPrefix(p.Channel, rpc.FileScheme+"/")
	if !ok || id == "" || len(id) > MaxID || strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "channel" must be ahp-file:/<id> (id of 1-%d characters without spaces)`, MaxID)
	}
	switch p.Mode {
	case "read":
		return k.openRead(c, p)
	case "write":
		if e := k.guard.CheckOn(c.Identity, auth.FilesWrite, p.Path); e != nil {
			return nil, e
		}
		return k.openWrite(c, p)
	}
	return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "mode" must be "read" or "write"`)
}

func (k *Kind) openRead(c adapters.Caller, p rpc.FilesOpenParams) (any, *rpc.Error) {
	dir, base, full, e := target(p.Path, p.Entry)
	if e != nil {
		return nil, e
	}
	defer dir.Close()
	if e := k.pol.Check(full, c.Identity.Role, false); e != nil {
		k.env.Record(c, audit.ActionFilesRead, map[string]any{"file.path": full, "outcome": "denied"})
		return nil, e
	}
	f, err := dir.OpenFile(base, os.O_RDONLY|syscallNonblock, 0)
	if err != nil {
		return nil, fsError(full, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fsError(full, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s is %s, not a regular file: refused", full, describe(fi.Mode()))
	}
	res := rpc.FilesOpenResult{Size: fi.Size(), FileMode: rpc.WireFileMode(fi.Mode()), MtimeNs: fi.ModTime().UnixNano()}
	h := newHash()
	if pr := p.Prefix; pr != nil && pr.Size > 0 && pr.Size <= fi.Size() {
		if err := hashPrefix(f, pr.Size, h); err != nil {
			f.Close()
			return nil, fsError(full, err)
		}
		if hex.EncodeToString(h.Sum(nil)) == pr.SHA256 {
			res.Offset = pr.Size
		} else {
			h.Reset()
		}
	}
	if _, err := f.Seek(res.Offset, io.SeekStart); err != nil {
		f.Close()
		return nil, fsError(full, err)
	}
	r := &reader{f: f, h: pipehash.New(h), size: fi.Size(), mtime: fi.ModTime()}
	r.done = func() {
		outcome := "incomplete"
		if r.eof {
			outcome = "complete"
		}
		k.env.Record(c, audit.ActionFilesRead, map[string]any{"file.path": full, "file.size": fi.Size(), "offset": res.Offset, "bytes": r.read, "outcome": outcome})
	}
	r.ended = func(sum string, unchanged bool) {
		if unchanged {
			k.sent.put(p.Channel, sentSum{clientID: c.ClientID, path: full, sha256: sum})
		}
	}
	if e := k.tb.Attach(c, p.Channel, rpc.FileStream, r); e != nil {
		return nil, e
	}
	k.log.Debug("file opened for reading", "client", c.ClientID, "path", full, "offset", res.Offset)
	return res, nil
}

func (k *Kind) openWrite(c adapters.Caller, p rpc.FilesOpenParams) (any, *rpc.Error) {
	switch {
	case p.Size == nil:
		return nil, rpc.Missing("size")
	case *p.Size < 0:
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "size" must not be negative`)
	case p.SHA256 != "" && !validSum(p.SHA256):
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "sha256" must be 64 lowercase hex digits`)
	}
	mode := os.FileMode(0o644)
	if p.FileMode != nil {
		mode = rpc.FileModeOf(*p.FileMode)
	}
	mtime := time.Now()
	if p.MtimeNs != nil {
		mtime = time.Unix(0, *p.MtimeNs)
	}
	dir, base, full, e := target(p.Path, p.Entry)
	if e != nil {
		return nil, e
	}
	if e := k.pol.Check(full, c.Identity.Role, true); e != nil {
		dir.Close()
		k.env.Record(c, audit.ActionFilesWrite, map[string]any{"file.path": full, "outcome": "denied"})
		return nil, e
	}
	if IsPartialName(base) {
		dir.Close()
		return nil, partialRefused(full)
	}
	if fi, err := dir.Lstat(base); err == nil && !fi.Mode().IsRegular() && fi.Mode()&fs.ModeSymlink == 0 {
		dir.Close()
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s is %s: refused, only a regular file is replaced", full, describe(fi.Mode()))
	}
	part := PartialName(base)
	partPath := filepath.Join(filepath.Dir(full), part)
	// A transfer of the same file whose client was lost (parked for a
	// reconnect that a killed client never makes) gives way to this one:
	// its partial file is what this one continues.
	// One that is ending (reset by its client, which now opens again)
	// is waited for: its end may still remove an empty partial file.
	var oldCh *tcp.Channel
	var oldClosed chan struct{}
	var oldClosing bool
	k.mu.Lock()
	if old := k.writing[partPath]; old != nil {
		oldCh, oldClosed, oldClosing = old.ch, old.closed, old.closing.Load()
	}
	k.mu.Unlock()
	if oldCh != nil && oldCh.Parked() {
		oldCh.Abandon("taken over by a new transfer of " + full)
		oldClosing = true
	}
	if oldClosing {
		select {
		case <-oldClosed:
		case <-time.After(5 * time.Second):
		}
	}
	w := &writer{closed: make(chan struct{})}
	k.mu.Lock()
	if k.writing[partPath] != nil {
		k.mu.Unlock()
		dir.Close()
		return nil, rpc.Errorf(rpc.CodeAlreadyExists, "%s is being written by another transfer", full)
	}
	k.writing[partPath] = w
	k.mu.Unlock()
	done := sync.OnceFunc(func() {
		k.mu.Lock()
		if k.writing[partPath] == w {
			delete(k.writing, partPath)
		}
		if k.byChan[p.Channel] == w {
			delete(k.byChan, p.Channel)
		}
		k.mu.Unlock()
		close(w.closed)
	})
	fail := func(e *rpc.Error) (any, *rpc.Error) {
		dir.Close()
		done()
		return nil, e
	}
	if fi, err := dir.Lstat(part); err == nil && !fi.Mode().IsRegular() {
		return fail(rpc.Errorf(rpc.CodeInvalidParams, "%s is %s: refused", partPath, describe(fi.Mode())))
	}
	f, err := dir.OpenFile(part, os.O_RDWR|os.O_CREATE|syscallNoFollow, 0o600)
	if err != nil {
		return fail(fsError(partPath, err))
	}
	h := newHash()
	var have int64
	if p.Resume {
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return fail(fsError(partPath, err))
		}
		have = min(fi.Size(), *p.Size)
		if err := hashPrefix(f, have, h); err != nil {
			f.Close()
			return fail(fsError(partPath, err))
		}
	}
	var res rpc.FilesOpenResult
	res.Offset, res.Size, res.FileMode, res.MtimeNs = have, *p.Size, rpc.WireFileMode(mode), mtime.UnixNano()
	if have > 0 {
		res.PrefixSHA256 = hex.EncodeToString(cloneSum(h))
	}
	if err := f.Truncate(have); err != nil {
		f.Close()
		return fail(fsError(partPath, err))
	}
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		f.Close()
		return fail(fsError(partPath, err))
	}
	w.dir, w.base, w.f, w.h, w.size, w.sum, w.mode, w.mtime = dir, base, f, pipehash.New(h), *p.Size, p.SHA256, mode, mtime
	w.offset, w.done, w.result = have, done, make(chan struct{})
	w.from = have
	w.ended = func(committed bool, from, to int64, why string) {
		attrs := map[string]any{"file.path": full, "file.size": *p.Size, "offset": from, "bytes": to - from, "outcome": "committed"}
		if !committed {
			attrs["outcome"] = "incomplete"
			if why != "" {
				attrs["outcome"], attrs["error"] = "failed", why
			}
		}
		k.env.Record(c, audit.ActionFilesWrite, attrs)
	}
	if e := k.tb.Attach(c, p.Channel, rpc.FileStream, w); e != nil {
		return nil, e
	}
	k.mu.Lock()
	w.ch = k.tb.Channel(p.Channel)
	select {
	case <-w.closed: // ended already
	default:
		k.byChan[p.Channel] = w
	}
	k.mu.Unlock()
	k.log.Debug("file opened for writing", "client", c.ClientID, "path", full, "offset", have, "size", *p.Size)
	return res, nil
}

// validSum reports whether s is a SHA-256 as the wire states it: 64
// lowercase hex digits.
func validSum(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// commit is files/commit: the SHA-256 of a file being written on one of
// the caller's channels, opened without it.
func (k *Kind) commit(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.FilesCommitParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	if !validSum(p.SHA256) {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "sha256" must be 64 lowercase hex digits`)
	}
	tc := k.tb.Channel(p.Channel)
	k.mu.Lock()
	w := k.byChan[p.Channel]
	k.mu.Unlock()
	if tc == nil || !tc.OwnedBy(c.Conn) || w == nil {
		return nil, rpc.Errorf(rpc.CodeNotFound, "%s: no file being written on this channel of this connection", p.Channel)
	}
	if e := w.state(p.SHA256); e != nil {
		return nil, e
	}
	return struct{}{}, nil
}

// partialRefused refuses to write a target named like a partial file.
func partialRefused(full string) *rpc.Error {
	return rpc.Errorf(rpc.CodeInvalidParams, "%s is named like a partial file of an interrupted copy (.NAME%s): refused, it is never written as a target", full, PartialSuffix)
}

// cloneSum is h's sum so far (Sum appends; h goes on).
func cloneSum(h interface{ Sum([]byte) []byte }) []byte { return h.Sum(nil) }

// describe names a non-regular file's type.
func describe(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

// info describes fi, named name.
func info(name string, fi fs.FileInfo) rpc.FileInfo {
	t := rpc.FileOther
	switch {
	case fi.Mode().IsRegular():
		t = rpc.FileRegular
	case fi.IsDir():
		t = rpc.FileDir
	case fi.Mode()&fs.ModeSymlink != 0:
		t = rpc.FileSymlink
	}
	return rpc.FileInfo{Name: name, Type: t, Size: fi.Size(), FileMode: rpc.WireFileMode(fi.Mode()), MtimeNs: fi.ModTime().UnixNano()}
}

// stat is files/stat.
func (k *Kind) stat(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.FilesStatParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	if e := checkPath(p.Path); e != nil {
		return nil, e
	}
	if e := k.pol.Check(p.Path, c.Identity.Role, false); e != nil {
		return nil, e
	}
	fi, err := os.Lstat(p.Path)
	if err != nil {
		return nil, fsError(p.Path, err)
	}
	res := info(filepath.Base(p.Path), fi)
	if res.Type == rpc.FileSymlink {
		res.Target, _ = os.Readlink(p.Path)
	}
	if p.SHA256 && res.Type == rpc.FileRegular && p.Channel != "" {
		if s, ok := k.sent.take(p.Channel, c.ClientID, p.Path); ok {
			res.SHA256 = s
			return res, nil
		}
	}
	if p.SHA256 && res.Type == rpc.FileRegular {
		f, err := os.OpenFile(p.Path, os.O_RDONLY|syscallNoFollow|syscallNonblock, 0)
		if err != nil {
			return nil, fsError(p.Path, err)
		}
		defer f.Close()
		h := newHash()
		if _, err := io.Copy(h, f); err != nil {
			return nil, fsError(p.Path, err)
		}
		res.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	return res, nil
}

// listBatch is how many names files/list reads from a directory at once.
const listBatch = 256

// pageNames reads d's names in batches of listBatch and returns the
// smallest limit of those after cursor, in order, and whether more
// follow. It never holds more than 2×limit+listBatch names (held is the
// most it held), whatever the directory's size: past 2×limit the names
// are sorted and cut to limit, and a name above the last kept one is
// dropped as read.
func pageNames(d interface{ Readdirnames(int) ([]string, error) }, cursor string, limit int) (names []string, more bool, held int, err error) {
	ceiling := "" // once more: names above it are not on this page
	for {
		batch, err := d.Readdirnames(listBatch)
		for _, n := range batch {
			if n > cursor && (!more || n < ceiling) {
				names = append(names, n)
			}
		}
		held = max(held, len(names))
		if len(names) > 2*limit {
			slices.Sort(names)
			names, more = names[:limit], true
			ceiling = names[limit-1]
		}
		if err == io.EOF || len(batch) == 0 {
			break
		}
		if err != nil {
			return nil, false, held, err
		}
	}
	slices.Sort(names)
	if len(names) > limit {
		names, more = names[:limit], true
	}
	return names, more, held, nil
}

// list is files/list: the names after the cursor are read in batches and
// only the smallest limit of them kept (pageNames: memory bounded by the
// page, not the directory).
func (k *Kind) list(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.FilesListParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	if e := checkPath(p.Path); e != nil {
		return nil, e
	}
	if e := k.pol.Check(p.Path, c.Identity.Role, false); e != nil {
		return nil, e
	}
	limit := p.Limit
	if limit <= 0 || limit > MaxListEntries {
		limit = MaxListEntries
	}
	d, err := os.Open(p.Path)
	if err != nil {
		return nil, fsError(p.Path, err)
	}
	defer d.Close()
	names, more, _, err := pageNames(d, p.Cursor, limit)
	if err != nil {
		return nil, fsError(p.Path, err)
	}
	res := rpc.FilesListResult{Entries: make([]rpc.FileInfo, 0, len(names))}
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(p.Path, n))
		if err != nil {
			continue // gone meanwhile
		}
		e := info(n, fi)
		if e.Type == rpc.FileSymlink {
			e.Target, _ = os.Readlink(filepath.Join(p.Path, n))
		}
		res.Entries = append(res.Entries, e)
	}
	if more && len(names) > 0 {
		res.Next = names[len(names)-1]
	}
	return res, nil
}

// put is files/put: a directory or a symbolic link.
func (k *Kind) put(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.FilesPutParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	if p.Type == rpc.FileSymlink {
		if p.Entry == "" {
			return nil, rpc.Missing("entry")
		}
		if err := rpc.CheckEntry(p.Entry); err != nil {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "refused entry of %s: %v", p.Path, err)
		}
		if err := rpc.CheckLinkTarget(p.Entry, p.Target); err != nil {
			return nil, rpc.Errorf(rpc.CodePermissionDenied, "refused entry of %s: %v", p.Path, err)
		}
	} else if p.Type != rpc.FileDir {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "type" must be %q or %q, got %q: refused`, rpc.FileDir, rpc.FileSymlink, p.Type)
	}
	var dir *os.Root
	var base, full string
	var e *rpc.Error
	if p.Entry == "" {
		if e := checkPath(p.Path); e != nil {
			return nil, e
		}
		if e := k.pol.Check(p.Path, c.Identity.Role, true); e != nil {
			return nil, e
		}
		if err := os.MkdirAll(p.Path, 0o755); err != nil {
			return nil, fsError(p.Path, err)
		}
		dir, base, full, e = target(p.Path, "")
	} else {
		dir, base, full, e = target(p.Path, p.Entry)
	}
	if e != nil {
		return nil, e
	}
	defer dir.Close()
	if e := k.pol.Check(full, c.Identity.Role, true); e != nil {
		return nil, e
	}
	if IsPartialName(base) {
		return nil, partialRefused(full)
	}
	switch p.Type {
	case rpc.FileSymlink:
		if fi, err := dir.Lstat(base); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			_ = dir.Remove(base) // replaced, as a file is
		}
		if err := dir.Symlink(p.Target, base); err != nil {
			return nil, fsError(full, err)
		}
		if p.MtimeNs != nil {
			if err := Lchtimes(dir, base, time.Unix(0, *p.MtimeNs)); err != nil {
				return nil, fsError(full, err)
			}
		}
	case rpc.FileDir:
		if err := dir.Mkdir(base, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fsError(full, err)
		}
		fi, err := dir.Lstat(base)
		if err != nil {
			return nil, fsError(full, err)
		}
		if !fi.IsDir() {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s is %s, not a directory: refused", full, describe(fi.Mode()))
		}
		if p.FileMode != nil {
			if err := dir.Chmod(base, rpc.FileModeOf(*p.FileMode)); err != nil {
				return nil, fsError(full, err)
			}
		}
		if p.MtimeNs != nil {
			t := time.Unix(0, *p.MtimeNs)
			if err := dir.Chtimes(base, t, t); err != nil {
				return nil, fsError(full, err)
			}
		}
	}
	return struct{}{}, nil
}

var _ adapters.Kind = (*Kind)(nil)
