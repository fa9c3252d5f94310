package host

// PacerClient returns the clientId whose subscription paces terminal uri's
// PTY, "" when none does (or there is no such terminal).
func (s *Server) PacerClient(uri string) string {
	s.mu.Lock()
	t := s.terminals[uri]
	s.mu.Unlock()
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pacer == nil {
		return ""
	}
	return t.pacer.c.id()
}

// FirstSubscribed reports whether terminal uri stopped waiting for its
// claim holder's first subscription (firstSubscribeLease).
func (s *Server) FirstSubscribed(uri string) bool {
	s.mu.Lock()
	t := s.terminals[uri]
	s.mu.Unlock()
	if t == nil {
		return false
	}
	select {
	case <-t.firstSub:
		return true
	default:
		return false
	}
}

// LiveClients returns how many clientIds have an open connection (the
// entries of Server.live).
func (s *Server) LiveClients() int {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	return len(s.live)
}
