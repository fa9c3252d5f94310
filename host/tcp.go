package host

import (
	"encoding/json"

	"github.com/sidecar-dev/sidecar/rpc"
)

// createTCPConnection is the TCP channel's createTcpConnection (issue 5).
func (c *conn) createTCPConnection(params json.RawMessage) (any, *rpc.Error) {
	return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %s", rpc.MethodCreateTCPConnection)
}

// extraChannel resolves channels other than root and terminals (TCP,
// telemetry), or nil.
func (s *Server) extraChannel(uri string) channel {
	return nil
}
