package host

import (
	"encoding/json"

	"github.com/sidecar-dev/sidecar/rpc"
)

// tcpState is the server's TCP channel state (issue 5).
type tcpState struct{}

func (s *Server) initTCP()     {}
func (s *Server) shutdownTCP() {}

// tcpCapability is InitializeResult.tcpConnections: {} when TCP channels
// are offered, nil otherwise.
func (s *Server) tcpCapability() *struct{} { return nil }

// createTCPConnection is the TCP channel's createTcpConnection.
func (c *conn) createTCPConnection(params json.RawMessage) (any, *rpc.Error) {
	return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %s", rpc.MethodCreateTCPConnection)
}

// tcpChannel returns the ahp-tcp: channel named uri, or nil.
func (s *Server) tcpChannel(uri string) channel { return nil }
