package pty

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Sharing (docs/protocol.md "Roles and sharing", docs/operations.md
// "Roles and sharing"): who may attach to a terminal and who may type
// into it. A terminal's holder is the principal that created it; an
// owner, the holder, and the identities it is shared with find it
// (Lookup); the others are refused -32009 (terminal.attach). Writing
// (input, resize, claim) needs write access: the holder, an owner, or a
// read-write share; a viewer never has more than read access.

// Access returns what id may do with the terminal: rpc.AccessWrite,
// rpc.AccessRead, or "" (not shared with them: they do not see it).
func (t *Terminal) Access(id auth.Identity) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.accessLocked(id)
}

func (t *Terminal) accessLocked(id auth.Identity) string {
	if id.Role == auth.Owner {
		return rpc.AccessWrite
	}
	access := ""
	if id.Name != "" && id.Name == t.cfg.Holder {
		access = rpc.AccessWrite
	}
	for _, s := range t.shares {
		if (s.With.Principal != "" && s.With.Principal == id.Name) || (s.With.Role != "" && s.With.Role == string(id.Role)) {
			if access == "" || s.Access == rpc.AccessWrite {
				access = s.Access
			}
		}
	}
	if access == rpc.AccessWrite && !id.Allows(auth.TerminalInput) {
		access = rpc.AccessRead // a viewer reads, whatever the share says
	}
	return access
}

// Holder is the principal that created the terminal ("" when an
// anonymous connection did).
func (t *Terminal) Holder() string { return t.cfg.Holder }

// mayManage returns nil when id may kill or share the terminal
// (perm): an owner, or its holder; else the refusal.
func (t *Terminal) mayManage(id auth.Identity, perm auth.Permission) *auth.Denied {
	if id.Role == auth.Owner || (id.Name != "" && id.Name == t.cfg.Holder && id.Allows(perm)) {
		return nil
	}
	holder := t.cfg.Holder
	if holder == "" {
		holder = "an anonymous connection"
	}
	return &auth.Denied{Permission: perm, Identity: id, Target: t.cfg.URI,
		Detail: fmt.Sprintf("%s is held by %s; only its holder or an owner may; %s is %s", t.cfg.URI, holder, nameOf(id), id.Role)}
}

// writeDeniedLocked returns why id may not perm (input, resize, claim) the
// terminal, or nil: the role first, then the access.
func (t *Terminal) writeDeniedLocked(id auth.Identity, perm auth.Permission) *auth.Denied {
	if d := auth.Check(id, perm); d != nil {
		d.Target = t.cfg.URI
		return d
	}
	switch t.accessLocked(id) {
	case rpc.AccessWrite:
		return nil
	case rpc.AccessRead:
		return &auth.Denied{Permission: perm, Identity: id, Target: t.cfg.URI,
			Detail: fmt.Sprintf("%s is shared with %s read-only", t.cfg.URI, nameOf(id))}
	}
	return &auth.Denied{Permission: perm, Identity: id, Target: t.cfg.URI,
		Detail: fmt.Sprintf("%s is not shared with %s (%s)", t.cfg.URI, nameOf(id), id.Role)}
}

func nameOf(id auth.Identity) string {
	if id.Name == "" {
		return "this connection"
	}
	return id.Name
}

// Shares returns the terminal's shares.
func (t *Terminal) Shares() []rpc.TerminalShare {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.shares)
}

// setShare sets (access "": removes) the share with w, journals
// terminal/sharesChanged, lists the terminal again, and returns the
// subscriptions whose identity has no access left (the caller ends
// them, outside the lock) and the shares now; false when a new share
// would pass rpc.MaxShares, or when one to remove is not there.
func (t *Terminal) setShare(w rpc.ShareWith, access string) (ended []adapters.Subscriber, shares []rpc.TerminalShare, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := slices.IndexFunc(t.shares, func(s rpc.TerminalShare) bool { return s.With == w })
	switch {
	case access == "" && i < 0:
		return nil, slices.Clone(t.shares), false
	case access == "":
		t.shares = slices.Delete(t.shares, i, i+1)
	case i >= 0:
		t.shares[i].Access = access
	case len(t.shares) >= rpc.MaxShares:
		return nil, slices.Clone(t.shares), false
	default:
		t.shares = append(t.shares, rpc.TerminalShare{With: w, Access: access})
	}
	shares = slices.Clone(t.shares)
	if shares == nil {
		shares = []rpc.TerminalShare{}
	}
	t.appendLocked(rpc.TerminalSharesChangedAction{Type: rpc.ActionTerminalSharesChanged, Shares: shares})
	for s := range t.subs {
		if t.accessLocked(s.Identity()) == "" {
			ended = append(ended, s)
		}
	}
	t.attachedByLocked()
	t.listLocked()
	return ended, shares, true
}

// attachedByLocked recomputes the catalogue's attachedBy: every live
// subscription's clientId, principal and access, sorted by clientId.
func (t *Terminal) attachedByLocked() bool {
	var by []rpc.AttachedClient
	for s := range t.subs {
		if s.ClientID() == "" || s.Closing() {
			continue
		}
		id := s.Identity()
		by = append(by, rpc.AttachedClient{ClientID: s.ClientID(), Principal: id.Name, Access: t.accessLocked(id)})
	}
	slices.SortFunc(by, func(a, b rpc.AttachedClient) int {
		if a.ClientID != b.ClientID {
			if a.ClientID < b.ClientID {
				return -1
			}
			return 1
		}
		if a.Principal < b.Principal {
			return -1
		}
		if a.Principal > b.Principal {
			return 1
		}
		return 0
	})
	by = slices.Compact(by)
	if slices.Equal(by, t.attachedBy) {
		return false
	}
	t.attachedBy = by
	return true
}

