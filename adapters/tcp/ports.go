package tcp

import (
	"context"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	psnet "github.com/shirou/gopsutil/v4/net"

	"github.com/sidecar-dev/sidecar/rpc"
)

// ListeningPorts returns the TCP ports listening on this machine (in the
// sidecar's network namespace), one entry per address and port, sorted by
// port then address, with the owning process's name when it can be seen.
func ListeningPorts(ctx context.Context) ([]rpc.ListeningPort, error) {
	conns, err := psnet.ConnectionsWithoutUidsWithContext(ctx, "tcp")
	if err != nil {
		return nil, err
	}
	seen := map[rpc.ListeningPort]bool{}
	names := map[int32]string{}
	ports := []rpc.ListeningPort{}
	for _, c := range conns {
		if c.Status != "LISTEN" {
			continue
		}
		addr := c.Laddr.IP
		if a, err := netip.ParseAddr(addr); err == nil {
			addr = a.Unmap().String()
		}
		p := rpc.ListeningPort{Address: addr, Port: int(c.Laddr.Port)}
		if c.Pid > 0 {
			name, ok := names[c.Pid]
			if !ok {
				name = processName(c.Pid)
				names[c.Pid] = name
			}
			p.Process = name
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool {
		if ports[i].Port != ports[j].Port {
			return ports[i].Port < ports[j].Port
		}
		return ports[i].Address < ports[j].Address
	})
	return ports, nil
}

func processName(pid int32) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// PortsInterval is how often the host reads the listening ports.
const PortsInterval = 3 * time.Second

// FirstPortsWait bounds how long StartPolling waits for the first
// reading (a few milliseconds on most machines, more with many sockets
// or processes).
const FirstPortsWait = 2 * time.Second

// StartPolling runs PollPorts in a goroutine that wg counts, until ctx
// ends, and returns once its first reading has been published (or has
// failed), or after FirstPortsWait: a host that starts it before it
// serves anything has the ports in its first root snapshot. Started in
// the background alone, a client that reads the root state once as soon
// as the host is up (sidecar ls through a sidecar stdio started for it)
// got it before the first reading, without ports.
func StartPolling(ctx context.Context, wg *sync.WaitGroup, interval time.Duration, publish func([]rpc.ListeningPort), warn func(error)) {
	first := make(chan struct{})
	var once sync.Once
	read := func() { once.Do(func() { close(first) }) }
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer read() // ctx ended before the first reading
		PollPorts(ctx, interval, func(ports []rpc.ListeningPort) {
			publish(ports)
			read()
		}, func(err error) {
			warn(err)
			read()
		})
	}()
	t := time.NewTimer(FirstPortsWait)
	defer t.Stop()
	select {
	case <-first:
	case <-t.C:
	}
}

// PollPorts reads the listening ports at once and then every interval
// until ctx ends, and hands each reading to publish (which compares it
// with the last). A failure keeps the last reading; the first one is
// reported to warn, once.
func PollPorts(ctx context.Context, interval time.Duration, publish func([]rpc.ListeningPort), warn func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	warned := false
	for {
		rctx, cancel := context.WithTimeout(ctx, interval)
		ports, err := ListeningPorts(rctx)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !warned:
			warn(err)
			warned = true
		case err == nil:
			publish(ports)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
