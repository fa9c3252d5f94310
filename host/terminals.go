package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/adapters/pty"
	"github.com/sidecar-dev/sidecar/rpc"
)

// termEntry is one terminal of the catalogue: t is nil while its process
// starts (the URI is reserved, and counts against the limits).
type termEntry struct {
	t       *pty.Terminal
	creator string
	// principal and conn are who created it: the limits count them too,
	// so that a new clientId (or connection) does not make room.
	principal string
	conn      adapters.ConnID
}

// createTerminal is createTerminal (ahp.md §5): check the params and the
// limits, reserve the URI, start the program on a PTY, and list it.
func (c *conn) createTerminal(params json.RawMessage) (any, *rpc.Error) {
	var p rpc.CreateTerminalParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	id, ok := strings.CutPrefix(p.Channel, rpc.TerminalScheme+"/")
	if !ok || id == "" || len(id) > pty.MaxTerminalID || strings.ContainsAny(id, " \t\r\n") {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "channel" must be ahp-terminal:/<id> (id of 1-%d characters without spaces)`, pty.MaxTerminalID)
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
	if cols < 1 || rows < 1 || cols > pty.MaxTermSize || rows > pty.MaxTermSize {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "cols" and "rows" must be between 1 and %d`, pty.MaxTermSize)
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
	if err := pty.CheckEnv(p.Env); err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "env": %v`, err)
	}
	claim := rpc.Claim{Kind: "client", ClientID: c.id()}
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
	s := c.s
	cfg := s.cfg.Terminal
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
	}
	if _, exists := s.terminals[p.Channel]; exists {
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeAlreadyExists, "terminal already exists: %s", p.Channel)
	}
	total, mine, principal, conn := 0, 0, 0, 0
	for _, e := range s.terminals {
		total++
		if e.creator == c.id() {
			mine++
		}
		if e.principal == c.principal {
			principal++
		}
		if e.conn == c.connID {
			conn++
		}
	}
	for _, l := range []struct {
		n, max int
		what   string
	}{
		{total, cfg.MaxTotal, "on this host (terminal.max_total)"},
		{principal, cfg.MaxPerPrincipal, "for this token (terminal.max_per_principal)"},
		{mine, cfg.MaxPerClient, "for this client (terminal.max_per_client)"},
		{conn, cfg.MaxPerConnection, "on this connection (terminal.max_per_connection)"},
	} {
		if l.n >= l.max {
			s.mu.Unlock()
			return nil, rpc.Errorf(rpc.CodePermissionDenied, "terminal limit reached: %d terminals %s; dispose one first", l.max, l.what)
		}
	}
	// Reserve the URI while the process starts (outside the lock).
	entry := &termEntry{creator: c.id(), principal: c.principal, conn: c.connID}
	s.terminals[p.Channel] = entry
	s.mu.Unlock()

	env := map[string]string{}
	for k, v := range cfg.Env {
		env[k] = v
	}
	for k, v := range p.Env {
		env[k] = v
	}
	proc, err := pty.Start(pty.Options{
		Argv: p.Command, Shell: cfg.Shell, Login: cfg.Login, User: cfg.User,
		Dir: dir, Env: env, Term: cfg.Term, Cols: uint16(cols), Rows: uint16(rows),
	})
	if err != nil {
		s.mu.Lock()
		delete(s.terminals, p.Channel)
		s.mu.Unlock()
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
	log := s.log.Named("terminal").With("terminal", p.Channel)
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
		cwd = pty.FileURI(dir)
	}
	t := pty.NewTerminal(pty.TerminalConfig{
		URI: p.Channel, Creator: c.id(), Title: title, Cwd: cwd,
		Cols: cols, Rows: rows, Claim: claim,
		ScrollbackBytes: cfg.ScrollbackBytes,
		Journal:         s.journal,
		Log:             log,
		Catalogue:       s.root.update,
		Connected:       s.clientConnected,
	}, proc)
	s.mu.Lock()
	entry.t = t // published under s.mu: lookups skip terminals still starting
	closing := s.closing
	if closing {
		delete(s.terminals, p.Channel)
	}
	s.mu.Unlock()
	if closing {
		_ = proc.Kill(pty.KillGrace)
		return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
	}
	log.Info("terminal created", "client", c.id(), "pid", proc.Pid(), "command", peerText(fmt.Sprintf("%q", p.Command)))
	t.Start()
	return nil, nil
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
func (c *conn) disposeTerminal(params json.RawMessage) (any, *rpc.Error) {
	var p rpc.ChannelParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	s := c.s
	s.mu.Lock()
	e := s.terminals[p.Channel]
	if e == nil || e.t == nil {
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeNotFound, "no such terminal: %s", p.Channel)
	}
	delete(s.terminals, p.Channel)
	s.mu.Unlock()
	t := e.t
	s.log.Named("terminal").Info("terminal disposed", "terminal", p.Channel, "client", c.id())
	t.Dispose(c.id())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t.Kill() // the reader logs terminal/exited before it is done
		t.WaitFlushed(disposeFlushWait)
		s.unsubscribeChannel(p.Channel) // an ordinary one's queue (terminal/exited last) still goes out
		s.journal.Drop(p.Channel)
	}()
	return nil, nil
}

// disposeFlushWait bounds how long a disposed terminal's subscriptions
// are kept for their terminal/exited to be sent: a client attached to a
// terminal another one disposes (sidecar kill) learns that it ended, and
// exits, instead of waiting for output forever. A windowed viewer that
// does not read gets no longer.
const disposeFlushWait = 2 * time.Second

// terminal returns the running (or exited) terminal uri; one whose process
// is still starting is not visible yet.
func (s *Server) terminal(uri string) *pty.Terminal {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.terminals[uri]; e != nil {
		return e.t
	}
	return nil
}

// terminalList returns every started terminal.
func (s *Server) terminalList() []*pty.Terminal {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]*pty.Terminal, 0, len(s.terminals))
	for _, e := range s.terminals {
		if e.t != nil {
			list = append(list, e.t)
		}
	}
	return list
}

// passOnClaims hands each running terminal clientID held, now that it has
// no connection left, to a client still subscribed to it (windowed, so it
// paces the PTY), as tmux keeps a session going for the clients left: a
// viewer sharing the terminal becomes its holder instead of skipping
// output for good. A terminal nobody else watches keeps its claim for
// whoever reattaches (terminal/claimed then takes it over).
func (s *Server) passOnClaims(clientID string) {
	for _, t := range s.terminalList() {
		t.HolderGone(clientID)
	}
}
