// Package preview serves the port preview: a workload's web server,
// opened from the page at <base>/ports/<port>/, reverse-proxied by the
// daemon to 127.0.0.1:<port> (or [::1]:<port>) under the TCP channel's
// destination policy (tcp.allow, the daemon's own listeners refused).
// The proxy is net/http/httputil.ReverseProxy: HTTP/1.1 keep-alive to the
// app, bodies streamed both ways and flushed at once (server-sent events,
// chunked responses), WebSocket upgrades passed through, X-Forwarded-For,
// -Host, -Proto and -Prefix set, hop-by-hop headers removed, Location and
// Set-Cookie paths put under the prefix.
//
// A preview is reachable only with the page's session cookie (Sessions;
// POST <base>/web/session) or the token in an Authorization: Bearer
// header; both are taken off the request before it reaches the app, and
// cross-site requests are refused (Sec-Fetch-Site, Origin).
// docs/protocol.md "Port preview" is the HTTP surface.
package preview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/transport"
)

// Paths, relative to the page's base path.
const (
	// PortsPath prefixes every preview: PortsPath + "<port>/".
	PortsPath = "/ports/"
	// SessionPath: POST with Authorization: Bearer TOKEN sets the session
	// cookie; the page calls it after its login and to renew.
	SessionPath = "/web/session"
	// LogoutPath: POST forgets the cookie's session and clears the cookie.
	LogoutPath = "/web/logout"
	// StatusPath: GET (session cookie or bearer) answers Status: what the
	// preview noticed of each port's app (requests outside its prefix).
	StatusPath = "/web/preview"
	// SubdomainLoginPath, on a port's subdomain (subdomain mode), redeems
	// a ticket for a session cookie of that subdomain and redirects to /.
	SubdomainLoginPath = "/.sidecar/login"
)

// CookieName is the session cookie's name. An app's own cookie of this
// name is dropped from its responses.
const CookieName = "sidecar_preview"

