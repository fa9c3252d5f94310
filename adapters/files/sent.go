package files

import "sync"

// MaxSentSums bounds the SHA-256 sums of finished reads kept for the
// files/stat that checks them (one per file downloaded, taken by that
// stat): past it the oldest is dropped, and its stat hashes the file
// again instead (slower, as safe). 1,024 is far above the transfers a
// host runs at once (files.max_total, 64 by default), so that only sums
// no client asks for are dropped.
const MaxSentSums = 1024

// sentSum is the SHA-256 of what one read channel sent: the whole file
// at path, for clientID.
type sentSum struct {
	clientID, path, sha256 string
}

// sentSums holds the sums of finished reads by channel URI, at most
// MaxSentSums, oldest dropped first.
type sentSums struct {
	mu    sync.Mutex
	byURI map[string]sentSum
	order []string // URIs in the order put; some may be taken already
}

func (s *sentSums) put(uri string, sum sentSum) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byURI == nil {
		s.byURI = map[string]sentSum{}
	}
	for len(s.byURI) >= MaxSentSums && len(s.order) > 0 {
		delete(s.byURI, s.order[0])
		s.order = s.order[1:]
	}
	if len(s.order) >= 2*MaxSentSums { // taken ones left behind: compact
		live := s.order[:0]
		for _, u := range s.order {
			if _, ok := s.byURI[u]; ok {
				live = append(live, u)
			}
		}
		s.order = live
	}
	s.byURI[uri] = sum
	s.order = append(s.order, uri)
}

// take returns and forgets the sum of what channel uri sent, if it was
// clientID's read of path.
func (s *sentSums) take(uri, clientID, path string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum, ok := s.byURI[uri]
	if !ok || sum.clientID != clientID || sum.path != path {
		return "", false
	}
	delete(s.byURI, uri)
	return sum.sha256, true
}

// forget drops clientID's sums.
func (s *sentSums) forget(clientID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for u, sum := range s.byURI {
		if sum.clientID == clientID {
			delete(s.byURI, u)
		}
	}
}

// len is how many sums are held.
func (s *sentSums) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byURI)
}
