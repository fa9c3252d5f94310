// Package web serves the sidecar's web page at /: the host's terminals in
// xterm.js, its listening ports and a few live metrics, over WebTransport
// with a fallback to transport-io's WebSocket mapping. The page is built
// from ui/ (TypeScript, esbuild; `make web`) into dist/, which is
// committed and embedded, so `go build` needs no npm.
package web

import (
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strconv"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/transport"
)

//go:embed dist
var dist embed.FS

// InfoPath answers the page's POST with what it needs before connecting.
const InfoPath = "/web/info"

// TicketPath exchanges the token (Authorization: Bearer, never a query)
// for a single-use ticket the page puts in its transport-io URLs
// (docs/protocol.md "Tickets").
const TicketPath = "/web/ticket"

// Options configure the page's handler.
type Options struct {
	// Origins is the listener's origin rule: /web/info answers a refused
	// origin with 403 and a message the page shows.
	Origins *transport.Origins
	// CertHashes returns the SHA-256 pins (hex) of the certificate the
	// browser may trust for WebTransport (serverCertificateHashes): the
	// development certificate's, or none for one a CA signed.
	CertHashes func() []string
	// Auth and Tickets serve POST /web/ticket: a request bearing a
	// credential Auth accepts is given a ticket issued to its identity.
	// Without Tickets the path is not served.
	Auth    auth.Authenticator
	Tickets *transport.Tickets
	// Audit records each decision ("auth.success", "auth.failure");
	// nil is audit.Discard.
	Audit audit.Sink
	// OnRefused, if set, is told of every ticket request refused (a
	// wrong or missing token: 401; the bound reached: 429), to log it
	// (at a bounded rate: a guesser may send many).
	OnRefused func(r *http.Request, status int, why string)
}

// Ticket is the body of a /web/ticket answer: the ticket, or why none.
type Ticket struct {
	Ticket      string `json:"ticket,omitempty"`
	ExpiresInMs int64  `json:"expiresInMs,omitempty"`
	Error       string `json:"error,omitempty"`
	// Reason is why a 401 refused the credential, as the door's
	// WT_UNAUTHORIZED reason would say: "unauthorized", "expired",
	// "revoked" (the page tells a sign-in that expired from a wrong
	// token).
	Reason string `json:"reason,omitempty"`
}

// Info is the body of a /web/info answer.
type Info struct {
	CertHashes []string `json:"certHashes"`
	Error      string   `json:"error,omitempty"`
}

// contentSecurity allows nothing from elsewhere: scripts, styles and
// connections to this origin only (xterm.js sets inline styles).
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page (mount it at "/"): / and /assets/ from the
// embedded build, POST /web/info, POST /web/ticket, 404 for anything else.
func Handler(opts Options) http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err)
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurity)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		switch {
		case r.URL.Path == InfoPath:
			info(w, r, opts)
		case r.URL.Path == TicketPath && opts.Tickets != nil:
			ticket(w, r, opts)
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		case r.URL.Path == "/":
			h.Set("Cache-Control", "no-cache")
			files.ServeHTTP(w, r)
		case path.Dir(r.URL.Path) == "/assets":
			h.Set("Cache-Control", "no-cache")
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// post lets a POST from an allowed origin through, with the JSON answer's
// headers set; it answers anything else itself (405, or 403 with body,
// the refused origin's message in its Error).
func post(w http.ResponseWriter, r *http.Request, opts Options, refused func(msg string) any) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	origin := r.Header.Get("Origin")
	if opts.Origins != nil && !opts.Origins.Allowed(origin) {
		if opts.Origins.OnRefuse != nil {
			opts.Origins.OnRefuse(r, origin)
		}
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(refused("The daemon refuses this page's origin " + strconv.Quote(origin) +
			": open the page at the daemon's own address, or add the origin to listener.origins in its configuration."))
		return false
	}
	return true
}

func info(w http.ResponseWriter, r *http.Request, opts Options) {
	if !post(w, r, opts, func(msg string) any { return Info{CertHashes: []string{}, Error: msg} }) {
		return
	}
	out := Info{CertHashes: []string{}}
	if opts.CertHashes != nil {
		out.CertHashes = append(out.CertHashes, opts.CertHashes()...)
	}
	_ = json.NewEncoder(w).Encode(out)
}

func (o Options) refused(r *http.Request, status int, why string) {
	if o.OnRefused != nil {
		o.OnRefused(r, status, why)
	}
}

// ticket answers POST /web/ticket: a ticket for the bearer of the token
// in the Authorization header (a token in the URL is not looked at:
// this exchange exists so that none is ever put there).
func ticket(w http.ResponseWriter, r *http.Request, opts Options) {
	if !post(w, r, opts, func(msg string) any { return Ticket{Error: msg} }) {
		return
	}
	var who auth.Identity
	err := error(auth.ErrUnknown)
	if tok := transport.BearerToken(r); tok != "" && opts.Auth != nil {
		who, err = opts.Auth.Authenticate(r.Context(), tok)
	}
	var ref *auth.Refusal
	if err != nil && !errors.As(err, &ref) {
		transport.RecordFailure(opts.Audit, r, "web", "authorize failed")
		opts.refused(r, http.StatusServiceUnavailable, "authorize failed: "+err.Error())
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(Ticket{Error: "authorize failed: try again"})
		return
	}
	if err != nil {
		transport.RecordFailure(opts.Audit, r, "web", ref.Reason)
		opts.refused(r, http.StatusUnauthorized, "missing or wrong token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="sidecar"`)
		w.WriteHeader(http.StatusUnauthorized)
		msg := "missing or wrong token (send it as Authorization: Bearer TOKEN)"
		switch ref.Reason {
		case auth.ErrExpired.Reason:
			msg = "the credential expired: sign in again, or send a new one"
		case auth.ErrRevoked.Reason:
			msg = "the credential was revoked"
		}
		_ = json.NewEncoder(w).Encode(Ticket{Error: msg, Reason: ref.Reason})
		return
	}
	transport.RecordSuccess(opts.Audit, r, "web", who, who.Method)
	k, err := opts.Tickets.Issue(who)
	if errors.Is(err, transport.ErrTooManyTickets) {
		opts.refused(r, http.StatusTooManyRequests, err.Error())
		w.Header().Set("Retry-After", strconv.Itoa(int(opts.Tickets.TTL().Seconds())))
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(Ticket{Error: err.Error() + ": try again when some are used or expired"})
		return
	}
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(Ticket{Error: err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(Ticket{Ticket: k, ExpiresInMs: opts.Tickets.TTL().Milliseconds()})
}