// Options configure a Server.
type Options struct {
	// Base is the page's base path ("" or "/vm1", listener.base_path).
	Base string
	// Auth decides the credential of a request bearing one
	// (Authorization: Bearer); a session made for it is its identity's.
	Auth auth.Authenticator
	// Audit records each decision ("auth.success", "auth.failure") and
	// each authenticated request (audit.ActionPreviewRequest: port,
	// method, path without its query, status, duration); nil is
	// audit.Discard.
	Audit audit.Sink
	// Token is the single auth.token, taken off every request bound for
	// an app (with the credential the request itself presented).
	Token string
	// Tickets redeem subdomain logins (subdomain mode); may be nil.
	Tickets *transport.Tickets
	// Origins is the listener's origin rule: a request with another
	// Origin is refused.
	Origins *transport.Origins
	// Dialer dials the app under the TCP channel's policy and a role's
	// tcp_allow (its Roles), as forward -L does.
	Dialer *tcp.Dialer
	// Config is block preview.
	Config config.Preview
	// Log gets refusals (debug) and proxy errors.
	Log hclog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Server is the preview: its handlers, sessions, bounds and counters.
type Server struct {
	opts     Options
	sessions *Sessions
	proxy    *httputil.ReverseProxy
	tr       *http.Transport
	stats    stats
	hints    *hints

	mu      sync.Mutex
	active  map[string]int                    // proxied requests in progress, by principal
	streams map[[32]byte]map[*stream]struct{} // by session Key: what ends with the session
}

// stream is one proxied request of a session (a WebSocket, an event
// stream, any request in progress): cancel ends it, its connections
// closed.
type stream struct{ cancel context.CancelFunc }

// stats are the counters Collector exposes.
type stats struct {
	results  [numResults]atomic.Uint64
	active   atomic.Int64
	toApp    atomic.Uint64 // bytes written to apps
	fromApp  atomic.Uint64 // bytes read from apps
	upgrades atomic.Uint64
}

// result is how a preview request ended, a label of
// sidecar_preview_requests_total.
type result int

const (
	resultProxied result = iota
	resultUnauthenticated
	resultCrossSite
	resultDenied
	resultLimit
	resultTooLarge
	resultBadGateway
	numResults
)

var resultNames = [numResults]string{"proxied", "unauthenticated", "cross_site", "denied", "limit", "too_large", "bad_gateway"}

type ctxKey struct{}

// reqInfo travels with a proxied request's context.
type reqInfo struct {
	port      int
	prefix    string // what the app is served under: base + "/ports/N", "" in subdomain mode
	viaToken  bool   // authenticated by the Authorization header (taken off)
	renewedID string // the session renewed by this request: its cookie is sent again
	failed    *result
	status    int // the response's status, once known (audit)
	// role is the caller's role when it has a tcp_allow of its own:
	// its connections to the app are dialed under it and pooled apart
	// (rewrite, dial).
	role auth.Role
}

// New returns the preview of opts.
func New(opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	s := &Server{
		opts:     opts,
		sessions: NewSessions(opts.Config.SessionTTL, opts.Config.MaxSessions, opts.Now),
		active:   map[string]int{},
		streams:  map[[32]byte]map[*stream]struct{}{},
		hints:    newHints(),
	}
	s.sessions.onForget = s.endStreams
	s.tr = &http.Transport{
		Proxy:                  nil, // never an environment proxy: the app is local
		DialContext:            s.dial,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: int64(opts.Config.MaxHeaderBytes),
		DisableCompression:     true, // Accept-Encoding passes through as sent
		ForceAttemptHTTP2:      false,
	}
	s.proxy = &httputil.ReverseProxy{
		Rewrite:        s.rewrite,
		Transport:      s.tr,
		FlushInterval:  -1, // every write flushed: server-sent events, chunked streams
		ModifyResponse: s.modifyResponse,
		ErrorHandler:   s.proxyError,
		ErrorLog:       opts.Log.Named("proxy").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	return s
}

// Sessions returns the session store (tests, metrics).
func (s *Server) Sessions() *Sessions { return s.sessions }

// Close closes the idle connections to apps.
func (s *Server) Close() { s.tr.CloseIdleConnections() }

// dial opens the app's port: 127.0.0.1 first, then ::1 (a dev server
// listening on "localhost" may have taken either), each under the policy.
// addr is "localhost:<port>", or "<role>.localhost:<port>" for a role
// with a tcp_allow of its own (dialed under it), what rewrite puts in
// the URL.
func (s *Server) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	h, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	role := auth.Role(strings.TrimSuffix(h, ".localhost"))
	if role == "localhost" {
		role = ""
	}
	var first error
	firstDenied := false
	for _, host := range loopbacks {
		c, err := s.opts.Dialer.DialAs(ctx, role, host.String(), port)
		if err == nil {
			_ = c.SetLinger(-1) // an HTTP connection closes gracefully
			return &countedConn{Conn: c, idle: s.opts.Config.IdleTimeout, st: &s.stats}, nil
		}
		var oe *tcp.OpenError
		isOE := errors.As(err, &oe)
		// A refusal by policy is what to report over "nothing listens"
		// on the other address: the app may well be there.
		if first == nil || (isOE && oe.Kind == tcp.KindDenied && !firstDenied) {
			first, firstDenied = err, isOE && oe.Kind == tcp.KindDenied
		}
		if isOE && oe.Kind != tcp.KindRefused && oe.Kind != tcp.KindDenied {
			break
		}
	}
	return nil, first
}

// loopbacks are the addresses a port's preview reaches, in order.
var loopbacks = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}

