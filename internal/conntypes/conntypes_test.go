package conntypes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEveryType: each Type's dial reaches its listener, which echoes a
// text both ways, and negotiates binary forms as Binary says.
func TestEveryType(t *testing.T) {
	Run(t, func(t *testing.T, ct Type) {
		dial := ct.Listen(t, func(ctx context.Context, mc transport.MessageConn) {
			defer mc.Close(transport.CloseNormal, "")
			for {
				b, err := mc.ReadMessage(ctx)
				if err != nil {
					return
				}
				if mc.WriteMessage(ctx, b) != nil {
					return
				}
			}
		})
		mc := dial(t)
		if got := transport.CarriesBinary(mc); got != ct.Binary {
			t.Errorf("CarriesBinary = %v, want %v", got, ct.Binary)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		const m = `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"s":"☃"}}`
		if err := mc.WriteMessage(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
		if b, err := mc.ReadMessage(ctx); err != nil || string(b) != m {
			t.Fatalf("echo %q %v, want %q", b, err, m)
		}
	})
}

// TestLose: after Lose the host's read fails with no close from the
// client (CloseStatus -1), except on the pipe, which closes with 1011.
func TestLose(t *testing.T) {
	Run(t, func(t *testing.T, ct Type) {
		ended := make(chan error, 1)
		dial := ct.Listen(t, func(ctx context.Context, mc transport.MessageConn) {
			defer mc.Close(transport.CloseNormal, "")
			b, err := mc.ReadMessage(ctx)
			if err == nil {
				err = mc.WriteMessage(ctx, b)
			}
			for err == nil {
				_, err = mc.ReadMessage(ctx)
			}
			ended <- err
		})
		mc := dial(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := mc.WriteMessage(ctx, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := mc.ReadMessage(ctx); err != nil {
			t.Fatal(err)
		}
		Lose(t, mc)
		want := transport.CloseCode(-1)
		if ct.Name == Pipe.Name {
			want = transport.CloseInternalError
		}
		select {
		case err := <-ended:
			if got := transport.CloseStatus(err); got != want {
				t.Errorf("the host's read ended with %v (close status %d), want %d", err, got, want)
			}
		case <-ctx.Done():
			t.Fatal("the host did not see the connection end")
		}
	})
}

// TestLastMessageBeforeClose: a message written just before a normal
// close reaches the peer, both ways. Over WebTransport it may not (a
// known bug, skipped when it shows): transportio closes the session once
// its emits are handed to QUIC, and webtransport-go resets the session's
// streams, dropping what the peer had not read yet.
func TestLastMessageBeforeClose(t *testing.T) {
	Run(t, func(t *testing.T, ct Type) {
		hostGot := make(chan error, 1)
		dial := ct.Listen(t, func(ctx context.Context, mc transport.MessageConn) {
			defer mc.Close(transport.CloseNormal, "")
			b, err := mc.ReadMessage(ctx)
			if err != nil {
				return
			}
			if string(b) == `"host's last"` {
				_ = mc.WriteMessage(ctx, []byte(`"last"`))
				_ = mc.Close(transport.CloseNormal, "bye")
				return
			}
			if err = mc.WriteMessage(ctx, []byte(`"go on"`)); err == nil {
				_, err = mc.ReadMessage(ctx)
			}
			hostGot <- err
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var lost []string
		// Host to client.
		mc := dial(t)
		if err := mc.WriteMessage(ctx, []byte(`"host's last"`)); err != nil {
			t.Fatal(err)
		}
		if b, err := mc.ReadMessage(ctx); err != nil {
			lost = append(lost, "the host's: "+err.Error())
		} else if string(b) != `"last"` {
			t.Fatalf("read %s", b)
		}
		// Client to host, once the host serves the connection.
		mc = dial(t)
		if err := mc.WriteMessage(ctx, []byte(`"first"`)); err != nil {
			t.Fatal(err)
		}
		if _, err := mc.ReadMessage(ctx); err != nil {
			t.Fatal(err)
		}
		if err := mc.WriteMessage(ctx, []byte(`"last"`)); err != nil {
			t.Fatal(err)
		}
		_ = mc.Close(transport.CloseNormal, "bye")
		select {
		case err := <-hostGot:
			if err != nil {
				lost = append(lost, "the client's: "+err.Error())
			}
		case <-ctx.Done():
			t.Fatal("the host's read did not end")
		}
		if len(lost) > 0 && ct.Name == WebTransport.Name {
			t.Skipf("known bug: the last message before a normal close is lost over WebTransport: %v", lost)
		}
		if len(lost) > 0 {
			t.Errorf("lost: %v", lost)
		}
	})
}

// TestConnect: the connections a test makes over a Type come through one
// listener, each served by the serve function given with it.
func TestConnect(t *testing.T) {
	Run(t, func(t *testing.T, ct Type) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var mcs []transport.MessageConn
		for i := range 3 {
			mcs = append(mcs, Connect(t, ct, func(ctx context.Context, mc transport.MessageConn) {
				defer mc.Close(transport.CloseNormal, "")
				if _, err := mc.ReadMessage(ctx); err == nil {
					_ = mc.WriteMessage(ctx, []byte(fmt.Sprint(i)))
				}
				_, _ = mc.ReadMessage(ctx)
			}))
		}
		n := 0
		shared.Range(func(k, _ any) bool {
			if k.(sharedKey).t == t {
				n++
			}
			return true
		})
		if n != 1 {
			t.Errorf("%d listeners for the test, want 1", n)
		}
		for i := len(mcs) - 1; i >= 0; i-- {
			if err := mcs[i].WriteMessage(ctx, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if b, err := mcs[i].ReadMessage(ctx); err != nil || string(b) != fmt.Sprint(i) {
				t.Fatalf("connection %d served by %s (%v)", i, b, err)
			}
		}
	})
}
