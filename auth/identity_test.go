package auth

import (
	"context"
	"testing"
)

func TestParseRole(t *testing.T) {
	for _, r := range Roles {
		got, err := ParseRole(string(r))
		if err != nil || got != r {
			t.Errorf("ParseRole(%q) = %q, %v", r, got, err)
		}
	}
	for _, s := range []string{"", "Owner", "admin", "owner "} {
		if _, err := ParseRole(s); err == nil {
			t.Errorf("ParseRole(%q) accepted", s)
		}
	}
	if got := (Identity{Name: "alice", Role: Viewer}).String(); got != "alice (viewer)" {
		t.Errorf("String = %q", got)
	}
}

func TestIsRefusal(t *testing.T) {
	for _, err := range []error{ErrUnknown, ErrExpired, ErrRevoked, &Refusal{Reason: "x"}} {
		if !IsRefusal(err) {
			t.Errorf("IsRefusal(%v) = false", err)
		}
	}
	if IsRefusal(context.DeadlineExceeded) || IsRefusal(nil) {
		t.Error("IsRefusal of a failure to decide = true")
	}
}
