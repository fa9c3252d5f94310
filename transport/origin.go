package transport

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Origins is the one browser-origin rule of every endpoint of a listener:
// /ahp, /transport-io over WebSocket and over WebTransport, and the web
// page's own API. A request without an Origin header (a non-browser
// client such as the sidecar CLI) is not affected. One with an Origin is
// let in only when it is the listener's own origin (https, its address,
// its port: SelfOrigins) or one listed in listener.origins, compared as
// scheme, host and port (the default port of the scheme when absent).
// Anything else, "null" included, is refused with HTTP 403 and reported
// to OnRefuse.
//
// The Host header a request carries is never consulted: a page on another
// origin that a DNS name rebinds to the listener's address sends a Host
// equal to its own origin, which a Host comparison would let in.
type Origins struct {
	allowed map[string]bool
	list    []string // normalised, for messages
	// OnRefuse, when set, is told about each refused request (for
	// logging); the 403 is written either way.
	OnRefuse func(r *http.Request, origin string)
}

// NewOrigins returns the rule allowing self (the listener's own origins)
// and extra (listener.origins). Entries that are not origins are ignored
// (config.Validate refuses them first).
func NewOrigins(self, extra []string) *Origins {
	o := &Origins{allowed: map[string]bool{}}
	for _, s := range slices.Concat(self, extra) {
		if n, ok := NormalizeOrigin(s); ok && !o.allowed[n] {
			o.allowed[n] = true
			o.list = append(o.list, n)
		}
	}
	return o
}

// NormalizeOrigin returns origin as scheme://host:port, lower case, with
// the scheme's default port made explicit, and whether it is an http or
// https origin at all (no path beyond "/", no query, no user).
func NormalizeOrigin(origin string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(origin))
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case scheme == "https" && port == "":
		port = "443"
	case scheme == "http" && port == "":
		port = "80"
	case scheme != "https" && scheme != "http":
		return "", false
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", false
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", false
	}
	return scheme + "://" + net.JoinHostPort(host, port), true
}

// Allowed reports whether a request with this Origin header may pass ("" is
// no header: allowed).
func (o *Origins) Allowed(origin string) bool {
	if origin == "" {
		return true
	}
	n, ok := NormalizeOrigin(origin)
	return ok && o.allowed[n]
}

// List returns the allowed origins, normalised, in the order given.
func (o *Origins) List() []string { return slices.Clone(o.list) }

// Check lets r pass (true) or answers it with 403 and reports it (false).
func (o *Origins) Check(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if o.Allowed(origin) {
		return true
	}
	if o.OnRefuse != nil {
		o.OnRefuse(r, origin)
	}
	http.Error(w, "403 forbidden: origin "+strconv.Quote(origin)+" is not allowed: add it to listener.origins", http.StatusForbidden)
	return false
}

// Wrap returns h behind Check.
func (o *Origins) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.Check(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// SelfOrigins returns the listener's own origins: https with its port, on
// its IP address; on a loopback or unspecified address also localhost,
// 127.0.0.1 and [::1]; on an unspecified address also every address of the
// machine's interfaces; and each of names (the host names its certificate
// is for).
func SelfOrigins(addr *net.TCPAddr, names ...string) []string {
	port := strconv.Itoa(addr.Port)
	var hosts []string
	if !addr.IP.IsUnspecified() {
		hosts = append(hosts, addr.IP.String())
	}
	if addr.IP.IsLoopback() || addr.IP.IsUnspecified() {
		hosts = append(hosts, "localhost", "127.0.0.1", "::1")
	}
	if addr.IP.IsUnspecified() {
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if ipn, ok := a.(*net.IPNet); ok {
					hosts = append(hosts, ipn.IP.String())
				}
			}
		}
	}
	hosts = append(hosts, names...)
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		if h != "" {
			out = append(out, "https://"+net.JoinHostPort(h, port))
		}
	}
	return out
}