// checkShareWith returns why w is not a share's who, or nil.
func checkShareWith(w rpc.ShareWith) *rpc.Error {
	switch {
	case (w.Principal == "") == (w.Role == ""):
		return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "with" must name exactly one of "principal" and "role"`)
	case len(w.Principal) > rpc.MaxNameBytes:
		return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "with.principal" must be at most %d bytes (got %d)`, rpc.MaxNameBytes, len(w.Principal))
	case w.Role != "":
		if _, err := auth.ParseRole(w.Role); err != nil {
			return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "with.role": %v`, err)
		}
	}
	return nil
}

// share is terminal/share: the holder or an owner shares the terminal
// with a principal or a role, read-only or read-write.
func (k *Kind) share(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.TerminalShareParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	if e := checkShareWith(p.With); e != nil {
		return nil, e
	}
	if p.Access != rpc.AccessRead && p.Access != rpc.AccessWrite {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "access" must be "read" or "write"`)
	}
	t, e := k.managed(c, p.Channel, auth.TerminalShare)
	if e != nil {
		return nil, e
	}
	ended, shares, ok := t.setShare(p.With, p.Access)
	if !ok {
		return nil, rpc.Errorf(rpc.CodePermissionDenied, "terminal share limit reached: %s has %d shares (at most %d); revoke one first", p.Channel, len(shares), rpc.MaxShares)
	}
	k.end(ended, p.Channel)
	k.env.Record(c, audit.ActionTerminalShare, shareAttrs(c, p.Channel, p.With, p.Access, false))
	k.log.Info("terminal shared", "terminal", p.Channel, "with", p.With.String(), "access", p.Access, "by", c.Identity.Name, "client", c.ClientID)
	return rpc.TerminalSharesResult{Shares: shares}, nil
}

// unshare is terminal/unshare: the share with a principal or a role is
// revoked; the subscriptions of identities with no access left end.
func (k *Kind) unshare(_ context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.TerminalUnshareParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	if e := checkShareWith(p.With); e != nil {
		return nil, e
	}
	t, e := k.managed(c, p.Channel, auth.TerminalShare)
	if e != nil {
		return nil, e
	}
	ended, shares, ok := t.setShare(p.With, "")
	if !ok {
		return nil, rpc.Errorf(rpc.CodeNotFound, "%s is not shared with %s", p.Channel, p.With)
	}
	k.end(ended, p.Channel)
	k.env.Record(c, audit.ActionTerminalShare, shareAttrs(c, p.Channel, p.With, "", true))
	k.log.Info("terminal share revoked", "terminal", p.Channel, "with", p.With.String(), "by", c.Identity.Name, "client", c.ClientID, "detached", len(ended))
	return rpc.TerminalSharesResult{Shares: shares}, nil
}

// shareAttrs are the terminal.share audit event's attributes: the
// terminal, with whom (with.principal or with.role), the access given
// ("" when revoked), revoked, and the caller's client.
func shareAttrs(c adapters.Caller, uri string, w rpc.ShareWith, access string, revoked bool) map[string]any {
	a := map[string]any{"terminal": uri, "revoked": revoked, "client.id": c.ClientID}
	if w.Principal != "" {
		a["with.principal"] = w.Principal
	} else {
		a["with.role"] = w.Role
	}
	if access != "" {
		a["access"] = access
	}
	return a
}

// managed returns the terminal uri when c may perm it (kill, share):
// -32008 when there is none, -32009 when c is not its holder or an
// owner.
func (k *Kind) managed(c adapters.Caller, uri string, perm auth.Permission) (*Terminal, *rpc.Error) {
	t := k.Terminal(uri)
	if t == nil {
		return nil, rpc.Errorf(rpc.CodeNotFound, "no such terminal: %s", uri)
	}
	if d := t.mayManage(c.Identity, perm); d != nil {
		return nil, k.env.Guard.Refuse(d)
	}
	return t, nil
}

// end ends the subscriptions to the terminal uri whose share was
// revoked, telling each client why first (channel/ended, -32009
// terminal.attach): without it an attached client would wait for output
// that never comes.
func (k *Kind) end(subs []adapters.Subscriber, uri string) {
	if k.env.EndSubscription == nil {
		return
	}
	for _, s := range subs {
		id := s.Identity()
		d := &auth.Denied{Permission: auth.TerminalAttach, Identity: id,
			Detail: fmt.Sprintf("%s is no longer shared with %s (%s): the share was revoked", uri, nameOf(id), id.Role)}
		if text, err := rpc.Notification(rpc.MethodChannelEnded, rpc.ChannelEndedParams{Channel: uri,
			Error: rpc.Error{Code: rpc.CodePermissionDenied, Message: d.Error()}}); err == nil {
			s.PushControl(text)
		}
		k.env.EndSubscription(s)
	}
}

// Refuse implements adapters.Refuser: a terminal that exists but is not
// shared with the caller is refused -32009 (terminal.attach), not
// reported missing.
func (k *Kind) Refuse(uri string, caller adapters.Caller) *rpc.Error {
	t := k.Terminal(uri)
	if t == nil || t.Access(caller.Identity) != "" {
		return nil
	}
	return k.env.Guard.Refuse(&auth.Denied{Permission: auth.TerminalAttach, Identity: caller.Identity, Target: uri,
		Detail: fmt.Sprintf("%s is not shared with %s (%s)", uri, nameOf(caller.Identity), caller.Identity.Role)})
}
