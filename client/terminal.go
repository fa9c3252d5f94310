package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/sidecar-dev/sidecar/rpc"
)

// Terminal is a subscription to an ahp-terminal: channel, with its output,
// input and size.
type Terminal struct {
	c   *Conn
	sub *Subscription
	URI string

	// OnClaim, when set before Copy, is called from Copy with the host's
	// answer to Claim (nil once the terminal is ours, else an error with
	// the host's rejectionReason: an *rpc.Error with its rejectionCode
	// when it sent one, -32009 when the claim needs write access we lack),
	// and with nil when the host passes the
	// claim on to us (its holder left while we shared the terminal), or a
	// snapshot after a skip says we hold it; it may be told more than
	// once.
	OnClaim func(error)
	// OnClaimLost, when set before Copy, is called from Copy with the
	// clientId of another client the claim went to: an accepted
	// terminal/claimed naming it (a client took the terminal over, our
	// takeOver extension), or a snapshot after a skip that names it. It
	// is told whether or not we held the claim before.
	OnClaimLost func(holder string)
	// OnDenied, when set before Copy, is called from Copy with the host's
	// rejectionReason when it refuses this client's input, resize, title
	// or clear with -32009 (docs/protocol.md "Roles and sharing": the
	// terminal is shared with us read-only, or our role is viewer). It is
	// called for each refusal; the caller says it once.
	OnDenied    func(reason string)
	claimWanted bool          // Claim was called: Copy sends it
	claimSeq    atomic.Uint64 // its clientSeq, once sent
	disposedBy  atomic.Pointer[string]
}

// DisposedBy is, once Copy has returned an exit, the clientId of the
// client whose disposeTerminal ended the program (this client's own
// included: compare with Conn.ClientID), from the host's terminal/exited
// disposedBy extension. It is "" when no dispose ended it, when the host
// does not send the extension, and before the exit.
func (t *Terminal) DisposedBy() string {
	if p := t.disposedBy.Load(); p != nil {
		return *p
	}
	return ""
}

// OpenTerminal subscribes to the terminal uri (windowed unless the Conn is
// ordinary).
func OpenTerminal(ctx context.Context, c *Conn, uri string) (*Terminal, error) {
	sub, err := c.Subscribe(ctx, uri)
	if err != nil {
		return nil, err
	}
	return &Terminal{c: c, sub: sub, URI: uri}, nil
}

// Subscription returns the underlying subscription.
func (t *Terminal) Subscription() *Subscription { return t.sub }

// Done is closed when the connection ends.
func (t *Terminal) Done() <-chan struct{} { return t.c.done }

// Input sends terminal/input; it blocks while earlier input waits for the
// host's window.
func (t *Terminal) Input(ctx context.Context, data []byte) error {
	_, err := t.sub.Dispatch(ctx, rpc.TerminalDataAction{Type: rpc.ActionTerminalInput, Data: string(data)})
	return err
}

// Resize sends terminal/resized.
func (t *Terminal) Resize(ctx context.Context, cols, rows int) error {
	_, err := t.sub.Dispatch(ctx, rpc.TerminalResizedAction{Type: rpc.ActionTerminalResized, Cols: cols, Rows: rows})
	return err
}

// Claim asks for the terminal's claim for this client (terminal/claimed):
// its subscription then paces the program, so no output is skipped when
// it falls behind. The host grants it when the claim is ours already or
// its holder has no open connection (a reattach after a detach or a lost
// connection), and rejects it when another connected client holds it;
// Copy reports which through OnClaim. Call it before Copy, which sends
// the action once the terminal's first snapshot has arrived: one sent
// before the host has started the subscription may be applied before
// the snapshot is taken, and its answer is then lost with it.
func (t *Terminal) Claim() { t.claimWanted = true }

