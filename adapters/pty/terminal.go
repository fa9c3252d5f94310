package pty

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Terminal bounds.
const (
	// ReadChunk is the most PTY output read at once: one terminal/data
	// action. Small enough that a window (256 KiB by default) holds many,
	// so pacing is fine-grained.
	ReadChunk = 4096
	// readAhead bounds the output read from the PTY that the pacing
	// subscription has not pulled yet (UTF-8 bytes of notification text):
	// enough to keep the pipeline busy, small against the window so Ctrl-C
	// still finds little in flight.
	readAhead = 4 * ReadChunk
	// MaxInputQueueBytes bounds input accepted but not yet written to the
	// PTY (a program that does not read its input), in UTF-8 bytes of
	// decoded input. Windowed subscriptions are bounded by their window
	// anyway; this bounds ordinary ones. Beyond it terminal/input is
	// rejected.
	MaxInputQueueBytes = 1 << 20
	// FirstSubscribeLease is how long a new terminal waits for its claim
	// holder to subscribe before it reads output with nobody pacing it: a
	// `sidecar run` client subscribes right after createTerminal and so
	// sees every byte; a terminal nobody watches still runs.
	FirstSubscribeLease = 10 * time.Second
	// MaxTerminalID bounds the id part of a terminal URI (bytes).
	MaxTerminalID = 256
	// MaxTermSize bounds cols and rows.
	MaxTermSize = 4096
	// MaxEncodeBuf bounds the envelope buffer a terminal keeps between
	// outputs (UTF-8 bytes): a ReadChunk of plain output needs a little
	// over ReadChunk, one of control characters (6 bytes each escaped) 6
	// times that; a rarer larger one gets a buffer of its own.
	MaxEncodeBuf = 8 * ReadChunk
	// KillGrace is how long a terminal's process group has after SIGHUP
	// and SIGTERM before SIGKILL.
	KillGrace = 2 * time.Second
)

// TerminalConfig is what a terminal channel needs from its host.
type TerminalConfig struct {
	// URI is the channel, ahp-terminal:/<id>; Creator the creating
	// client's clientId.
	URI, Creator string
	// Holder is the principal whose connection created the terminal: it
	// may share and kill it (share.go).
	Holder string
	// Title and Cwd (a file:// URI, or empty) start the state.
	Title, Cwd string
	Cols, Rows int
	Claim      rpc.Claim
	// ScrollbackBytes bounds the scrollback the snapshot holds: the
	// lines scrolled off the screen, in bytes of the VT text that draws
	// them (History).
	ScrollbackBytes int
	// Journal holds the terminal's actions.
	Journal *journal.Journal
	Log     hclog.Logger
	// Catalogue is told the terminal's root catalogue entry whenever it
	// changes, and with remove when the terminal is disposed. It runs
	// under the terminal's lock and must not call back into it.
	Catalogue func(info rpc.TerminalInfo, remove bool)
	// Connected reports whether clientID has an open connection (a claim
	// whose holder has none can be taken over).
	Connected func(clientID string) bool
	// Guard logs and words the refusals of actions (nil: not logged).
	Guard *adapters.Guard

	// Recorder, when set, records the session (Recordings): the
	// terminal closes it when its program has exited.
	Recorder *Recorder
	// Audit, when set, records an audit event of the terminal's
	// (adapters.Env.Record): each attach.
	Audit func(c adapters.Caller, action string, attrs map[string]any)
}

