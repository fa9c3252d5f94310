package preview

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What the preview notices of an app that looks broken under its prefix:
// a page of it (the Referer is under <base>/ports/N/) asked the daemon for
// a path outside every prefix (an absolute asset path such as /app.js),
// which reaches the daemon's page, not the app. The page shows it beside
// the port (StatusPath). It is a hint, not a proof: it sees only the
// requests that reach this daemon (behind a proxy that routes only the
// base path, none), and a Referer the app's Referrer-Policy leaves out.
const (
	// maxHintPorts bounds the ports with a hint kept; past it the one
	// noticed longest ago is forgotten.
	maxHintPorts = 64
	// maxHintPaths bounds the paths kept per port (the first ones).
	maxHintPaths = 5
	// maxHintPathBytes cuts a path kept longer than this.
	maxHintPathBytes = 200
)

type hints struct {
	mu    sync.Mutex
	ports map[int]*PortStatus
}

// PortStatus is what the preview noticed of one port's app.
type PortStatus struct {
	// Outside are the first paths (at most 5) a page of the app asked
	// for outside its prefix: absolute paths that reach the daemon, not
	// the app.
	Outside []string `json:"outside"`
	// OutsideCount counts every such request.
	OutsideCount uint64 `json:"outsideCount"`
	last         time.Time
}

// Status is the body of a GET <base>/web/preview answer.
type Status struct {
	// Prefix is the path previews are served under ("<base>/ports/").
	Prefix string `json:"prefix"`
	// Subdomain is preview.subdomain ("" when off): port N is also at
	// https://N.<subdomain>/ on the listener's port.
	Subdomain string `json:"subdomain,omitempty"`
	// Ports maps a port number to what was noticed of its app (only
	// ports something was noticed of).
	Ports map[string]*PortStatus `json:"ports"`
}

func newHints() *hints { return &hints{ports: map[int]*PortStatus{}} }

func (h *hints) note(port int, path string, now time.Time) {
	if len(path) > maxHintPathBytes {
		path = path[:maxHintPathBytes] + "…"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ps := h.ports[port]
	if ps == nil {
		if len(h.ports) >= maxHintPorts {
			oldest := -1
			for p, v := range h.ports {
				if oldest < 0 || v.last.Before(h.ports[oldest].last) {
					oldest = p
				}
			}
			delete(h.ports, oldest)
		}
		ps = &PortStatus{}
		h.ports[port] = ps
	}
	ps.OutsideCount++
	ps.last = now
	if len(ps.Outside) < maxHintPaths && !slices.Contains(ps.Outside, path) {
		ps.Outside = append(ps.Outside, path)
	}
}

func (h *hints) snapshot() map[string]*PortStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]*PortStatus, len(h.ports))
	for p, v := range h.ports {
		c := *v
		c.Outside = slices.Clone(v.Outside)
		out[strconv.Itoa(p)] = &c
	}
	return out
}

// WatchOutside wraps the daemon's whole handler (the base path not taken
// off): a request for a path outside base+PortsPath whose Referer is a
// preview page of this daemon, and which carries a valid session cookie
// (what a browser sends along from a preview with no base path; the page
// shows these paths, so nobody else may plant one), is noted for that
// port (StatusPath), then served by next as usual. Nothing else is looked
// at or changed.
func (s *Server) WatchOutside(next http.Handler) http.Handler {
	prefix := s.opts.Base + PortsPath
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := r.Header.Get("Referer"); ref != "" && !strings.HasPrefix(r.URL.Path, prefix) && s.hasSession(r) {
			if site := r.Header.Get("Sec-Fetch-Site"); site == "" || site == "same-origin" {
				if u, err := url.Parse(ref); err == nil && strings.HasPrefix(u.Path, prefix) {
					ps, _, _ := strings.Cut(strings.TrimPrefix(u.Path, prefix), "/")
					if port, ok := parsePort(ps); ok {
						s.hints.note(port, r.URL.Path, s.opts.Now())
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hasSession reports whether r carries a valid session cookie (not
// renewed by this).
func (s *Server) hasSession(r *http.Request) bool {
	for _, c := range r.CookiesNamed(CookieName) {
		if _, ok, _ := s.sessions.Check(c.Value, false); ok {
			return true
		}
	}
	return false
}

// status answers GET StatusPath for the page (session cookie) or a
// script (bearer token).
func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if why, ok := s.sameSite(r, false); !ok {
		http.Error(w, "403 Forbidden: "+why, http.StatusForbidden)
		return
	}
	if !s.hasSession(r) {
		if _, ok := s.bearer(r, "preview"); !ok {
			http.Error(w, "401 Unauthorized: log in first", http.StatusUnauthorized)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Status{Prefix: s.opts.Base + PortsPath, Subdomain: s.opts.Config.Subdomain, Ports: s.hints.snapshot()})
}
