package client

import (
	"context"
	"errors"

	"github.com/sidecar-dev/sidecar/rpc"
)

// ErrProcessesNotOffered: the host does not advertise processes (our
// extension, docs/protocol.md "Processes") in its initialize result.
var ErrProcessesNotOffered = errors.New("client: the host does not offer process listing (no processes in its capabilities)")

// Processes asks the host for its processes (processes/list): the first
// limit (1 to rpc.MaxProcessesListed, 0 for the host's default of 50)
// sorted by sortBy ("cpu", "memory", "pid", "start", "command"; "" for
// cpu). A host may take up to 250 ms to measure CPU use when nobody
// listed for a while. Errors: ErrProcessesNotOffered, an *rpc.Error
// (-32602 for a sortBy or limit it refuses), the connection's.
func (c *Conn) Processes(ctx context.Context, sortBy string, limit int) (*rpc.ProcessesListResult, error) {
	if c.init.Processes == nil {
		return nil, ErrProcessesNotOffered
	}
	var res rpc.ProcessesListResult
	if err := c.Call(ctx, rpc.MethodProcessesList, rpc.ProcessesListParams{SortBy: sortBy, Limit: limit}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// SignalProcess asks the host to send a signal to a process
// (processes/signal): p.Signal ("SIGTERM", …) to p.PID, checked against
// p.StartTimeUnixNano when not 0 (the start time Processes listed). A
// refusal is an *rpc.Error saying which rule refused it (-32009 not
// permitted, -32008 no such process, -32602 a signal or pid never
// allowed). Errors also: ErrProcessesNotOffered, the connection's.
func (c *Conn) SignalProcess(ctx context.Context, p rpc.ProcessesSignalParams) error {
	if c.init.Processes == nil {
		return ErrProcessesNotOffered
	}
	return c.Call(ctx, rpc.MethodProcessesSignal, p, nil)
}
