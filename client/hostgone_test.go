package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/sidecar-dev/sidecar/client"
)

// refusedDial is the error a dial gets from an address where nothing
// listens, as net wraps it.
var refusedDial = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// TestGiveUpWhenRefused: with Options.GiveUpWhenRefused, a reconnect
// attempt whose dial is refused (the host's process is gone) ends the
// reconnection at once with ErrHostGone; a dial that times out (a path
// that does not answer) is retried; without the option a refused dial is
// retried too.
func TestGiveUpWhenRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		option bool
		dial   error
		gives  bool
	}{
		{"refused", true, fmt.Errorf("failed to WebSocket dial: %w", refusedDial), true},
		{"silent", true, context.DeadlineExceeded, false},
		{"refused without the option", false, refusedDial, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			st := newStatuses()
			c, _, _, _, d := scriptedSetup(t, ctx, 3_600_000, client.Options{OnReconnect: st.on, GiveUpWhenRefused: tc.option})
			d.Refuse(tc.dial)
			d.CutLast()
			if !tc.gives {
				for st.await(t, client.Retrying).Attempt < 3 {
				}
				select {
				case <-c.Done():
					t.Fatalf("gave up: %v", c.Err())
				default:
				}
				return
			}
			gave := st.await(t, client.GaveUp)
			<-c.Done()
			var re *client.ReconnectError
			if err := c.Err(); !errors.As(err, &re) || !errors.Is(err, client.ErrHostGone) || !errors.Is(err, syscall.ECONNREFUSED) || gave.Err != err || re.Attempts != 1 {
				t.Fatalf("Err %v (status %v), want a *ReconnectError after 1 attempt matching ErrHostGone and ECONNREFUSED", err, gave.Err)
			}
		})
	}
}
