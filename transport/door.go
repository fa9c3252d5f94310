package transport

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/transportio"
)

// CloseUnauthorized closes a connection whose credential stopped being
// valid while it was open: revoked (the tokens file no longer has it) or
// expired (Identity.Expiry). On transport-io it is WT_UNAUTHORIZED (1007;
// 4007 on the WebSocket mapping, seed 002 §4, §10.2); /ahp has no such
// code of its own and uses the same 4007 in the private range, so a
// client reads one code on both. The reason is "revoked" or "expired".
// A client treats it as final: reconnecting with the same credential is
// refused.
const CloseUnauthorized CloseCode = 4007

// The close reasons of CloseUnauthorized.
const (
	ReasonRevoked = "revoked"
	ReasonExpired = "expired"
)

// ReasonTryAgain is the reason of /ahp's 503 when the daemon reached no
// decision on the credential (its body: "503 authorize failed: try
// again"), which tells it from a proxy's 503.
const ReasonTryAgain = "try again"

// identityKey carries the Identity a door decided in a serve context.
type identityKey struct{}

// WithIdentity returns ctx carrying id (what a door decided).
func WithIdentity(ctx context.Context, id auth.Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity a door put in ctx: the serve
// functions of AHPHandler, TIOWebSocketHandler and NewWebTransportServer
// get it in theirs. auth.Anonymous when none.
func IdentityFrom(ctx context.Context) auth.Identity {
	if id, ok := ctx.Value(identityKey{}).(auth.Identity); ok {
		return id
	}
	return auth.Anonymous
}

// The audit actions of a door.
const (
	AuditSuccess = "auth.success"
	AuditFailure = "auth.failure"
)

// authenticate runs a at a door: credential (never recorded) decided,
// the outcome recorded in sink: "auth.success" with the identity, the
// method, the peer address and the transport; "auth.failure" with the
// reason (the refusal's, or "authorize failed" when no decision was
// reached), the peer address and the transport.
func authenticate(a auth.Authenticator, sink audit.Sink, r *http.Request, transportName, credential string) (auth.Identity, error) {
	var id auth.Identity
	err := error(auth.ErrUnknown)
	if a != nil && credential != "" {
		id, err = a.Authenticate(r.Context(), credential)
	}
	if err != nil {
		RecordFailure(sink, r, transportName, failureReason(err))
		return auth.Identity{}, err
	}
	RecordSuccess(sink, r, transportName, id, id.Method)
	return id, nil
}

// failureReason is err's refusal reason, or "authorize failed"
// (transportio.ReasonAuthorizeFailed) when no decision was reached.
func failureReason(err error) string {
	var ref *auth.Refusal
	if errors.As(err, &ref) {
		return ref.Reason
	}
	return transportio.ReasonAuthorizeFailed
}

// RecordSuccess records an "auth.success" of id at a door (method: how
// it came in: "token", "tokens_file", "oidc", "ticket", "session").
func RecordSuccess(sink audit.Sink, r *http.Request, transportName string, id auth.Identity, method string) {
	if sink == nil {
		return
	}
	sink.Record(audit.Event{Time: time.Now(), Action: AuditSuccess, Principal: id.Name, Role: string(id.Role), Attrs: map[string]any{
		"auth.method": method, "network.peer.address": r.RemoteAddr, "transport": transportName,
	}})
}

// RecordFailure records an "auth.failure" at a door: reason, never the
// credential.
func RecordFailure(sink audit.Sink, r *http.Request, transportName, reason string) {
	if sink == nil {
		return
	}
	sink.Record(audit.Event{Time: time.Now(), Action: AuditFailure, Attrs: map[string]any{
		"reason": reason, "network.peer.address": r.RemoteAddr, "transport": transportName,
	}})
}
