package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// TestConnIdentity: Conn.Identity is the principal and role the host
// authenticated the connection as (the initialize result's identity),
// and false before initialize.
func TestConnIdentity(t *testing.T) {
	srv, err := host.New(config.Default(), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	a, b := transport.Pipe(64)
	served := make(chan error, 1)
	go func() {
		served <- srv.ServeConnIdentity(context.Background(), b, auth.Identity{Name: "vera", Role: auth.Viewer, Method: "tokens_file"})
	}()
	c := client.NewConn(a, client.Options{ClientID: "v1"})
	t.Cleanup(func() {
		_ = c.Close()
		select {
		case <-served:
		case <-time.After(testDeadline):
			t.Error("ServeConn did not return after the client closed")
		}
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	if _, ok := c.Identity(); ok {
		t.Fatal("an identity before initialize")
	}
	if err := c.Initialize(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if id, ok := c.Identity(); !ok || id != (rpc.Identity{Principal: "vera", Role: "viewer"}) {
		t.Fatalf("Identity() = %+v, %v; want vera viewer", id, ok)
	}
}
