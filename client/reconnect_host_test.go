package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// realHost is a host.Server behind cuttable links: each dial of its
// Dialer is a new connection to the same server (or to the server now
// in srv, for a restart).
type realHost struct {
	t   *testing.T
	d   *links
	mu  sync.Mutex
	srv *host.Server
	wg  sync.WaitGroup
}

func newRealHost(t *testing.T, tweak func(*config.Config)) *realHost {
	t.Helper()
	h := &realHost{t: t}
	h.srv = h.newServer(tweak)
	h.d = &links{serve: func(mc transport.MessageConn) {
		defer h.wg.Done()
		h.mu.Lock()
		srv := h.srv
		h.mu.Unlock()
		_ = srv.ServeConn(context.Background(), mc)
	}}
	t.Cleanup(func() {
		h.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		h.mu.Lock()
		srv := h.srv
		h.mu.Unlock()
		_ = srv.Shutdown(ctx)
	})
	return h
}

func (h *realHost) newServer(tweak func(*config.Config)) *host.Server {
	cfg := config.Default()
	cfg.Terminal.Shell = "/bin/sh"
	cfg.Terminal.Login = false
	if tweak != nil {
		tweak(cfg)
	}
	srv, err := host.New(cfg, hclog.NewNullLogger())
	if err != nil {
		h.t.Fatal(err)
	}
	return srv
}

// replace puts a new server (a restart) where the next dials go and
// returns the old one.
func (h *realHost) replace() *host.Server {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.srv
	h.srv = h.newServer(nil)
	return old
}

// dial is the Dialer: wg counts each served connection.
func (h *realHost) dial(ctx context.Context) (transport.MessageConn, error) {
	h.wg.Add(1)
	mc, err := h.d.Dial(ctx)
	if err != nil {
		h.wg.Done()
	}
	return mc, err
}

func (h *realHost) connect(ctx context.Context, st *statuses) *client.Conn {
	h.t.Helper()
	return h.connectWith(ctx, client.Options{OnReconnect: st.on})
}

