package auth

import (
	"context"
	"errors"
)

// Authenticator decides which identity a bearer credential stands for:
// the single auth.token, an entry of the tokens file, an OIDC ID token.
type Authenticator interface {
	// Authenticate returns credential's identity, or an error: a
	// *Refusal when the answer is no (the credential is unknown, expired
	// or revoked: final, seed 002 §10.2 WT_UNAUTHORIZED), any other error
	// when no decision was reached (a verification backend down: the
	// next attempt may succeed, seed 002 §4).
	Authenticate(ctx context.Context, credential string) (Identity, error)
}

// Refusal is an Authenticator's no. Reason is the close reason sent to
// the peer (1 to 123 bytes, seed 002 §4): "unauthorized", "expired",
// "revoked"; it never carries the credential.
type Refusal struct {
	Reason string
}

func (r *Refusal) Error() string { return "credential refused: " + r.Reason }

// The refusals an Authenticator gives.
var (
	ErrUnknown = &Refusal{Reason: "unauthorized"}
	ErrExpired = &Refusal{Reason: "expired"}
	ErrRevoked = &Refusal{Reason: "revoked"}
)

// IsRefusal reports whether err is a decision that the credential is
// refused (a *Refusal), as opposed to a failure to decide.
func IsRefusal(err error) bool {
	var r *Refusal
	return errors.As(err, &r)
}