// Terminal is one ahp-terminal:/<id> channel with its PTY process
// (DESIGN.md §5): a reader that reads the PTY only while the claim
// holder's subscription can take more, so the program blocks on write
// and Ctrl-C stays instant; a writer that writes terminal/input in order
// and releases each action once written; a scrollback for snapshots; and
// viewers that read the journal at their own pace (adapters.LogSource).
type Terminal struct {
	adapters.Base
	cfg  TerminalConfig
	proc *Process
	j    *journal.Journal
	log  hclog.Logger
	wg   sync.WaitGroup

	killed     chan struct{}
	killOnce   sync.Once
	readerDone chan struct{}
	firstSub   chan struct{}
	firstOnce  sync.Once
	pacerMoved chan struct{} // 1-slot: the pacing subscription changed
	inputWake  chan struct{} // 1-slot

	mu         sync.Mutex
	title      string
	cwd        string
	cols       int
	rows       int
	claim      rpc.Claim
	exitCode   *int
	exited     bool
	disposed   bool   // removed from the catalogue: never re-listed
	disposedBy string // the clientId whose dispose ended it
	// signal and signalNumber name the signal that killed the program.
	signal       string
	signalNumber int
	// feed runs the VT emulator every output goes through, for
	// snapshots, off the reader's path (its own lock and goroutine).
	feed *Feed
	// snaps builds the windowed subscribers' snapshots off their
	// writers and shares them (adapters.Snapshots).
	snaps *adapters.Snapshots
	// subs holds every subscription, with its LogSource when windowed.
	subs     map[adapters.Subscriber]*adapters.LogSource
	attached []string // the sorted clientIds of live subs, for the catalogue
	// shares are who the terminal is shared with (share.go); attachedBy
	// the live subs' clientIds, principals and access, for the catalogue.
	shares     []rpc.TerminalShare
	attachedBy []rpc.AttachedClient
	away       []string // those of subs whose connection was lost (parked)
	pacer      adapters.Subscriber
	input      [][]byte
	releases   []func()
	inBytes    int
	// encodeBuf is output's scratch for a terminal/data envelope (under
	// mu), at most MaxEncodeBuf kept between outputs.
	encodeBuf []byte
}

// NewTerminal returns the channel of proc, a program just started. Call
// Start once the host can find it by URI.
func NewTerminal(cfg TerminalConfig, proc *Process) *Terminal {
	t := &Terminal{
		cfg: cfg, proc: proc, j: cfg.Journal,
		log:        cfg.Log,
		killed:     make(chan struct{}),
		readerDone: make(chan struct{}),
		firstSub:   make(chan struct{}),
		pacerMoved: make(chan struct{}, 1),
		inputWake:  make(chan struct{}, 1),
		title:      cfg.Title, cwd: cfg.Cwd,
		cols: cfg.Cols, rows: cfg.Rows, claim: cfg.Claim,
		subs: map[adapters.Subscriber]*adapters.LogSource{},
	}
	t.feed = NewFeed(NewScreen(cfg.Cols, cfg.Rows, cfg.ScrollbackBytes), cfg.Cols, cfg.Rows, t.emulatorFault)
	t.snaps = adapters.NewSnapshots(t, t.j, nil)
	return t
}

// Start lists the terminal in the catalogue (unless disposed already)
// and starts its reader and writer.
func (t *Terminal) Start() {
	t.mu.Lock()
	if !t.disposed {
		t.cfg.Catalogue(t.infoLocked(), false)
	}
	t.mu.Unlock()
	t.feed.Start()
	t.wg.Add(2)
	go t.readLoop()
	go t.writeLoop()
}

// URI implements adapters.Channel.
func (t *Terminal) URI() string { return t.cfg.URI }

// Creator returns the creating client's clientId.
func (t *Terminal) Creator() string { return t.cfg.Creator }

// Pid returns the program's process id.
func (t *Terminal) Pid() int { return t.proc.Pid() }

// Traits implements adapters.Channel: journaled.
func (t *Terminal) Traits() adapters.Traits {
	return adapters.Traits{Delivery: adapters.Journaled, Label: "terminal"}
}

func (t *Terminal) stateLocked() rpc.TerminalState {
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
	st.Content = t.contentLocked()
	return st
}

// contentLocked is the snapshot's content (docs/protocol.md): raw VT
// text that redraws the terminal on a fresh terminal of its size. Its
// last part redraws the screen (Screen.Redraw without the history); the
// scrollback's lines, when there are any, come in a part before it, so
// that a client that only wants the screen (one that fell behind) can
// leave them out, and one that writes every part gets both. A terminal
// that shows nothing yet has no content.
//
// The emulator is brought to the output so far (Feed.Screen): under the
// terminal's lock no output comes in, so the content is that of the
// journal up to the snapshot's fromSeq.
func (t *Terminal) contentLocked() []rpc.ContentPart {
	parts := []rpc.ContentPart{}
	t.feed.Screen(func(s *Screen) {
		if s.Pristine() {
			return
		}
		if h := s.History(); h.Len() > 0 {
			parts = append(parts, rpc.ContentPart{Type: "unclassified", Value: string(h.AppendTo(make([]byte, 0, h.Len())))})
		}
		parts = append(parts, rpc.ContentPart{Type: "unclassified", Value: string(s.Redraw(nil, false))})
	})
	return parts
}

