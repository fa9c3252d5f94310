package tcp

import (
	"context"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

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