// roleAllows is nil when who may reach port on some loopback address
// (or neither its role nor its tokens file entry has a tcp_allow of its
// own), else the refusal forward -L gets (tcp.Dialer.CheckFor), for the
// first address. Checked on every request: a pooled connection is not
// dialed again.
func (s *Server) roleAllows(who auth.Identity, port int) error {
	if !s.opts.Dialer.NarrowedFor(who) {
		return nil
	}
	var first error
	for _, a := range loopbacks {
		err := s.opts.Dialer.CheckFor(who, a, port)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// countedConn counts a connection to an app and closes it once no byte
// went either way for idle (its deadlines move with every read and
// write; a pooled keep-alive connection idle that long is closed too).
type countedConn struct {
	net.Conn
	idle time.Duration
	st   *stats
}

func (c *countedConn) Read(p []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Read(p)
	c.st.fromApp.Add(uint64(n))
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	d := time.Now().Add(c.idle)
	_ = c.Conn.SetReadDeadline(d) // a long upload is not idle
	_ = c.Conn.SetWriteDeadline(d)
	n, err := c.Conn.Write(p)
	c.st.toApp.Add(uint64(n))
	return n, err
}

// Handler serves PortsPath (mount it at the page's root mux, base taken
// off: r.URL.Path is "/ports/N/...").
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest := strings.TrimPrefix(r.URL.Path, PortsPath)
		ps, tail, slash := strings.Cut(rest, "/")
		port, ok := parsePort(ps)
		if !ok {
			http.Error(w, "404 not found: a preview is at "+s.opts.Base+"/ports/PORT/ (PORT 1-65535)", http.StatusNotFound)
			return
		}
		if !slash {
			to := s.opts.Base + PortsPath + ps + "/"
			if r.URL.RawQuery != "" {
				to += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, to, http.StatusPermanentRedirect)
			return
		}
		prefix := s.opts.Base + PortsPath + ps
		rawTail := "/" + tail
		if esc := r.URL.EscapedPath(); strings.HasPrefix(esc, PortsPath+ps+"/") {
			rawTail = strings.TrimPrefix(esc, PortsPath+ps)
		}
		s.serve(w, r, port, prefix, "/"+tail, rawTail, false)
	})
}

// parsePort parses a port number 1-65535 written in decimal digits only.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" || s[0] == '0' {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, false
	}
	return n, true
}

// serve checks, authenticates and bounds one preview request, then
// proxies it to port with path (rawPath, escaped) in place of the prefix.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, port int, prefix, path, rawPath string, sub bool) {
	if why, ok := s.sameSite(r, sub); !ok {
		s.refuse(w, r, resultCrossSite, http.StatusForbidden, why)
		return
	}
	who, viaToken, sid, renewedID, ok := s.authenticate(r)
	if !ok {
		login := s.opts.Base + "/"
		if sub {
			login = "the sidecar page"
		}
		s.refuse(w, r, resultUnauthenticated, http.StatusUnauthorized,
			"this preview needs the sidecar page's login: log in at "+login+" and open the port from there (scripts: Authorization: Bearer TOKEN)")
		return
	}
	principal := who.Name
	status := 0 // the answer's, for the audit
	defer s.audit(who, r.Method, port, path, &status, s.opts.Now())
	if d := auth.Check(who, auth.PreviewOpen); d != nil {
		status = http.StatusForbidden
		s.denied(who, d.Permission, port, "")
		s.refuse(w, r, resultDenied, http.StatusForbidden, d.Error())
		return
	}
	if err := s.roleAllows(who, port); err != nil {
		status = http.StatusForbidden
		s.denied(who, auth.TCPOpen, port, err.Error())
		s.refuse(w, r, resultDenied, http.StatusForbidden, "port "+strconv.Itoa(port)+": "+err.Error()+" (as for sidecar forward)")
		return
	}
	if n := headerBytes(r); n > s.opts.Config.MaxHeaderBytes {
		status = http.StatusRequestHeaderFieldsTooLarge
		s.refuse(w, r, resultTooLarge, http.StatusRequestHeaderFieldsTooLarge,
			fmt.Sprintf("request headers of %d bytes, over preview.max_header_bytes (%d)", n, s.opts.Config.MaxHeaderBytes))
		return
	}
	if r.ContentLength > s.opts.Config.MaxBodyBytes {
		status = http.StatusRequestEntityTooLarge
		s.refuse(w, r, resultTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("request body of %d bytes, over preview.max_body_bytes (%d)", r.ContentLength, s.opts.Config.MaxBodyBytes))
		return
	}
	if !s.acquire(principal) {
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "1")
		s.refuse(w, r, resultLimit, http.StatusTooManyRequests,
			fmt.Sprintf("%d preview requests of this login in progress already (preview.max_connections_per_principal)", s.opts.Config.MaxConnectionsPerPrincipal))
		return
	}
	defer s.release(principal)
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.Config.MaxBodyBytes)
	}
	var failed result = -1
	info := &reqInfo{port: port, prefix: prefix, viaToken: viaToken, renewedID: renewedID, failed: &failed}
	if s.opts.Dialer.Narrowed(who.Role) {
		info.role = who.Role
	}
	defer func() { status = info.status }()
	ctx := r.Context()
	if sid != "" {
		var stop func()
		ctx, stop = s.track(ctx, sid)
		defer stop()
	}
	out := r.Clone(context.WithValue(ctx, ctxKey{}, info))
	out.URL.Path, out.URL.RawPath = path, rawPath
	if out.URL.RawPath == out.URL.EscapedPath() && out.URL.RawPath == path {
		out.URL.RawPath = ""
	}
	if r.Header.Get("Upgrade") != "" {
		s.stats.upgrades.Add(1)
	}
	// Deferred: a response cut by the app (or the idle timeout) ends the
	// proxy with http.ErrAbortHandler, a panic the server recovers.
	defer func() {
		if failed < 0 {
			failed = resultProxied
		}
		s.stats.results[failed].Add(1)
	}()
	s.proxy.ServeHTTP(w, out)
}