// Snapshot implements adapters.Channel. The emulator first catches up
// without the terminal's lock (a rebuild, if it fell behind, does not
// hold up input or output), then takes what came since under it.
func (t *Terminal) Snapshot(fn func(rpc.Snapshot)) {
	t.feed.CatchUp()
	t.mu.Lock()
	defer t.mu.Unlock()
	state, _ := rpc.Marshal(t.stateLocked())
	fn(rpc.Snapshot{Resource: t.cfg.URI, State: state, FromSeq: t.j.Seq()})
}

// Recover implements adapters.Channel: a replay while the journal still
// holds every action after lastSeq, else a snapshot.
func (t *Terminal) Recover(lastSeq uint64) adapters.Recovery {
	return adapters.RecoverLog(t, t.j, lastSeq)
}

// Resume implements adapters.Channel.
func (t *Terminal) Resume(sub adapters.Subscriber, lastSeq uint64) delivery.Source {
	src := adapters.ResumeLog(t, t.j, lastSeq).Shared(t.snaps).For(sub.ClientID())
	t.mu.Lock()
	t.subs[sub] = src
	t.mu.Unlock()
	return src
}

func (t *Terminal) infoLocked() rpc.TerminalInfo {
	return rpc.TerminalInfo{Resource: t.cfg.URI, Title: t.title, Claim: t.claim, ExitCode: t.exitCode, Signal: t.signal, Attached: t.attached, Away: t.away,
		Holder: t.cfg.Holder, Shares: slices.Clone(t.shares), AttachedBy: t.attachedBy}
}

func (t *Terminal) listLocked() {
	if !t.disposed {
		t.cfg.Catalogue(t.infoLocked(), false)
	}
}

// appendLocked logs a host-originated action of this terminal.
func (t *Terminal) appendLocked(action any) {
	if _, err := t.j.Append(t.cfg.URI, adapters.HostAction(t.cfg.URI, action)); err != nil {
		t.log.Error("cannot encode action", "error", err)
	}
}

// echoLocked logs a client action with its origin: applied, for every
// subscriber; rejected (rejection set), for its sender only.
func (t *Terminal) echoLocked(action json.RawMessage, origin *rpc.Origin, rejection string, code int64) {
	to := "" // an applied action: every subscriber
	if rejection != "" {
		to = origin.ClientID // a rejection: its sender only
	}
	_, _ = t.j.AppendTo(t.cfg.URI, to, func(seq uint64) ([]byte, error) {
		return rpc.Notification(rpc.MethodAction, rpc.ActionEnvelope{Channel: t.cfg.URI, Action: action, ServerSeq: seq, Origin: origin, RejectionReason: rejection, RejectionCode: code})
	})
}

// Dispose removes the terminal from the catalogue for good (the program
// is killed by Kill); by is the disposing client's clientId, reported in
// terminal/exited (our disposedBy extension).
func (t *Terminal) Dispose(by string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.disposed, t.disposedBy = true, by
	t.cfg.Catalogue(t.infoLocked(), true)
}

// Kill ends the process group and waits for the reader (which logs
// terminal/exited) and the writer, then ends the emulator's goroutines.
// The emulator runs until then, not only until the program exits: an
// interrupted flood's last output is emulated (a rebuild) once it is
// calm, not on the way to terminal/exited, and an exited terminal's
// snapshot shows its last screen.
func (t *Terminal) Kill() {
	t.killOnce.Do(func() { close(t.killed) })
	_ = t.proc.Kill(KillGrace)
	<-t.readerDone
	t.wg.Wait()
	t.snaps.Close()
	t.feed.Close()
}

