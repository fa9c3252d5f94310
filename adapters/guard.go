package adapters

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/internal/lograte"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Guard checks the caller's role before an operation (auth.Permission,
// docs/operations.md "Roles and sharing") and turns a refusal into the
// protocol's PermissionDenied (-32009) naming the permission, logged once
// per identity and permission in RefusalLogWindow (the ones after it
// counted, and the count logged when the window ends); every refusal is
// an audit event (audit.ActionPermissionDenied: permission, target). The
// host makes one and gives it to every kind (Env.Guard). Its methods are
// safe for concurrent use; a nil Guard checks without logging.
type Guard struct {
	log   hclog.Logger
	audit audit.Sink // nil: none
	l     lograte.Limiter[guardKey]
}

// RefusalLogWindow is how long a refusal of one identity's permission
// is logged once for: a viewer typing into a read-only terminal logs one
// line, then the count.
const RefusalLogWindow = time.Minute

type guardKey struct {
	principal string
	perm      auth.Permission
}

// NewGuard returns a Guard logging to log.
func NewGuard(log hclog.Logger) *Guard {
	return &Guard{log: log.Named("auth")}
}

// SetLogger makes the guard log to l from now on; call it before the
// guard is used (the host does, once the log is teed to its logs
// channel).
func (g *Guard) SetLogger(l hclog.Logger) {
	if g != nil {
		g.log = l.Named("auth")
	}
}

// SetAudit makes the guard record each refusal in sink; call it before
// the guard is used.
func (g *Guard) SetAudit(sink audit.Sink) {
	if g != nil {
		g.audit = sink
	}
}

// Check returns nil when id's role allows p, else the -32009 refusal
// ("permission denied: terminal.input needs role user or owner; alice is
// viewer"), logged and audited.
func (g *Guard) Check(id auth.Identity, p auth.Permission) *rpc.Error {
	return g.CheckOn(id, p, "")
}

// CheckOn is Check naming what is refused, target (a channel URI, a
// method), in the log and the audit event.
func (g *Guard) CheckOn(id auth.Identity, p auth.Permission, target string) *rpc.Error {
	d := auth.Check(id, p)
	if d == nil {
		return nil
	}
	d.Target = target
	return g.Refuse(d)
}

// Refuse logs d (once per identity and permission in RefusalLogWindow),
// records it as an audit event, and returns it as a -32009 error.
func (g *Guard) Refuse(d *auth.Denied) *rpc.Error {
	msg := d.Error()
	if g != nil && g.audit != nil {
		attrs := map[string]any{"permission": string(d.Permission)}
		if d.Target != "" {
			attrs["target"] = d.Target
		}
		g.audit.Record(audit.Event{Time: time.Now(), Action: audit.ActionPermissionDenied, Principal: d.Identity.Name, Role: string(d.Identity.Role), Attrs: attrs})
	}
	if g != nil && g.log != nil {
		key := guardKey{d.Identity.Name, d.Permission}
		if g.l.First(key, RefusalLogWindow, func(n int, window time.Duration) {
			g.log.Warn("permission denied more times", "principal", key.principal, "permission", string(key.perm), "count", n, "within", window.String())
		}) {
			g.log.Warn("permission denied", "principal", d.Identity.Name, "role", string(d.Identity.Role), "method", d.Identity.Method, "permission", string(d.Permission), "target", d.Target, "error", msg)
		}
	}
	return &rpc.Error{Code: rpc.CodePermissionDenied, Message: msg}
}

// Stop ends the log windows, logging their counts now (the host's
// shutdown).
func (g *Guard) Stop() {
	if g == nil {
		return
	}
	g.l.Stop(func(k guardKey, n int) {
		g.log.Warn("permission denied more times", "principal", k.principal, "permission", string(k.perm), "count", n)
	})
}