// TakeOver claims the terminal for this client from whoever holds it,
// even a client that is still connected (our takeOver extension: the
// user asked for it; that client then shares the terminal). Copy reports
// the host's answer through OnClaim, as for Claim. Call it while Copy
// runs.
func (t *Terminal) TakeOver(ctx context.Context) error {
	_, err := t.sub.dispatch(ctx, rpc.TerminalClaimedAction{Type: rpc.ActionTerminalClaimed, Claim: t.ourClaim(), TakeOver: true}, t.claimSeq.Store)
	return err
}

// sendClaim sends the terminal/claimed Claim asked for, unless st (the
// first snapshot's state) says the claim is ours already.
func (t *Terminal) sendClaim(ctx context.Context, st *rpc.TerminalState) error {
	me := t.ourClaim()
	if !t.claimWanted || st.Claim == me {
		return nil
	}
	_, err := t.sub.dispatch(ctx, rpc.TerminalClaimedAction{Type: rpc.ActionTerminalClaimed, Claim: me}, t.claimSeq.Store)
	return err
}

// skippedNotice is what Copy writes where output was lost: a snapshot
// mid-stream (this client fell behind the terminal's journal, or was away
// longer than it reaches back; on ordinary delivery, a gap the journal no
// longer covered). A gap the journal covers loses nothing: the
// subscription pages the missing output (gap.go) and Copy writes it.
const skippedNotice = "\r\n[sidecar: output skipped: the terminal's journal no longer held it]\r\n"

// ourClaim is the claim that names this client.
func (t *Terminal) ourClaim() rpc.Claim { return rpc.Claim{Kind: "client", ClientID: t.c.ClientID()} }

// TerminalReset is VT text that puts a terminal a remote program left in
// any state back into the plain one a shell expects: the normal screen
// (leaving the alternate one), no scroll region (the cursor kept), the
// cursor keys, keypad, mouse, focus, bracketed paste and insert modes off,
// autowrap on, the cursor shown, no attributes. Copy writes it before the screen of a
// snapshot mid-stream; attach writes it when it detaches.
const TerminalReset = "\x1b[?1049l\x1b7\x1b[r\x1b8\x1b[?1l\x1b>\x1b[?2004l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1004l\x1b[4l\x1b[?7h\x1b[?25h\x1b[m"

