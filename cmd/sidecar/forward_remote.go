package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// remoteForward is one -R.
type remoteForward struct {
	bind  rpc.TunnelAddress // where the host listens
	given string            // the spec as typed, for messages
	dest  string            // host:hostport, dialled here
}

// parseRemote parses -R [bind:]port:host:hostport as -L's spec (IPv6 in
// brackets); no bind is 127.0.0.1 and an empty one or * is 0.0.0.0 (all
// interfaces, which the host refuses unless tunnels.allow_non_loopback).
func parseRemote(spec string) (remoteForward, error) {
	parts, err := splitSpec(spec)
	if err != nil {
		return remoteForward{}, fmt.Errorf("bad -R %q: %v", spec, err)
	}
	f, err := parseLocalParts(parts)
	if err != nil {
		return remoteForward{}, fmt.Errorf("bad -R %q: %v", spec, err)
	}
	host, port, _ := net.SplitHostPort(f.bind)
	if host == anyHost {
		host = "0.0.0.0"
	}
	p, _ := strconv.Atoi(port)
	return remoteForward{bind: rpc.TunnelAddress{Host: host, Port: p}, given: spec,
		dest: net.JoinHostPort(f.host, strconv.Itoa(f.hostPort))}, nil
}

// serveSession lists the session's -L forwards on the host's tunnels
// channel and starts its -R forwards, printing a status line for each.
// In the first session a -R the host refuses ends forward with status 1,
// naming why; in a later one (a new session after the daemon restarted)
// the -L forwards are established already and must not be lost to one -R
// whose port something else took meanwhile: that -R is reported on one
// line and retried in the background (remoteRetry, backing off) until it
// binds or ctx (the session) ends; retries has those goroutines.
func serveSession(ctx context.Context, conn *client.Conn, fw *client.Forwarder, bound []boundListener, rfs []remoteForward, first bool) (retries *sync.WaitGroup, err error) {
	retries = &sync.WaitGroup{}
	if conn.Initialized().Tunnels == nil {
		if len(rfs) > 0 {
			return retries, &exitError{code: 255, err: errors.New("the host does not offer reverse forwarding (no tunnels in its capabilities)")}
		}
		return retries, nil
	}
	tun, err := conn.OpenTunnels(ctx)
	if err != nil {
		if len(rfs) > 0 {
			return retries, &exitError{code: 255, err: fmt.Errorf("cannot open the tunnels channel: %w", err)}
		}
		return retries, nil
	}
	for _, b := range bound {
		f := b.local
		a, ok := b.l.Addr().(*net.TCPAddr)
		if f == nil || !ok {
			continue
		}
		local := rpc.TunnelAddress{Host: a.IP.String(), Port: a.Port}
		if _, err := tun.Announce(ctx, local, rpc.TunnelAddress{Host: f.host, Port: f.hostPort}); err != nil {
			fmt.Fprintf(os.Stderr, "sidecar: %s is not listed on the host's tunnels channel: %v\n", b.given, err)
		}
	}
	for _, f := range rfs {
		_, at, err := fw.ServeRemote(ctx, tun, f.bind, f.dest)
		if err != nil {
			if !first {
				fmt.Fprintf(os.Stderr, "sidecar: -R %s cannot be set up again in the new session: %v; retrying (every %v at most), the other forwards go on\n",
					f.given, err, remoteRetryMax)
				retries.Add(1)
				go func() {
					defer retries.Done()
					remoteRetry(ctx, fw, tun, f)
				}()
				continue
			}
			var re *client.TunnelRejectedError
			if errors.As(err, &re) {
				return retries, &exitError{code: 1, err: fmt.Errorf("-R %s: %v", f.given, err)}
			}
			return retries, &exitError{code: 255, err: fmt.Errorf("-R %s: %v", f.given, err)}
		}
		printRemote(at, f)
	}
	return retries, nil
}

// remoteRetryMin and remoteRetryMax bound the backoff between tries of a
// -R that a new session could not set up again.
const (
	remoteRetryMin = time.Second
	remoteRetryMax = 30 * time.Second
)

// remoteRetry tries f again, the wait doubling from remoteRetryMin to
// remoteRetryMax, until it is set up (its status line printed) or ctx
// ends; the attempts are silent, the first failure having been reported.
func remoteRetry(ctx context.Context, fw *client.Forwarder, tun *client.Tunnels, f remoteForward) {
	wait := remoteRetryMin
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, at, err := fw.ServeRemote(ctx, tun, f.bind, f.dest); err == nil {
			printRemote(at, f)
			return
		}
		wait = min(2*wait, remoteRetryMax)
		t.Reset(wait)
	}
}

// printRemote prints -R f's status line: where the host listens.
func printRemote(at rpc.TunnelAddress, f remoteForward) {
	fmt.Fprintf(os.Stderr, "sidecar: forwarding %s on the host -> %s\n", net.JoinHostPort(at.Host, strconv.Itoa(at.Port)), f.dest)
}
