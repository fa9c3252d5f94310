package pty

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/internal/printable"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Kind is the terminal channel kind (ahp-terminal:/<id>, ahp.md §5) on
// the host's registry: the catalogue of terminals, createTerminal and
// disposeTerminal, and the terminals' shared quota (config terminal
// block). Register it with NewKind.
type Kind struct {
	env   adapters.Env
	cfg   config.Terminal
	log   hclog.Logger
	quota adapters.QuotaLimits
	wg    sync.WaitGroup // disposals in progress (Kill, flush, end)
	// recs makes the session recordings (nil: terminal.record_dir unset).
	recs *Recordings

	mu      sync.Mutex
	terms   map[string]*termEntry
	closing bool
}

// NewKind is the terminal kind's adapters.Factory.
func NewKind(env adapters.Env) (adapters.Kind, error) {
	cfg := env.Config.Terminal
	return &Kind{
		env: env, cfg: cfg, log: env.Log.Named("terminal"),
		terms: map[string]*termEntry{},
		recs:  NewRecordings(RecordConfig{Dir: cfg.RecordDir, MaxBytes: cfg.RecordMaxBytes, DirMaxBytes: cfg.RecordDirMaxBytes, Input: cfg.RecordInput}, nil),
		quota: adapters.QuotaLimits{
			Total: cfg.MaxTotal, PerPrincipal: cfg.MaxPerPrincipal, PerClient: cfg.MaxPerClient, PerConn: cfg.MaxPerConnection,
			Name: "terminal", Counted: "terminals", Block: "terminal", Advice: "dispose one first",
		},
	}, nil
}

// Name implements adapters.Kind.
func (k *Kind) Name() string { return "terminal" }

// Labels implements adapters.Kind.
func (k *Kind) Labels() []string { return []string{"terminal"} }

// Requests implements adapters.Kind: createTerminal and disposeTerminal,
// in the lane (a dispatchAction after createTerminal finds the terminal).
func (k *Kind) Requests() []adapters.Request {
	return []adapters.Request{
		{Method: rpc.MethodCreateTerminal, Permission: auth.TerminalCreate, Serve: k.createTerminal},
		{Method: rpc.MethodDisposeTerminal, Permission: auth.TerminalKill, Serve: k.disposeTerminal},
		{Method: rpc.MethodTerminalShare, Permission: auth.TerminalShare, Serve: k.share},
		{Method: rpc.MethodTerminalUnshare, Permission: auth.TerminalShare, Serve: k.unshare},
	}
}

// Advertise implements adapters.Kind: the defaultDirectory of the
// initialize result, the daemon's user's home (ahp.md §2).
func (k *Kind) Advertise(res *rpc.InitializeResult) {
	if home, err := os.UserHomeDir(); err == nil {
		res.DefaultDirectory = FileURI(home)
	}
}

// Lookup implements adapters.Kind: the running (or exited) terminal uri,
// if the caller may attach to it (share.go: its holder, an owner, or
// someone it is shared with; the others are refused by Refuse); one
// whose process is still starting is not visible yet.
func (k *Kind) Lookup(uri string, caller adapters.Caller) adapters.Channel {
	if t := k.Terminal(uri); t != nil && t.Access(caller.Identity) != "" {
		return t
	}
	return nil
}

// Terminal returns the running (or exited) terminal uri, or nil.
func (k *Kind) Terminal(uri string) *Terminal {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.terms[uri]; e != nil {
		return e.t
	}
	return nil
}

// list returns every started terminal.
func (k *Kind) list() []*Terminal {
	k.mu.Lock()
	defer k.mu.Unlock()
	list := make([]*Terminal, 0, len(k.terms))
	for _, e := range k.terms {
		if e.t != nil {
			list = append(list, e.t)
		}
	}
	return list
}

// ConnEnded implements adapters.Kind: a terminal outlives its creator's
// connection.
func (k *Kind) ConnEnded(adapters.ConnID) {}

// ClientGone implements adapters.Kind: each running terminal clientID
// held, now that it has no connection left, goes to a client still
// subscribed to it (windowed, so it paces the PTY), as tmux keeps a
// session going for the clients left: a viewer sharing the terminal
// becomes its holder instead of skipping output for good. A terminal
// nobody else watches keeps its claim for whoever reattaches
// (terminal/claimed then takes it over).
func (k *Kind) ClientGone(clientID string) {
	for _, t := range k.list() {
		t.HolderGone(clientID)
	}
}