// WaitFlushed waits until every windowed subscription has pulled all of
// the terminal's journal (terminal/exited last, after Kill) or wait has
// passed, so that a client attached to a terminal another one disposes
// learns that it ended. An ordinary subscription's queue goes out anyway.
func (t *Terminal) WaitFlushed(wait time.Duration) {
	t.mu.Lock()
	srcs := make([]*adapters.LogSource, 0, len(t.subs))
	for _, src := range t.subs {
		if src != nil {
			srcs = append(srcs, src)
		}
	}
	t.mu.Unlock()
	done := make(chan struct{})
	timer := time.AfterFunc(wait, func() { close(done) })
	defer timer.Stop()
	for _, src := range srcs {
		src.WaitPulled(done)
	}
}

// Source implements adapters.Channel: the journal, read by cursor.
func (t *Terminal) Source(sub adapters.Subscriber) delivery.Source {
	src := adapters.NewLogSource(t, t.j).Shared(t.snaps).For(sub.ClientID())
	t.mu.Lock()
	t.subs[sub] = src
	t.mu.Unlock()
	return src
}

// Subscribe implements adapters.Channel: the claim holder's first
// windowed subscription paces the PTY.
func (t *Terminal) Subscribe(sub adapters.Subscriber) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.subs[sub]; !ok {
		t.subs[sub] = nil
	}
	t.attachedChangedLocked()
	holder := t.claim.Kind == "client" && sub.ClientID() == t.claim.ClientID
	if !holder {
		return
	}
	t.firstOnce.Do(func() { close(t.firstSub) })
	if sub.Stream() != nil && t.pacer == nil {
		t.pacer = sub
		t.signalPacer()
	}
}

// Unsubscribe implements adapters.Channel.
func (t *Terminal) Unsubscribe(sub adapters.Subscriber) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if src := t.subs[sub]; src != nil {
		src.Stop()
	}
	delete(t.subs, sub)
	t.attachedChangedLocked()
	if t.pacer == sub {
		t.pacer = nil
		t.choosePacerLocked()
	}
}

// attachedChangedLocked recomputes the attached clientIds (and the away
// ones: subscriptions whose connection was lost) and lists the terminal
// again when they changed.
func (t *Terminal) attachedChangedLocked() {
	var ids, away []string
	for s := range t.subs {
		switch id := s.ClientID(); {
		case id == "":
		case s.Closing():
			away = append(away, id)
		default:
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	slices.Sort(away)
	away = slices.Compact(away)
	byChanged := t.attachedByLocked()
	if slices.Equal(ids, t.attached) && slices.Equal(away, t.away) && !byChanged {
		return
	}
	t.attached, t.away = ids, away
	t.listLocked()
}

// Refresh lists the terminal again if who is attached changed without a
// subscribe or an unsubscribe: a subscription whose connection was lost
// and is kept for a reconnect is away now.
func (t *Terminal) Refresh() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.attachedChangedLocked()
}

// HolderGone passes the claim of the terminal, if clientID held it, to
// another client's windowed subscription, if there is one, with a
// host-originated terminal/claimed and a catalogue update. The least
// clientId is chosen, so the choice is stable.
func (t *Terminal) HolderGone(clientID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.claim.Kind != "client" || t.claim.ClientID != clientID || t.exited || t.disposed {
		return
	}
	var next string
	for s := range t.subs {
		// A parked subscription (its client lost, within its grace) is
		// not a place to pass the claim to: its connection is gone.
		if id := s.ClientID(); s.Stream() != nil && !s.Closing() && id != "" && id != clientID && (next == "" || id < next) {
			next = id // the least id: the same choice whatever the map's order
		}
	}
	if next == "" {
		return
	}
	t.claim = rpc.Claim{Kind: "client", ClientID: next}
	t.appendLocked(rpc.TerminalClaimedAction{Type: rpc.ActionTerminalClaimed, Claim: t.claim})
	t.choosePacerLocked()
	t.cfg.Catalogue(t.infoLocked(), false)
	t.log.Info("terminal claim passed on", "from", clientID, "to", next)
}

// Pacer returns the clientId whose subscription paces the PTY, "" when
// none does.
func (t *Terminal) Pacer() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pacer == nil {
		return ""
	}
	return t.pacer.ClientID()
}