// Copy writes the terminal's output to w until the program exits, and
// returns its exit code: 128+n when signal n killed it (the host's
// signalNumber extension), nil when it ended without either. DisposedBy
// then says whether a disposeTerminal ended it, and whose. With
// scrollback, the snapshot's content is written first (what the terminal
// printed before we subscribed). Each message is released, and so credited,
// only once w has taken it: a slow w slows the program, never memory.
func (t *Terminal) Copy(ctx context.Context, w io.Writer, scrollback bool) (exitCode *int, err error) {
	first := true
	handleState := func(raw json.RawMessage) (bool, *int, error) {
		var st rpc.TerminalState
		if err := json.Unmarshal(raw, &st); err != nil {
			return false, nil, fmt.Errorf("bad terminal state: %w", err)
		}
		if st.ExitCode == nil && st.SignalNumber > 0 {
			code := 128 + st.SignalNumber
			st.ExitCode = &code
		}
		if first {
			if err := t.sendClaim(ctx, &st); err != nil {
				return false, nil, err
			}
		}
		if scrollback && first {
			for _, p := range st.Content {
				// History, not a program asking now: no queries
				// (withoutQueries), or the terminal's answers would be
				// typed into the remote program.
				if _, err := io.WriteString(w, withoutQueries(p.Value)); err != nil {
					return false, nil, err
				}
			}
		}
		if !first {
			// A snapshot mid-stream: this client fell behind the
			// terminal's journal (a viewer that does not pace its
			// output) and the host started it again from now. Output
			// between was lost: say so, as for a gap, then show the
			// terminal as it is now, which the live output continues:
			// the content's last part redraws its screen (the parts
			// before it are the scrollback, docs/protocol.md), written
			// on a terminal put back in its plain state first.
			screen := ""
			if n := len(st.Content); n > 0 {
				screen = st.Content[n-1].Value
			}
			if _, err := io.WriteString(w, TerminalReset+skippedNotice+withoutQueries(screen)); err != nil {
				return false, nil, err
			}
			// The claim may have passed to us, or gone to another
			// client, in what was skipped.
			if t.OnClaim != nil && st.Claim == t.ourClaim() {
				t.OnClaim(nil)
			}
			if t.OnClaimLost != nil && st.Claim.Kind == "client" && st.Claim != t.ourClaim() {
				t.OnClaimLost(st.Claim.ClientID)
			}
		}
		first = false
		if st.Lifecycle.Status == "exited" || st.ExitCode != nil {
			return true, st.ExitCode, nil
		}
		return false, nil, nil
	}
	if s := t.sub.Snapshot; s != nil {
		if done, code, err := handleState(s.State); err != nil || done {
			return code, err
		}
	}
	for {
		m, err := t.sub.Next(ctx)
		if err != nil {
			if e := t.c.Err(); e != nil {
				return nil, e
			}
			return nil, err
		}
		switch m.Method {
		case rpc.MethodChannelSnapshot:
			var p rpc.ChannelSnapshotParams
			if err := json.Unmarshal(m.Params, &p); err != nil {
				return nil, fmt.Errorf("bad channel/snapshot: %w", err)
			}
			done, code, err := handleState(p.Snapshot.State)
			m.Release()
			if err != nil || done {
				return code, err
			}
		case rpc.MethodAction:
			var env struct {
				Action struct {
					Type         string    `json:"type"`
					Data         string    `json:"data"`
					ExitCode     *int      `json:"exitCode"`
					SignalNumber int       `json:"signalNumber"`
					Claim        rpc.Claim `json:"claim"`
					DisposedBy   string    `json:"disposedBy"`
				} `json:"action"`
				Origin          *rpc.Origin `json:"origin"`
				RejectionReason string      `json:"rejectionReason"`
				RejectionCode   int64       `json:"rejectionCode"`
			}
			_ = json.Unmarshal(m.Params, &env)
			a := env.Action
			if env.RejectionReason != "" && (a.Type == rpc.ActionTerminalData || a.Type == rpc.ActionTerminalExited) {
				a.Type = "" // rejected, so not applied: never output or an exit
			}
			switch a.Type {
			case rpc.ActionTerminalData:
				if _, err := io.WriteString(w, a.Data); err != nil {
					m.Release()
					return nil, err
				}
			case rpc.ActionTerminalClaimed:
				if t.OnClaimLost != nil && env.RejectionReason == "" && a.Claim.Kind == "client" && a.Claim != t.ourClaim() {
					t.OnClaimLost(a.Claim.ClientID)
				}
				me := t.c.ClientID()
				switch o := env.Origin; {
				case t.OnClaim == nil:
				case o != nil && o.ClientID == me && o.ClientSeq != 0 && o.ClientSeq == t.claimSeq.Load():
					var err error
					switch {
					case env.RejectionReason != "" && env.RejectionCode != 0:
						err = &rpc.Error{Code: env.RejectionCode, Message: env.RejectionReason}
					case env.RejectionReason != "":
						err = errors.New(env.RejectionReason)
					}
					t.OnClaim(err)
				case o == nil && a.Claim == t.ourClaim():
					t.OnClaim(nil)
				}
			case rpc.ActionTerminalInput, rpc.ActionTerminalResized, rpc.ActionTerminalTitle, rpc.ActionTerminalCleared:
				if o := env.Origin; t.OnDenied != nil && env.RejectionCode == rpc.CodePermissionDenied && o != nil && o.ClientID == t.c.ClientID() {
					t.OnDenied(env.RejectionReason)
				}
			case rpc.ActionTerminalExited:
				m.Release()
				if a.DisposedBy != "" {
					by := a.DisposedBy // a copy: &a.DisposedBy would move a, decoded per message, to the heap
					t.disposedBy.Store(&by)
				}
				if a.ExitCode == nil && a.SignalNumber > 0 {
					code := 128 + a.SignalNumber // as a shell reports it
					return &code, nil
				}
				return a.ExitCode, nil
			}
			m.Release()
		default:
			m.Release()
		}
	}
}