// Metrics implements adapters.Kind: sidecar_terminals, and the
// recordings' sidecar_recordings_removed_total and
// sidecar_recordings_cut_total.
func (k *Kind) Metrics() []adapters.Metric {
	var removed, cut uint64
	if k.recs != nil {
		removed, cut = k.recs.Removed(), k.recs.Cut()
	}
	return []adapters.Metric{{
		Name: "terminals", Help: "Terminals the host holds now: starting, running, and exited but not yet disposed.",
		Value: float64(k.env.Quotas.Count(&k.quota)),
	}, {
		Name: "recordings_removed_total", Help: "Session recordings removed to keep terminal.record_dir under terminal.record_dir_max_bytes.",
		Value: float64(removed), Counter: true,
	}, {
		Name: "recordings_cut_total", Help: "Session recordings stopped at terminal.record_max_bytes.",
		Value: float64(cut), Counter: true,
	}}
}

// Shutdown implements adapters.Kind: every terminal's process group is
// killed, and the disposals in progress end.
func (k *Kind) Shutdown(ctx context.Context) {
	k.mu.Lock()
	k.closing = true
	terms := make([]*Terminal, 0, len(k.terms))
	for _, e := range k.terms {
		if e.t != nil {
			terms = append(terms, e.t)
		}
	}
	k.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range terms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Kill()
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		k.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// termEntry is one terminal of the catalogue: t is nil while its process
// starts (the URI is reserved, and counts against the limits: res).
type termEntry struct {
	t   *Terminal
	res *adapters.Reservation
}

// createTerminal is createTerminal (ahp.md §5): check the params and the
// limits, reserve the URI, start the program on a PTY, and list it.
func (k *Kind) createTerminal(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.CreateTerminalParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	id, ok := strings.CutPrefix(p.Channel, rpc.TerminalScheme+"/")
	if !ok || id == "" || len(id) > MaxTerminalID || strings.ContainsAny(id, " \t\r\n") {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "channel" must be ahp-terminal:/<id> (id of 1-%d characters without spaces)`, MaxTerminalID)
	}
	if len(p.Name) > rpc.MaxNameBytes {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "name" must be at most %d bytes (got %d)`, rpc.MaxNameBytes, len(p.Name))
	}
	cols, rows := p.Cols, p.Rows
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	if cols < 1 || rows < 1 || cols > MaxTermSize || rows > MaxTermSize {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "cols" and "rows" must be between 1 and %d`, MaxTermSize)
	}
	dir := ""
	if p.Cwd != "" {
		u, err := url.Parse(p.Cwd)
		if err != nil || u.Scheme != "file" || u.Path == "" {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "cwd" must be a file:// URI, got %q`, p.Cwd)
		}
		dir = u.Path
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "cwd" %s is not a directory on this host`, p.Cwd)
		}
	}
	if err := CheckEnv(p.Env); err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "env": %v`, err)
	}
	claim := rpc.Claim{Kind: "client", ClientID: c.ClientID}
	if p.Claim != nil {
		if p.Claim.Kind != "client" && p.Claim.Kind != "session" {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "claim.kind" must be "client" or "session"`)
		}
		if p.Claim.Kind == "client" {
			if e := rpc.CheckClientID("claim.clientId", p.Claim.ClientID); e != nil {
				return nil, e
			}
		}
		claim = *p.Claim
	}
	cfg := k.cfg
	k.mu.Lock()
	if k.closing {
		k.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
	}
	if _, exists := k.terms[p.Channel]; exists {
		k.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeAlreadyExists, "terminal already exists: %s", p.Channel)
	}
	res, e := k.env.Quotas.Reserve(&k.quota, c)
	if e != nil {
		k.mu.Unlock()
		return nil, e
	}
	// Reserve the URI while the process starts (outside the lock).
	entry := &termEntry{res: res}
	k.terms[p.Channel] = entry
	k.mu.Unlock()

	env := map[string]string{}
	for k, v := range cfg.Env {
		env[k] = v
	}
	for k, v := range p.Env {
		env[k] = v
	}
	proc, err := Start(Options{
		Argv: p.Command, Shell: cfg.Shell, Login: cfg.Login, User: cfg.User,
		Dir: dir, Env: env, Term: cfg.Term, Cols: uint16(cols), Rows: uint16(rows),
	})
	if err != nil {
		k.forget(p.Channel, entry)
		e := rpc.Errorf(rpc.CodeInternalError, "cannot start terminal: %v", err)
		switch {
		case errors.Is(err, syscall.E2BIG): // the client's command (its env is checked above)
			e = rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "command" and "env" are too large to start a program: %v`, err)
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
			e.Data, _ = json.Marshal(rpc.StartErrorData{Kind: "commandNotFound"})
		case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC):
			e.Data, _ = json.Marshal(rpc.StartErrorData{Kind: "permissionDenied"})
		}
		return nil, e
	}
	log := k.log.With("terminal", p.Channel)
	if p.Echo != nil && !*p.Echo {
		if err := proc.SetEcho(false); err != nil {
			log.Warn("cannot turn echo off", "error", err)
		}
	}
	title := filepath.Base(orDefault(cfg.Shell, "shell"))
	switch {
	case p.Name != "":
		title = p.Name
	case len(p.Command) > 0:
		title = filepath.Base(p.Command[0])
	}
	cwd := ""
	if dir != "" {
		cwd = FileURI(dir)
	}
	var rec *Recorder
	if k.recs != nil {
		shell := proc.Shell() // the configured shell, or the one the default resolved to
		if len(p.Command) > 0 {
			shell = p.Command[0]
		}
		rec, err = k.recs.Start(p.Channel, cols, rows, map[string]string{"TERM": cfg.Term, "SHELL": shell})
		if err != nil {
			log.Warn("terminal not recorded", "error", err)
		}
	}
	t := NewTerminal(TerminalConfig{
		URI: p.Channel, Creator: c.ClientID, Holder: c.Identity.Name, Guard: k.env.Guard, Title: title, Cwd: cwd,
		Cols: cols, Rows: rows, Claim: claim,
		ScrollbackBytes: cfg.ScrollbackBytes,
		Journal:         k.env.Journal,
		Log:             log,
		Catalogue:       k.env.Root.SetTerminal,
		Connected:       k.env.Connected,
		Recorder:        rec,
		Audit:           k.env.Record,
	}, proc)
	k.mu.Lock()
	entry.t = t // published under k.mu: lookups skip terminals still starting
	closing := k.closing
	k.mu.Unlock()
	if closing {
		k.forget(p.Channel, entry)
		_ = proc.Kill(KillGrace)
		if rec != nil {
			rec.Close()
		}
		return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
	}
	attrs := map[string]any{"terminal": p.Channel, "client.id": c.ClientID, "process.pid": proc.Pid()}
	if len(p.Command) > 0 {
		// The program only: its arguments may hold a secret.
		attrs["process.executable.name"] = filepath.Base(p.Command[0])
	}
	if rec != nil {
		attrs["recording"] = rec.Path()
	}
	k.env.Record(c, audit.ActionTerminalCreate, attrs)
	log.Info("terminal created", "client", c.ClientID, "pid", proc.Pid(), "command", printable.Log(fmt.Sprintf("%q", p.Command)))
	t.Start()
	return nil, nil
}