// FirstSubscribed reports whether the terminal stopped waiting for its
// claim holder's first subscription (FirstSubscribeLease).
func (t *Terminal) FirstSubscribed() bool {
	select {
	case <-t.firstSub:
		return true
	default:
		return false
	}
}

// choosePacerLocked makes the claim holder's windowed subscription, if
// any, the pacer; a holder that subscribed also ends the wait for the
// first subscription (a claim taken over before anyone paced).
func (t *Terminal) choosePacerLocked() {
	t.pacer = nil
	for s := range t.subs {
		if t.claim.Kind == "client" && s.ClientID() == t.claim.ClientID {
			t.firstOnce.Do(func() { close(t.firstSub) })
			if s.Stream() != nil {
				t.pacer = s
				break
			}
		}
	}
	t.signalPacer()
}

func (t *Terminal) signalPacer() {
	select {
	case t.pacerMoved <- struct{}{}:
	default:
	}
}

// readLoop reads the PTY only while the claim holder's subscription can
// take more (DESIGN.md §5): when it cannot, the program blocks on write
// and Ctrl-C stays instant. With no pacing subscription it reads freely and
// the scrollback and journal keep the newest output.
func (t *Terminal) readLoop() {
	defer t.wg.Done()
	defer close(t.readerDone)
	lease := time.NewTimer(FirstSubscribeLease)
	select {
	case <-t.firstSub:
	case <-lease.C:
	case <-t.killed:
	}
	lease.Stop()
	var dec OutputDecoder
	buf := make([]byte, ReadChunk)
	for t.waitReadable() {
		n, err := t.proc.Read(buf)
		if n > 0 {
			t.record(t.output(dec.FeedView(buf[:n])))
		}
		if err != nil {
			break
		}
	}
	t.record(t.output(dec.FlushView()))
	if t.cfg.Recorder != nil {
		defer t.cfg.Recorder.Close()
	}
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
	action := rpc.TerminalExitedAction{Type: rpc.ActionTerminalExited, DisposedBy: t.disposedBy}
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
	t.listLocked()
	t.mu.Unlock()
	t.log.Info("terminal exited", "exit_code", code, "known", ok)
}

// waitReadable blocks until the PTY may be read; false once killed. The
// pacer's stream decides (delivery.Stream.WaitRoom: room left after the
// path cap, beyond the output its LogSource has not pulled, which must be
// under readAhead). Without a pacer, or once its stream is removed, the
// PTY is read freely.
func (t *Terminal) waitReadable() bool {
	for {
		t.mu.Lock()
		p := t.pacer
		var src *adapters.LogSource
		if p != nil {
			src = t.subs[p]
		}
		t.mu.Unlock()
		var st *delivery.Stream
		if p != nil {
			st = p.Stream()
		}
		if st != nil && src != nil {
			held := func() delivery.UTF16Bytes { return src.Held(readAhead) }
			room, removed := st.WaitRoom(held, 2*readAhead, t.pacerMoved, t.killed)
			if room == 0 && !removed {
				select {
				case <-t.killed:
					return false
				default:
					continue // the pacer moved: ask its stream
				}
			}
		}
		select {
		case <-t.killed:
			return false
		default:
			return true
		}
	}
}

// record records text, output the terminal sent, in its recording.
func (t *Terminal) record(text []byte) {
	if t.cfg.Recorder != nil {
		t.cfg.Recorder.Output(text)
	}
}

// output applies decoded output: terminal/data, title and cwd changes.
// out.Text is the decoder's buffer: the scrollback and the journal keep
// copies, nothing keeps out.Text itself. It returns out.Text.
func (t *Terminal) output(out View) []byte {
	if len(out.Text) == 0 && len(out.Titles) == 0 && out.Cwd == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(out.Text) > 0 {
		t.feed.Write(out.Text) // a copy: the emulator is not waited for
		// The envelope is encoded into encodeBuf, which AppendSeq copies
		// into the entry's own text: the buffer is free again on return.
		t.encodeBuf = AppendDataHead(t.encodeBuf[:0], t.cfg.URI, out.Text)
		t.j.AppendSeq(t.cfg.URI, t.encodeBuf, rpc.ActionEnvelopeEnd)
		if cap(t.encodeBuf) > MaxEncodeBuf {
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
			if cwd := FileURI(u.Path); cwd != t.cwd {
				t.cwd = cwd
				t.appendLocked(rpc.TerminalCwdAction{Type: rpc.ActionTerminalCwd, Cwd: cwd})
			}
		}
	}
	if changed {
		t.listLocked()
	}
	return out.Text
}

