package host

import (
	"encoding/json"
	"errors"
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
	"golang.org/x/sys/unix"

	"github.com/sidecar-dev/sidecar/adapters/pty"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Terminal bounds.
const (
	// readChunk is the most PTY output read at once: one terminal/data
	// action. Small enough that a window (256 KiB by default) holds many,
	// so pacing is fine-grained.
	readChunk = 4096
	// readAhead bounds the output read from the PTY that the pacing
	// subscription has not pulled yet (UTF-8 bytes of notification text):
	// enough to keep the pipeline busy, small against the window so Ctrl-C
	// still finds little in flight.
	readAhead = 4 * readChunk
	// maxInputQueueBytes bounds input accepted but not yet written to the
	// PTY (a program that does not read its input). Windowed subscriptions
	// are bounded by their window anyway; this bounds ordinary ones.
	// Beyond it terminal/input is rejected.
	maxInputQueueBytes = 1 << 20
	// firstSubscribeLease is how long a new terminal waits for its claim
	// holder to subscribe before it reads output with nobody pacing it: a
	// `sidecar run` client subscribes right after createTerminal and so
	// sees every byte; a terminal nobody watches still runs.
	firstSubscribeLease = 10 * time.Second
	// maxTerminalID bounds the id part of a terminal URI.
	maxTerminalID = 256
	// maxTermSize bounds cols and rows.
	maxTermSize = 4096
	// maxEncodeBuf bounds the envelope buffer a terminal keeps between
	// outputs: a readChunk of plain output needs a little over readChunk,
	// one of control characters (6 bytes each escaped) 6 times that; a
	// rarer larger one gets a buffer of its own.
	maxEncodeBuf = 8 * readChunk
)

// terminal is one ahp-terminal:/<id> channel with its PTY process.
type terminal struct {
	s       *Server
	id      string // the channel URI
	creator string // clientId of the creating client
	proc    *pty.Process
	log     hclog.Logger

	killed     chan struct{}
	killOnce   sync.Once
	readerDone chan struct{}
	firstSub   chan struct{}
	firstOnce  sync.Once
	pacerMoved chan struct{} // 1-slot: the pacing subscription changed
	inputWake  chan struct{} // 1-slot

	mu       sync.Mutex
	title    string
	cwd      string
	cols     int
	rows     int
	claim    rpc.Claim
	exitCode *int
	exited   bool
	disposed bool // removed from the catalogue: never re-listed
	// signal and signalNumber name the signal that killed the program.
	signal       string
	signalNumber int
	scroll       *pty.Scrollback
	subs         map[*subscription]struct{}
	pacer        *subscription
	input        [][]byte
	releases     []func()
	inBytes      int
	// encodeBuf is output's scratch for a terminal/data envelope (under
	// mu), at most maxEncodeBuf kept between outputs.
	encodeBuf []byte
}

func (t *terminal) uri() string { return t.id }

func (t *terminal) stateLocked() rpc.TerminalState {
	st := rpc.TerminalState{
		Title:     t.title,
		Cwd:       t.cwd,
		Cols:      t.cols,
		Rows:      t.rows,
		Content:   []rpc.ContentPart{},
		ExitCode:  t.exitCode,
		Lifecycle: rpc.Lifecycle{Status: "running"},
		Claim:     t.claim,

		Signal:       t.signal,
		SignalNumber: t.signalNumber,
	}
	if t.exited {
		st.Lifecycle.Status = "exited"
	}
	if t.scroll.Len() > 0 {
		st.Content = append(st.Content, rpc.ContentPart{Type: "unclassified", Value: t.scroll.String()})
	}
	return st
}

func (t *terminal) lockedSnapshot(fn func(rpc.Snapshot)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	state, _ := rpc.Marshal(t.stateLocked())
	fn(rpc.Snapshot{Resource: t.id, State: state, FromSeq: t.s.journal.Seq()})
}

func (t *terminal) infoLocked() rpc.TerminalInfo {
	return rpc.TerminalInfo{Resource: t.id, Title: t.title, Claim: t.claim, ExitCode: t.exitCode, Signal: t.signal}
}

// appendLocked logs a host-originated action of this terminal.
func (t *terminal) appendLocked(action any) {
	if _, err := t.s.journal.Append(t.id, hostAction(t.id, action)); err != nil {
		t.log.Error("cannot encode action", "error", err)
	}
}

// echoLocked logs an accepted client action with its origin.
func (t *terminal) echoLocked(action json.RawMessage, origin *rpc.Origin, rejection string) {
	_, _ = t.s.journal.Append(t.id, func(seq uint64) ([]byte, error) {
		return rpc.Notification(rpc.MethodAction, rpc.ActionEnvelope{Channel: t.id, Action: action, ServerSeq: seq, Origin: origin, RejectionReason: rejection})
	})
}

func (c *conn) createTerminal(params json.RawMessage) (any, *rpc.Error) {
	var p rpc.CreateTerminalParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	id, ok := strings.CutPrefix(p.Channel, rpc.TerminalScheme+"/")
	if !ok || id == "" || len(id) > maxTerminalID || strings.ContainsAny(id, " \t\r\n") {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "channel" must be ahp-terminal:/<id> (id of 1-%d characters without spaces)`, maxTerminalID)
	}
	cols, rows := p.Cols, p.Rows
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	if cols < 1 || rows < 1 || cols > maxTermSize || rows > maxTermSize {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "cols" and "rows" must be between 1 and %d`, maxTermSize)
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
	claim := rpc.Claim{Kind: "client", ClientID: c.id()}
	if p.Claim != nil {
		if p.Claim.Kind != "client" && p.Claim.Kind != "session" {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "claim.kind" must be "client" or "session"`)
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
	total, mine := 0, 0
	for _, t := range s.terminals {
		total++
		if t.creator == c.id() {
			mine++
		}
	}
	if total >= cfg.MaxTotal {
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodePermissionDenied, "terminal limit reached: %d terminals on this host (terminal.max_total); dispose one first", cfg.MaxTotal)
	}
	if mine >= cfg.MaxPerClient {
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodePermissionDenied, "terminal limit reached: %d terminals for this client (terminal.max_per_client); dispose one first", cfg.MaxPerClient)
	}
	t := &terminal{
		s: s, id: p.Channel, creator: c.id(),
		log:        s.log.Named("terminal").With("terminal", p.Channel),
		killed:     make(chan struct{}),
		readerDone: make(chan struct{}),
		firstSub:   make(chan struct{}),
		pacerMoved: make(chan struct{}, 1),
		inputWake:  make(chan struct{}, 1),
		cols:       cols, rows: rows, claim: claim,
		scroll: pty.NewScrollback(cfg.ScrollbackBytes),
		subs:   map[*subscription]struct{}{},
	}
	// Reserve the URI while the process starts (outside the lock).
	s.terminals[p.Channel] = t
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
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
			e.Data, _ = json.Marshal(rpc.StartErrorData{Kind: "commandNotFound"})
		case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC):
			e.Data, _ = json.Marshal(rpc.StartErrorData{Kind: "permissionDenied"})
		}
		return nil, e
	}
	if p.Echo != nil && !*p.Echo {
		if err := proc.SetEcho(false); err != nil {
			t.log.Warn("cannot turn echo off", "error", err)
		}
	}
	switch {
	case p.Name != "":
		t.title = p.Name
	case len(p.Command) > 0:
		t.title = filepath.Base(p.Command[0])
	default:
		t.title = filepath.Base(orDefault(cfg.Shell, "shell"))
	}
	if dir != "" {
		t.cwd = fileURI(dir)
	}
	s.mu.Lock()
	t.proc = proc // published under s.mu: lookups skip terminals still starting
	closing := s.closing
	s.mu.Unlock()
	if closing {
		_ = proc.Kill(killGrace)
		s.mu.Lock()
		delete(s.terminals, p.Channel)
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
	}
	t.log.Info("terminal created", "client", c.id(), "pid", proc.Pid(), "command", p.Command)
	t.mu.Lock()
	if !t.disposed { // a dispose from another connection may have come first
		s.root.update(t.infoLocked(), false)
	}
	t.mu.Unlock()
	s.wg.Add(2)
	go t.readLoop()
	go t.writeLoop()
	return nil, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (c *conn) disposeTerminal(params json.RawMessage) (any, *rpc.Error) {
	var p rpc.ChannelParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	s := c.s
	s.mu.Lock()
	t := s.terminals[p.Channel]
	if t == nil || t.proc == nil {
		s.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeNotFound, "no such terminal: %s", p.Channel)
	}
	delete(s.terminals, p.Channel)
	s.mu.Unlock()
	t.log.Info("terminal disposed", "client", c.id())
	t.mu.Lock()
	t.disposed = true
	s.root.update(t.infoLocked(), true)
	t.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t.kill() // the reader logs terminal/exited before it is done
		t.dropSubscriptions(disposeFlushWait)
		s.journal.Drop(t.id)
	}()
	return nil, nil
}

// disposeFlushWait bounds how long a disposed terminal's subscriptions
// are kept for their terminal/exited to be sent: a client attached to a
// terminal another one disposes (sidecar kill) learns that it ended, and
// exits, instead of waiting for output forever. A windowed viewer that
// does not read gets no longer.
const disposeFlushWait = 2 * time.Second

// dropSubscriptions ends every subscription to t, once each has sent all
// of t's log (terminal/exited last) or wait has passed.
func (t *terminal) dropSubscriptions(wait time.Duration) {
	t.mu.Lock()
	subs := make([]*subscription, 0, len(t.subs))
	for sub := range t.subs {
		subs = append(subs, sub)
	}
	t.mu.Unlock()
	deadline := time.Now().Add(wait)
	for _, sub := range subs {
		// Polled: the log source has no event for "caught up"; the
		// wait is bounded by deadline.
		for sub.src != nil && !sub.out.Removed() && !sub.src.lagBelow(1) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		sub.c.mu.Lock()
		if sub.c.subs[sub.channel] == sub {
			delete(sub.c.subs, sub.channel)
		}
		sub.c.mu.Unlock()
		sub.c.stopSubscription(sub) // an ordinary one's queue (terminal/exited last) still goes out
	}
}

// kill ends the process group and waits for the reader.
func (t *terminal) kill() {
	t.killOnce.Do(func() { close(t.killed) })
	t.s.mu.Lock()
	proc := t.proc
	t.s.mu.Unlock()
	if proc != nil {
		_ = proc.Kill(killGrace)
		<-t.readerDone
	}
}

// attach registers a subscription; the claim holder's first windowed one
// paces the PTY.
func (t *terminal) attach(sub *subscription) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.subs[sub] = struct{}{}
	holder := t.claim.Kind == "client" && sub.c.id() == t.claim.ClientID
	if !holder {
		return
	}
	t.firstOnce.Do(func() { close(t.firstSub) })
	if sub.windowed() && t.pacer == nil {
		t.pacer = sub
		t.signalPacer()
	}
}

// holderGone passes the claim of a terminal clientID held on to another
// client's windowed subscription, if there is one (Server.passOnClaims),
// with a host-originated terminal/claimed and root/terminalsChanged.
func (t *terminal) holderGone(clientID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.claim.Kind != "client" || t.claim.ClientID != clientID || t.exited || t.disposed {
		return
	}
	var next string
	for s := range t.subs {
		if id := s.c.id(); s.windowed() && id != "" && id != clientID && (next == "" || id < next) {
			next = id // the least id: the same choice whatever the map's order
		}
	}
	if next == "" {
		return
	}
	t.claim = rpc.Claim{Kind: "client", ClientID: next}
	t.appendLocked(rpc.TerminalClaimedAction{Type: rpc.ActionTerminalClaimed, Claim: t.claim})
	t.choosePacerLocked()
	t.s.root.update(t.infoLocked(), false)
	t.log.Info("terminal claim passed on", "from", clientID, "to", next)
}

func (t *terminal) detach(sub *subscription) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.subs, sub)
	if t.pacer == sub {
		t.pacer = nil
		t.choosePacerLocked()
	}
}

// choosePacerLocked makes the claim holder's windowed subscription, if
// any, the pacer; a holder that subscribed also ends the wait for the
// first subscription (a claim taken over before anyone paced).
func (t *terminal) choosePacerLocked() {
	t.pacer = nil
	for s := range t.subs {
		if t.claim.Kind == "client" && s.c.id() == t.claim.ClientID {
			t.firstOnce.Do(func() { close(t.firstSub) })
			if s.windowed() {
				t.pacer = s
				break
			}
		}
	}
	t.signalPacer()
}

func (t *terminal) signalPacer() {
	select {
	case t.pacerMoved <- struct{}{}:
	default:
	}
}

// readLoop reads the PTY only while the claim holder's subscription can
// take more (DESIGN.md §5): when it cannot, the program blocks on write
// and Ctrl-C stays instant. With no pacing subscription it reads freely and
// the scrollback and journal keep the newest output.
func (t *terminal) readLoop() {
	defer t.s.wg.Done()
	defer close(t.readerDone)
	lease := time.NewTimer(firstSubscribeLease)
	select {
	case <-t.firstSub:
	case <-lease.C:
	case <-t.killed:
	}
	lease.Stop()
	var dec pty.OutputDecoder
	buf := make([]byte, readChunk)
	for t.waitReadable() {
		n, err := t.proc.Read(buf)
		if n > 0 {
			t.output(dec.FeedView(buf[:n]))
		}
		if err != nil {
			break
		}
	}
	t.output(dec.FlushView())
	select {
	case <-t.proc.Done():
	case <-t.killed:
		<-t.proc.Done()
	}
	code, ok := t.proc.ExitCode()
	sig, signaled := t.proc.Signaled()
	t.mu.Lock()
	t.exited = true
	var exit *int
	action := rpc.TerminalExitedAction{Type: rpc.ActionTerminalExited}
	switch {
	case signaled:
		// AHP: no exitCode when killed without one; our extension names
		// the signal so a client can exit 128+n as a shell would.
		action.Signal = unix.SignalName(sig)
		action.SignalNumber = int(sig)
		t.signal, t.signalNumber = action.Signal, action.SignalNumber
	case ok:
		exit = &code
		action.ExitCode = exit
	}
	t.exitCode = exit
	t.appendLocked(action)
	if !t.disposed {
		t.s.root.update(t.infoLocked(), false)
	}
	t.mu.Unlock()
	t.log.Info("terminal exited", "exit_code", code, "known", ok)
}

// waitReadable blocks until the PTY may be read; false once killed.
func (t *terminal) waitReadable() bool {
	for {
		t.mu.Lock()
		p := t.pacer
		t.mu.Unlock()
		if p == nil || p.out.Removed() || (p.src.lagBelow(readAhead) && p.out.CanStart()) {
			select {
			case <-t.killed:
				return false
			default:
				return true
			}
		}
		select {
		case <-p.out.Changed():
		case <-t.pacerMoved:
		case <-t.killed:
			return false
		}
	}
}

// output applies decoded output: terminal/data, title and cwd changes.
// out.Text is the decoder's buffer: the scrollback and the journal keep
// copies, nothing keeps out.Text itself.
func (t *terminal) output(out pty.View) {
	if len(out.Text) == 0 && len(out.Titles) == 0 && out.Cwd == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(out.Text) > 0 {
		t.scroll.AppendBytes(out.Text)
		// The envelope is encoded into encodeBuf, which AppendSeq copies
		// into the entry's own text: the buffer is free again on return.
		t.encodeBuf = appendDataHead(t.encodeBuf[:0], t.id, out.Text)
		t.s.journal.AppendSeq(t.id, t.encodeBuf, rpc.ActionEnvelopeEnd)
		if cap(t.encodeBuf) > maxEncodeBuf {
			t.encodeBuf = nil
		}
	}
	changed := false
	for _, title := range out.Titles {
		if title != t.title {
			t.title = title
			changed = true
			t.appendLocked(rpc.TerminalTitleAction{Type: rpc.ActionTerminalTitle, Title: title})
		}
	}
	if out.Cwd != "" {
		if u, err := url.Parse(out.Cwd); err == nil && u.Scheme == "file" && u.Path != "" {
			if cwd := fileURI(u.Path); cwd != t.cwd {
				t.cwd = cwd
				t.appendLocked(rpc.TerminalCwdAction{Type: rpc.ActionTerminalCwd, Cwd: cwd})
			}
		}
	}
	if changed && !t.disposed {
		t.s.root.update(t.infoLocked(), false)
	}
}

// dispatch applies a client-dispatched action (ahp.md §5). release is
// called once the action's bytes are released (input: once written).
func (t *terminal) dispatch(origin *rpc.Origin, raw json.RawMessage, typ string, release func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	reject := func(reason string) {
		t.echoLocked(raw, origin, reason)
		release()
	}
	switch typ {
	case rpc.ActionTerminalInput:
		var a struct {
			Data *string `json:"data"`
		}
		if json.Unmarshal(raw, &a) != nil || a.Data == nil {
			reject(`terminal/input needs a string "data"`)
			return
		}
		if t.exited {
			reject("terminal has exited")
			return
		}
		if t.inBytes+len(*a.Data) > maxInputQueueBytes {
			reject("input queue full: the program is not reading its input")
			return
		}
		t.input = append(t.input, []byte(*a.Data))
		t.releases = append(t.releases, release)
		t.inBytes += len(*a.Data)
		select {
		case t.inputWake <- struct{}{}:
		default:
		}
		t.echoLocked(raw, origin, "")
	case rpc.ActionTerminalResized:
		var a rpc.TerminalResizedAction
		if json.Unmarshal(raw, &a) != nil || a.Cols < 1 || a.Rows < 1 || a.Cols > maxTermSize || a.Rows > maxTermSize {
			reject("terminal/resized needs cols and rows between 1 and 4096")
			return
		}
		if !t.exited {
			if err := t.proc.Resize(uint16(a.Cols), uint16(a.Rows)); err != nil {
				t.log.Warn("resize failed", "error", err)
			}
		}
		t.cols, t.rows = a.Cols, a.Rows
		t.echoLocked(raw, origin, "")
		release()
	case rpc.ActionTerminalTitle:
		var a rpc.TerminalTitleAction
		if json.Unmarshal(raw, &a) != nil {
			reject(`terminal/titleChanged needs a string "title"`)
			return
		}
		t.title = a.Title
		t.echoLocked(raw, origin, "")
		if !t.disposed {
			t.s.root.update(t.infoLocked(), false)
		}
		release()
	case rpc.ActionTerminalCleared:
		t.scroll.Clear()
		t.echoLocked(raw, origin, "")
		release()
	case rpc.ActionTerminalClaimed:
		var a rpc.TerminalClaimedAction
		if json.Unmarshal(raw, &a) != nil || (a.Claim.Kind != "client" && a.Claim.Kind != "session") {
			reject(`terminal/claimed needs a claim of kind "client" or "session"`)
			return
		}
		// AHP: the host SHOULD reject a claim from a client that does
		// not hold it. Ours takes one exception: a holder with no open
		// connection has gone (detached, or its laptop slept), and
		// whoever reattaches takes the terminal over for itself, pacing
		// included.
		if t.claim.Kind == "client" && t.claim.ClientID != origin.ClientID {
			self := a.Claim.Kind == "client" && a.Claim.ClientID == origin.ClientID
			if !self || t.s.clientConnected(t.claim.ClientID) {
				reject("not claim holder")
				return
			}
			t.log.Info("terminal claim taken over", "from", t.claim.ClientID, "to", origin.ClientID)
		}
		t.claim = a.Claim
		t.echoLocked(raw, origin, "")
		t.choosePacerLocked()
		if !t.disposed {
			t.s.root.update(t.infoLocked(), false)
		}
		release()
	case rpc.ActionTerminalData, rpc.ActionTerminalExited, rpc.ActionTerminalCwd,
		rpc.ActionTerminalCmdExec, rpc.ActionTerminalCmdFinish, rpc.ActionTerminalCmdDetect:
		reject(typ + " is a host-only action")
	default:
		reject("unknown action type " + typ)
	}
}

// writeLoop writes queued input to the PTY, one writer per terminal, and
// releases each action's bytes once written (then credit flows).
func (t *terminal) writeLoop() {
	defer t.s.wg.Done()
	for {
		select {
		case <-t.inputWake:
		case <-t.killed:
			t.dropInput()
			return
		case <-t.proc.Done():
			t.dropInput()
			return
		}
		for {
			t.mu.Lock()
			if len(t.input) == 0 {
				t.mu.Unlock()
				break
			}
			data, rel := t.input[0], t.releases[0]
			t.input[0], t.releases[0] = nil, nil
			t.input, t.releases = t.input[1:], t.releases[1:]
			t.mu.Unlock()
			_, err := t.proc.Write(data)
			t.mu.Lock()
			t.inBytes -= len(data)
			t.mu.Unlock()
			rel()
			if err != nil {
				t.log.Debug("input write failed", "error", err)
			}
		}
	}
}

func (t *terminal) dropInput() {
	t.mu.Lock()
	rels := t.releases
	t.input, t.releases, t.inBytes = nil, nil, 0
	t.mu.Unlock()
	for _, r := range rels {
		r()
	}
}