// forget removes entry, if it is still uri's, and releases its quota.
func (k *Kind) forget(uri string, entry *termEntry) {
	k.mu.Lock()
	if k.terms[uri] == entry {
		delete(k.terms, uri)
	}
	k.mu.Unlock()
	entry.res.Release()
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// disposeTerminal is disposeTerminal: the terminal leaves the catalogue at
// once; its program is killed, and each subscription ends once it has
// sent terminal/exited (disposedBy names the client), or after
// disposeFlushWait for a windowed one that does not read.
func (k *Kind) disposeTerminal(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.ChannelParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	k.mu.Lock()
	e := k.terms[p.Channel]
	if e == nil || e.t == nil {
		k.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeNotFound, "no such terminal: %s", p.Channel)
	}
	if k.closing { // Shutdown kills it, and waits for k.wg already
		k.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
	}
	if d := e.t.mayManage(c.Identity, auth.TerminalKill); d != nil {
		k.mu.Unlock()
		return nil, k.env.Guard.Refuse(d)
	}
	delete(k.terms, p.Channel)
	k.wg.Add(1)
	k.mu.Unlock()
	e.res.Release()
	t := e.t
	k.log.Info("terminal disposed", "terminal", p.Channel, "client", c.ClientID)
	k.env.Record(c, audit.ActionTerminalKill, map[string]any{"terminal": p.Channel, "client.id": c.ClientID, "creator": t.Creator()})
	t.Dispose(c.ClientID)
	go func() {
		defer k.wg.Done()
		t.Kill() // the reader logs terminal/exited before it is done
		t.WaitFlushed(disposeFlushWait)
		k.env.EndChannel(p.Channel) // an ordinary one's queue (terminal/exited last) still goes out
		k.env.Journal.Drop(p.Channel)
	}()
	return nil, nil
}

// disposeFlushWait bounds how long a disposed terminal's subscriptions
// are kept for their terminal/exited to be sent: a client attached to a
// terminal another one disposes (sidecar kill) learns that it ended, and
// exits, instead of waiting for output forever. A windowed viewer that
// does not read gets no longer.
const disposeFlushWait = 2 * time.Second

var _ adapters.Kind = (*Kind)(nil)
