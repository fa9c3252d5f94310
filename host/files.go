package host

import "github.com/sidecar-dev/sidecar/adapters/files"

// Files returns the file channel kind (adapters/files), whose policy and
// quotas the HTTP download endpoint shares, or nil when it is not
// registered.
func (s *Server) Files() *files.Kind { return kind[*files.Kind](s.kinds) }