// emulatorFault logs a panic of the VT emulator (Screen.Write), the n-th:
// the first few, then one in a thousand. It runs on the Feed's goroutine
// or a snapshot's, not under the terminal's lock necessarily.
func (t *Terminal) emulatorFault(err error, n int) {
	if n <= 3 || n%1000 == 0 {
		t.log.Warn("terminal emulator fault", "error", err, "faults", n)
	}
}

// AppendDataHead appends the terminal/data action envelope carrying data,
// up to its serverSeq: with the seq and rpc.ActionEnvelopeEnd after it
// (journal.AppendSeq) it is the text HostAction would give for the
// action. The hot path: built by appending, without reflection,
// re-validation or allocation (dst has room after the first few).
func AppendDataHead(dst []byte, channel string, data []byte) []byte {
	dst = rpc.AppendActionOpen(dst, channel)
	dst = append(dst, `{"type":"terminal/data","data":`...)
	dst = delivery.AppendJSONBytes(dst, data)
	dst = append(dst, '}')
	return append(dst, rpc.ActionSeqMember...)
}

// FileURI turns an absolute path into a file:// URI.
func FileURI(path string) string {
	return (&url.URL{Scheme: "file", Path: path}).String()
}

// Receive implements adapters.Channel: dispatchAction, applied
// write-ahead (ahp.md §3, §5): accepted actions are echoed to every
// subscriber with their origin, rejected ones with rejectionReason.
func (t *Terminal) Receive(m adapters.Message) {
	if m.Header.Method != rpc.MethodDispatchAction {
		m.Release()
		return
	}
	var p rpc.DispatchActionParams
	if e := rpc.DecodeParams(m.Header.Params, &p); e != nil {
		t.log.Warn("bad dispatchAction", "client", m.ClientID, "error", e.Message)
		m.Release()
		return
	}
	var a rpc.Action
	if err := json.Unmarshal(p.Action, &a); err != nil || a.Type == "" {
		t.log.Warn("bad dispatchAction: action has no type", "client", m.ClientID)
		m.Release()
		return
	}
	t.dispatch(m.Identity, &rpc.Origin{ClientID: m.ClientID, ClientSeq: p.ClientSeq}, p.Action, a.Type, m.Release)
}