// denied logs and audits (permission.denied) who's request for port
// refused perm; detail, when set, is the refusal's own text.
func (s *Server) denied(who auth.Identity, perm auth.Permission, port int, detail string) {
	kv := []any{"principal", who.Name, "role", string(who.Role), "permission", string(perm), "port", port}
	attrs := map[string]any{"permission": string(perm), "target": fmt.Sprintf("preview port %d", port)}
	if detail != "" {
		kv = append(kv, "error", detail)
		attrs["error"] = detail
	}
	s.opts.Log.Warn("permission denied", kv...)
	if s.opts.Audit != nil {
		s.opts.Audit.Record(audit.Event{Time: s.opts.Now(), Action: audit.ActionPermissionDenied, Principal: who.Name, Role: string(who.Role), Attrs: attrs})
	}
}

// audit records the authenticated request of who once answered.
func (s *Server) audit(who auth.Identity, method string, port int, path string, status *int, start time.Time) {
	if s.opts.Audit == nil {
		return
	}
	s.opts.Audit.Record(audit.Event{Time: start, Action: audit.ActionPreviewRequest, Principal: who.Name, Role: string(who.Role), Attrs: map[string]any{
		"server.port": port, "http.request.method": method, "url.path": path,
		"http.response.status_code": *status, "duration": s.opts.Now().Sub(start),
	}})
}

// headerBytes is about what r's request line and headers took on the wire.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + 12
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// sameSite refuses what a browser sent on another site's behalf:
// Sec-Fetch-Site cross-site (same-site too, but in subdomain mode, where
// the page and the previews are siblings), and an Origin the listener
// does not allow (in subdomain mode, the preview's own origin is allowed).
func (s *Server) sameSite(r *http.Request, sub bool) (string, bool) {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	case "same-site":
		if !sub {
			return "a request from another origin of this site (Sec-Fetch-Site: same-site)", false
		}
	default:
		return "a cross-site request (Sec-Fetch-Site: " + strconv.Quote(site) + ")", false
	}
	origin := r.Header.Get("Origin")
	if origin == "" || s.opts.Origins == nil || s.opts.Origins.Allowed(origin) {
		return "", true
	}
	if sub {
		if n, ok := transport.NormalizeOrigin(origin); ok {
			if self, ok2 := transport.NormalizeOrigin("https://" + r.Host); ok2 && n == self {
				return "", true
			}
		}
	}
	return "a request from origin " + strconv.Quote(origin) + ", which the listener does not allow", false
}

// authenticate finds who r is: a valid session cookie (sid; renewed
// when past half its life: renewedID), or the credential in its
// Authorization header.
func (s *Server) authenticate(r *http.Request) (who auth.Identity, viaToken bool, sid, renewedID string, ok bool) {
	// The session first: an app's own Authorization header, beside the
	// page's cookie, is not a credential to decide (nor to audit).
	for _, c := range r.CookiesNamed(CookieName) {
		if p, ok, renewed := s.sessions.Check(c.Value, true); ok {
			if renewed {
				renewedID = c.Value
			}
			return p, false, c.Value, renewedID, true
		}
	}
	if id, ok := s.bearer(r, "preview"); ok {
		return id, true, "", "", true
	}
	return auth.Identity{}, false, "", "", false
}

