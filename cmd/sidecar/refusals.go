package main

import (
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/internal/lograte"
	textsafe "github.com/sidecar-dev/sidecar/internal/printable"
)

// refusalKey is what refusals are counted under: the message and the
// peer's IP (its port changes with every connection).
type refusalKey struct{ msg, ip string }

// refusalLog logs refused HTTP requests (a wrong token, a refused origin)
// at a bounded rate: per message and peer IP, the first within a second
// in full, the others counted and logged once when the second ends
// ("msg: more like it", with count). A client retrying a wrong token in
// a loop costs two lines a second, not one per request.
type refusalLog struct {
	log hclog.Logger
	lim lograte.Limiter[refusalKey]
}

func (l *refusalLog) warn(r *http.Request, msg string, args ...any) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	k := refusalKey{msg: msg, ip: ip}
	if l.lim.First(k, 0, func(n int, window time.Duration) {
		l.log.Warn(msg+": more like it", "peer_ip", ip, "count", n, "within", window.String())
	}) {
		l.log.Warn(msg, append([]any{"peer", r.RemoteAddr, "path", headerText(r.URL.Path)}, args...)...)
	}
}

// stop logs the counts not logged yet (shutdown).
func (l *refusalLog) stop() {
	l.lim.Stop(func(k refusalKey, n int) {
		l.log.Warn(k.msg+": more like it", "peer_ip", k.ip, "count", n)
	})
}

// headerText is peer-supplied text (an Origin header, a path: an HTTP
// header may be a megabyte) for a log line, cut and escaped.
func headerText(s string) string { return textsafe.Log(s) }

// queryTokenWarning passes every request to next, and logs (at refusals'
// bounded rate, the path only) one that carries a token in its URL query:
// accepted, for clients that can do nothing else, but the URL ends up in
// proxies' access logs and browsers' history. The page never does this
// (it trades the token for a ticket, docs/protocol.md "Tickets").
func queryTokenWarning(l *refusalLog, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("token") {
			l.warn(r, "token in the URL query: it ends up in proxies' access logs; send it as Authorization: Bearer, or a ticket")
		}
		next.ServeHTTP(w, r)
	})
}