// dispatch applies a client-dispatched action of id. release is called
// once the action's bytes are released (input: once written). An action
// that writes to the terminal (input, title, clear, resize, claim) needs
// its permission and write access (share.go); a refusal is echoed with
// rejectionCode -32009 and logged by the guard.
func (t *Terminal) dispatch(id auth.Identity, origin *rpc.Origin, raw json.RawMessage, typ string, release func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	reject := func(reason string) {
		t.echoLocked(raw, origin, reason, 0)
		release()
	}
	perm := auth.TerminalInput
	switch typ {
	case rpc.ActionTerminalResized:
		perm = auth.TerminalResize
	case rpc.ActionTerminalClaimed:
		perm = auth.TerminalClaim
	}
	switch typ {
	case rpc.ActionTerminalInput, rpc.ActionTerminalResized, rpc.ActionTerminalClaimed, rpc.ActionTerminalTitle, rpc.ActionTerminalCleared:
		if d := t.writeDeniedLocked(id, perm); d != nil {
			e := t.cfg.Guard.Refuse(d)
			t.echoLocked(raw, origin, e.Message, e.Code)
			release()
			return
		}
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
		if t.inBytes+len(*a.Data) > MaxInputQueueBytes {
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
		t.echoLocked(raw, origin, "", 0)
	case rpc.ActionTerminalResized:
		var a rpc.TerminalResizedAction
		if json.Unmarshal(raw, &a) != nil || a.Cols < 1 || a.Rows < 1 || a.Cols > MaxTermSize || a.Rows > MaxTermSize {
			reject("terminal/resized needs cols and rows between 1 and 4096")
			return
		}
		// The holder's window sets the size; a client that only shares
		// the terminal never resizes it under the holder (it takes the
		// claim over first).
		if t.claim.Kind == "client" && t.claim.ClientID != origin.ClientID {
			reject("not claim holder")
			return
		}
		if !t.exited {
			if err := t.proc.Resize(uint16(a.Cols), uint16(a.Rows)); err != nil {
				t.log.Warn("resize failed", "error", err)
			}
		}
		t.cols, t.rows = a.Cols, a.Rows
		t.feed.Resize(a.Cols, a.Rows)
		if t.cfg.Recorder != nil {
			t.cfg.Recorder.Resize(a.Cols, a.Rows)
		}
		t.echoLocked(raw, origin, "", 0)
		release()
	case rpc.ActionTerminalTitle:
		var a rpc.TerminalTitleAction
		if json.Unmarshal(raw, &a) != nil {
			reject(`terminal/titleChanged needs a string "title"`)
			return
		}
		if len(a.Title) > rpc.MaxNameBytes {
			reject(fmt.Sprintf("terminal/titleChanged title must be at most %d bytes (got %d)", rpc.MaxNameBytes, len(a.Title)))
			return
		}
		t.title = a.Title
		t.echoLocked(raw, origin, "", 0)
		t.listLocked()
		release()
	case rpc.ActionTerminalCleared:
		t.feed.ClearHistory()
		t.echoLocked(raw, origin, "", 0)
		release()
	case rpc.ActionTerminalClaimed:
		var a rpc.TerminalClaimedAction
		if json.Unmarshal(raw, &a) != nil || (a.Claim.Kind != "client" && a.Claim.Kind != "session") {
			reject(`terminal/claimed needs a claim of kind "client" or "session"`)
			return
		}
		if a.Claim.Kind == "client" {
			if e := rpc.CheckClientID("claim.clientId", a.Claim.ClientID); e != nil {
				reject("terminal/claimed: " + strings.TrimPrefix(e.Message, "invalid params: "))
				return
			}
		}
		// AHP: the host SHOULD reject a claim from a client that does
		// not hold it. Ours takes two exceptions, both for a client
		// claiming the terminal for itself, pacing included: a holder
		// with no open connection has gone (detached, or its laptop
		// slept), and whoever reattaches takes the terminal over; and a
		// client whose user asked to take it over (our takeOver
		// extension: the page's Take over, attach's ~t) takes it from a
		// connected holder, which then shares it.
		if t.claim.Kind == "client" && t.claim.ClientID != origin.ClientID {
			self := a.Claim.Kind == "client" && a.Claim.ClientID == origin.ClientID
			connected := t.cfg.Connected(t.claim.ClientID)
			if !self || (connected && !a.TakeOver) {
				reject("not claim holder")
				return
			}
			t.log.Info("terminal claim taken over", "from", t.claim.ClientID, "to", origin.ClientID, "holderConnected", connected)
		}
		t.claim = a.Claim
		t.echoLocked(raw, origin, "", 0)
		t.choosePacerLocked()
		t.listLocked()
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
func (t *Terminal) writeLoop() {
	defer t.wg.Done()
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
			if t.cfg.Recorder != nil {
				t.cfg.Recorder.Input(data)
			}
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

func (t *Terminal) dropInput() {
	t.mu.Lock()
	rels := t.releases
	t.input, t.releases, t.inBytes = nil, nil, 0
	t.mu.Unlock()
	for _, r := range rels {
		r()
	}
}

// Attached implements adapters.Attachable: the audit event
// terminal.attach, saying how (windowed or ordinary delivery; holder
// when the caller holds the claim).
func (t *Terminal) Attached(c adapters.Caller, windowed bool) {
	if t.cfg.Audit == nil {
		return
	}
	t.mu.Lock()
	holder := t.claim.Kind == "client" && t.claim.ClientID == c.ClientID
	t.mu.Unlock()
	t.cfg.Audit(c, audit.ActionTerminalAttach, map[string]any{"terminal": t.cfg.URI, "client.id": c.ClientID, "windowed": windowed, "holder": holder})
}

var (
	_ adapters.Channel    = (*Terminal)(nil)
	_ adapters.Attachable = (*Terminal)(nil)
)