// track ties a request of session sid to it: the returned context ends
// when the session is forgotten (logout, revocation, eviction by
// preview.max_sessions) or expires while the request is in progress (a
// WebSocket or event stream opened with it, which renews nothing), so
// its connections to the browser and the app are closed. stop, when the
// request is done, unties it.
func (s *Server) track(parent context.Context, sid string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	key := Key(sid)
	st := &stream{cancel: cancel}
	s.mu.Lock()
	if s.streams[key] == nil {
		s.streams[key] = map[*stream]struct{}{}
	}
	s.streams[key][st] = struct{}{}
	s.mu.Unlock()
	// The expiry: checked when the session would expire, again at its new
	// expiry while it is renewed by other requests.
	var t *time.Timer
	check := func() {
		if _, ok, _ := s.sessions.Check(sid, false); !ok {
			cancel() // forgotten already, or expired now (endStreams ran)
			return
		}
		exp, ok := s.sessions.Expires(sid)
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, live := s.streams[key][st]; live && ok {
			t.Reset(exp.Sub(s.opts.Now())) // not once stop has run
		}
	}
	t = time.AfterFunc(time.Hour, check)
	if exp, ok := s.sessions.Expires(sid); ok {
		t.Reset(exp.Sub(s.opts.Now()))
	}
	return ctx, func() {
		s.mu.Lock()
		if m := s.streams[key]; m != nil {
			delete(m, st)
			if len(m) == 0 {
				delete(s.streams, key)
			}
		}
		t.Stop()
		s.mu.Unlock()
		cancel()
	}
}

// endStreams ends every request in progress of the session kept as key
// (Sessions.onForget).
func (s *Server) endStreams(key [32]byte) {
	s.mu.Lock()
	m := s.streams[key]
	delete(s.streams, key)
	s.mu.Unlock()
	for st := range m {
		st.cancel()
	}
}

func (s *Server) acquire(principal string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[principal] >= s.opts.Config.MaxConnectionsPerPrincipal {
		return false
	}
	s.active[principal]++
	s.stats.active.Add(1)
	return true
}

func (s *Server) release(principal string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[principal]--; s.active[principal] <= 0 {
		delete(s.active, principal)
	}
	s.stats.active.Add(-1)
}

// refuse answers a request the preview does not pass on: status, a
// plain-text why, counted under res.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, res result, status int, why string) {
	s.stats.results[res].Add(1)
	s.opts.Log.Debug("preview request refused", "path", r.URL.Path, "status", status, "reason", why)
	w.Header().Set("Cache-Control", "no-store")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sidecar"`)
	}
	http.Error(w, fmt.Sprintf("%d %s: %s", status, http.StatusText(status), why), status)
}

// rewrite is the ReverseProxy's Rewrite: the app's URL, X-Forwarded-*,
// and the daemon's credentials taken off.
func (s *Server) rewrite(pr *httputil.ProxyRequest) {
	info := pr.In.Context().Value(ctxKey{}).(*reqInfo)
	host := "localhost"
	if info.role != "" {
		// A pool of its own: an idle connection another role dialed
		// (to an address this one may not reach) is never reused.
		host = string(info.role) + ".localhost"
	}
	pr.SetURL(&url.URL{Scheme: "http", Host: host + ":" + strconv.Itoa(info.port)})
	pr.Out.Host = "localhost:" + strconv.Itoa(info.port)
	pr.SetXForwarded()
	pr.Out.Header.Del("X-Forwarded-Prefix")
	if info.prefix != "" {
		pr.Out.Header.Set("X-Forwarded-Prefix", info.prefix)
	}
	if info.viaToken {
		cred := transport.BearerToken(pr.In)
		pr.Out.Header.Del("Authorization")
		if cred != s.opts.Token {
			scrubToken(pr.Out.Header, pr.Out.URL, cred)
		}
	}
	stripCookie(pr.Out.Header, CookieName)
	if s.opts.Token != "" {
		scrubToken(pr.Out.Header, pr.Out.URL, s.opts.Token)
	}
}