// connectWith is connect with opts (its Dialer and ReconnectDelay set here).
func (h *realHost) connectWith(ctx context.Context, opts client.Options) *client.Conn {
	h.t.Helper()
	opts.Dialer, opts.ReconnectDelay = h.dial, 5*time.Millisecond
	c, err := client.Dial(ctx, "", opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestReconnectRealHostLines: a terminal printing numbered lines survives
// several cuts against the real host with every line exactly once, in
// order.
func TestReconnectRealHostLines(t *testing.T) {
	ctx := testCtx(t)
	h := newRealHost(t, nil)
	st := newStatuses()
	c := h.connect(ctx, st)
	const n = 400
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1)); echo line$i; [ $((i %% 20)) -eq 0 ] && sleep 0.02; done; exit 7`, n)
	if err := c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: testTerm, Command: []string{"sh", "-c", script}}, nil); err != nil {
		t.Fatal(err)
	}
	term, err := client.OpenTerminal(ctx, c, testTerm)
	if err != nil {
		t.Fatal(err)
	}
	var out output
	type result struct {
		code *int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := term.Copy(ctx, &out, true)
		done <- result{code, err}
	}()
	cuts := 0
	for cuts < 4 {
		select {
		case r := <-done:
			done <- r
		case <-time.After(60 * time.Millisecond):
			h.d.CutLast()
			st.await(t, client.Resumed)
			cuts++
			continue
		}
		break
	}
	r := <-done
	if r.err != nil || r.code == nil || *r.code != 7 {
		t.Fatalf("Copy: code %v, err %v", r.code, r.err)
	}
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line%d\r\n", i)
	}
	if got := out.String(); got != want.String() {
		t.Fatalf("after %d cuts the output differs:\n%s", cuts, firstDiff(got, want.String()))
	}
	if cuts < 2 {
		t.Fatalf("only %d cuts happened before the program ended", cuts)
	}
}

// firstDiff shows where got and want part.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-40)
	return fmt.Sprintf("at byte %d (len %d, want %d): got %q, want %q", i, len(got), len(want), got[lo:min(len(got), i+40)], want[lo:min(len(want), i+40)])
}

// TestReconnectRealHostInput: input typed before, during and right after
// cuts reaches the program exactly once each.
func TestReconnectRealHostInput(t *testing.T) {
	ctx := testCtx(t)
	h := newRealHost(t, nil)
	st := newStatuses()
	c := h.connect(ctx, st)
	script := `stty -echo; while read l; do echo "got:$l"; [ "$l" = end ] && exit 0; done`
	if err := c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: testTerm, Command: []string{"sh", "-c", script}}, nil); err != nil {
		t.Fatal(err)
	}
	term, err := client.OpenTerminal(ctx, c, testTerm)
	if err != nil {
		t.Fatal(err)
	}
	var out output
	done := make(chan error, 1)
	go func() {
		_, err := term.Copy(ctx, &out, true)
		done <- err
	}()
	typed := 0
	typeLine := func() {
		typed++
		if err := term.Input(ctx, []byte(fmt.Sprintf("k%d\n", typed))); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 4; round++ {
		typeLine()
		typeLine()
		h.d.CutLast() // some of that input may be in flight
		typeLine()    // typed during the cut
		st.await(t, client.Resumed)
		typeLine()
	}
	if err := term.Input(ctx, []byte("end\n")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for i := 1; i <= typed; i++ {
		if n := strings.Count(got, fmt.Sprintf("got:k%d\r\n", i)); n != 1 {
			t.Fatalf("k%d reached the program %d times; output %q", i, n, got)
		}
	}
	var order []string
	for _, l := range strings.Split(got, "\r\n") {
		if strings.HasPrefix(l, "got:") {
			order = append(order, l)
		}
	}
	for i, l := range order[:typed] {
		if l != fmt.Sprintf("got:k%d", i+1) {
			t.Fatalf("input out of order: %v", order)
		}
	}
}

// TestReconnectRealHostRestart: a host that restarted (nothing to
// resume) refuses with -32008, and the client gives up at once with
// ErrResumeExpired; a host whose grace ended, the same.
func TestReconnectRealHostRestart(t *testing.T) {
	ctx := testCtx(t)
	h := newRealHost(t, nil)
	st := newStatuses()
	c := h.connect(ctx, st)
	if _, err := c.RootState(ctx); err != nil {
		t.Fatal(err)
	}
	old := h.replace()
	h.d.CutLast()
	gave := st.await(t, client.GaveUp)
	if !errors.Is(gave.Err, client.ErrResumeExpired) || !errors.Is(c.Err(), client.ErrConnectionLost) {
		t.Fatalf("gave up with %v, want ErrResumeExpired", gave.Err)
	}
	sctx, cancel := context.WithTimeout(ctx, testDeadline)
	defer cancel()
	_ = old.Shutdown(sctx)
}

func TestReconnectRealHostGraceEnds(t *testing.T) {
	ctx := testCtx(t)
	h := newRealHost(t, func(cfg *config.Config) { cfg.Journal.ReconnectGrace = 200 * time.Millisecond })
	st := newStatuses()
	c := h.connect(ctx, st)
	h.d.Refuse(errors.New("connection refused"))
	h.d.CutLast()
	gave := st.await(t, client.GaveUp)
	if !errors.Is(gave.Err, client.ErrGraceEnded) {
		t.Fatalf("gave up with %v, want ErrGraceEnded", gave.Err)
	}
	<-c.Done()
}

// TestReconnectAfterShutdown: a host that shuts down ends the Conn with
// ErrServerShutdown, unless Options.ReconnectAfterShutdown is set: then the
// Conn reconnects, first saying why, and the restarted host, which keeps
// nothing of ours, ends it with ErrResumeExpired (forward then starts a
// new session).
func TestReconnectAfterShutdown(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprint("ReconnectAfterShutdown=", after), func(t *testing.T) {
			ctx := testCtx(t)
			h := newRealHost(t, nil)
			st := newStatuses()
			c := h.connectWith(ctx, client.Options{OnReconnect: st.on, ReconnectAfterShutdown: after})
			if _, err := c.RootState(ctx); err != nil {
				t.Fatal(err)
			}
			old := h.replace()
			sctx, cancel := context.WithTimeout(ctx, testDeadline)
			defer cancel()
			_ = old.Shutdown(sctx)
			if !after {
				<-c.Done()
				if !errors.Is(c.Err(), client.ErrServerShutdown) {
					t.Fatalf("ended with %v, want ErrServerShutdown", c.Err())
				}
				return
			}
			if lost := st.await(t, client.Lost); !errors.Is(lost.Err, client.ErrServerShutdown) {
				t.Errorf("lost with %v, want ErrServerShutdown", lost.Err)
			}
			if gave := st.await(t, client.GaveUp); !errors.Is(gave.Err, client.ErrResumeExpired) {
				t.Fatalf("gave up with %v, want ErrResumeExpired", gave.Err)
			}
		})
	}
}
