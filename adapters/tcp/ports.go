package tcp

import (
	"context"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
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