// stripCookie removes every cookie called name from h's Cookie headers,
// the others kept byte for byte.
func stripCookie(h http.Header, name string) {
	stripCookies(h, func(n, _ string) bool { return n == name })
}

// stripCookies removes every cookie drop(name, value) is true of from h's
// Cookie headers, the others kept byte for byte.
func stripCookies(h http.Header, drop func(name, value string) bool) {
	var kept []string
	for _, line := range h.Values("Cookie") {
		var parts []string
		for part := range strings.SplitSeq(line, ";") {
			n, v, _ := strings.Cut(strings.TrimSpace(part), "=")
			if !drop(n, v) && strings.TrimSpace(part) != "" {
				parts = append(parts, strings.TrimSpace(part))
			}
		}
		if len(parts) > 0 {
			kept = append(kept, strings.Join(parts, "; "))
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// modifyResponse puts the app's Location and cookies under the prefix,
// keeps it from acting on the daemon's origin, and sends a renewed
// session's cookie again.
func (s *Server) modifyResponse(res *http.Response) error {
	info := res.Request.Context().Value(ctxKey{}).(*reqInfo)
	info.status = res.StatusCode
	h := res.Header
	if loc := h.Get("Location"); loc != "" {
		h.Set("Location", rewriteLocation(loc, info.prefix, info.port))
	}
	if cs := h.Values("Set-Cookie"); len(cs) > 0 {
		h.Del("Set-Cookie")
		for _, c := range cs {
			if c2, ok := rewriteSetCookie(c, info.prefix); ok {
				h.Add("Set-Cookie", c2)
			}
		}
	}
	if info.prefix != "" {
		// Same origin as the page: the app may not clear the page's
		// storage, nor widen a service worker's scope past its prefix.
		h.Del("Clear-Site-Data")
		h.Del("Service-Worker-Allowed")
	}
	if info.renewedID != "" {
		h.Add("Set-Cookie", s.cookie(info.renewedID, s.cookiePath(info.prefix == ""), int(s.sessions.TTL().Seconds())).String())
	}
	return nil
}

// rewriteLocation puts a redirect of the app under prefix: an absolute
// path, or an absolute URL to the app itself (http://localhost:PORT/...,
// 127.0.0.1, [::1]), becomes prefix + path; anything else is kept.
func rewriteLocation(loc, prefix string, port int) string {
	u, err := url.Parse(loc)
	if err != nil {
		return loc
	}
	if u.Scheme != "" || u.Host != "" {
		if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "" {
			return loc
		}
		host := u.Hostname()
		if (host != "localhost" && host != "127.0.0.1" && host != "::1") || u.Port() != strconv.Itoa(port) {
			return loc
		}
		u.Scheme, u.Host, u.User = "", "", nil
	}
	if !strings.HasPrefix(u.Path, "/") {
		return u.String()
	}
	u.Path = prefix + u.Path
	if u.RawPath != "" {
		u.RawPath = prefix + u.RawPath
	}
	return u.String()
}

// rewriteSetCookie puts an app's cookie under prefix: Path=/x becomes
// Path=prefix/x (no Path: the browser's default, under the prefix
// already), Domain is dropped (the app's host is not the browser's); a
// cookie named CookieName is dropped (ok false).
func rewriteSetCookie(line, prefix string) (string, bool) {
	parts := strings.Split(line, ";")
	name, _, _ := strings.Cut(strings.TrimSpace(parts[0]), "=")
	if strings.TrimSpace(name) == CookieName {
		return "", false
	}
	out := parts[:1]
	for _, a := range parts[1:] {
		k, v, _ := strings.Cut(strings.TrimSpace(a), "=")
		switch strings.ToLower(k) {
		case "domain":
			continue
		case "path":
			if prefix != "" && strings.HasPrefix(v, "/") {
				a = " Path=" + prefix + v
			}
		}
		out = append(out, a)
	}
	return strings.Join(out, ";"), true
}

// proxyError answers a request the app could not be reached for, or whose
// body was over the bound.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	info := r.Context().Value(ctxKey{}).(*reqInfo)
	var oe *tcp.OpenError
	var mbe *http.MaxBytesError
	info.status = http.StatusBadGateway
	switch {
	case errors.As(err, &oe) && oe.Kind == tcp.KindDenied:
		info.status = http.StatusForbidden
		*info.failed = resultDenied
		s.opts.Log.Debug("preview refused by policy", "port", info.port, "error", err)
		http.Error(w, "403 Forbidden: port "+strconv.Itoa(info.port)+": "+oe.Error()+" (tcp.allow, as for sidecar forward)", http.StatusForbidden)
	case errors.As(err, &mbe):
		info.status = http.StatusRequestEntityTooLarge
		*info.failed = resultTooLarge
		http.Error(w, fmt.Sprintf("413 Request Entity Too Large: request body over preview.max_body_bytes (%d)", mbe.Limit), http.StatusRequestEntityTooLarge)
	case errors.As(err, &oe) && oe.Kind == tcp.KindRefused:
		*info.failed = resultBadGateway
		http.Error(w, "502 Bad Gateway: nothing listens on port "+strconv.Itoa(info.port)+" (127.0.0.1 or ::1)", http.StatusBadGateway)
	case errors.Is(err, context.Canceled):
		*info.failed = resultBadGateway
		info.status = 499
		w.WriteHeader(499) // the browser went away: nobody reads this
	default:
		*info.failed = resultBadGateway
		s.opts.Log.Debug("preview proxy error", "port", info.port, "error", err)
		http.Error(w, "502 Bad Gateway: port "+strconv.Itoa(info.port)+": "+err.Error(), http.StatusBadGateway)
	}
}

// cookiePath is the session cookie's Path: the page's base path ("/" for
// none); host-only "/" on a port's subdomain.
func (s *Server) cookiePath(sub bool) string {
	if sub || s.opts.Base == "" {
		return "/"
	}
	return s.opts.Base
}

func (s *Server) cookie(id, path string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: id, Path: path, MaxAge: maxAge,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode}
}

// SessionResponse is the body of a POST <base>/web/session answer.
type SessionResponse struct {
	// ExpiresInMs is the session's life (renewed by use, or by posting
	// again).
	ExpiresInMs int64  `json:"expiresInMs,omitempty"`
	Error       string `json:"error,omitempty"`
}

// SessionHandler serves SessionPath, LogoutPath and StatusPath (mount
// each at the page's root mux, base taken off).
func (s *Server) SessionHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.Path == StatusPath {
			s.status(w, r)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if why, ok := s.sameSite(r, false); !ok {
			s.stats.results[resultCrossSite].Add(1)
			http.Error(w, "403 Forbidden: "+why, http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		old := ""
		if c, err := r.Cookie(CookieName); err == nil {
			old = c.Value
		}
		switch r.URL.Path {
		case LogoutPath:
			if old != "" {
				s.sessions.Revoke(old)
			}
			http.SetCookie(w, s.cookie("", s.cookiePath(false), -1))
			_ = json.NewEncoder(w).Encode(SessionResponse{})
		case SessionPath:
			who, ok := s.bearer(r, "preview")
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sidecar"`)
				w.WriteHeader(http.StatusUnauthorized)
				_ = json.NewEncoder(w).Encode(SessionResponse{Error: "missing or wrong token (send it as Authorization: Bearer TOKEN)"})
				return
			}
			id, err := s.sessions.Create(who)
			if err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				_ = json.NewEncoder(w).Encode(SessionResponse{Error: err.Error()})
				return
			}
			if old != "" {
				s.sessions.Revoke(old) // renewed by a new one: the old one is worth nothing
			}
			http.SetCookie(w, s.cookie(id, s.cookiePath(false), int(s.sessions.TTL().Seconds())))
			_ = json.NewEncoder(w).Encode(SessionResponse{ExpiresInMs: s.sessions.TTL().Milliseconds()})
		default:
			http.NotFound(w, r)
		}
	})
}
