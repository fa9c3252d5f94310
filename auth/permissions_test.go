package auth

import (
	"slices"
	"testing"
)

// TestPermissionTable: the table as docs/operations.md "Roles and
// sharing" states it: an owner everything, a user all but signalling
// processes and unlisted methods, a viewer listing, metrics, processes
// and attaching.
func TestPermissionTable(t *testing.T) {
	want := map[Role][]Permission{
		Owner: Permissions,
		User: {RootList, TerminalCreate, TerminalAttach, TerminalInput, TerminalResize, TerminalClaim,
			TerminalKill, TerminalShare, TCPOpen, TunnelListen, FilesRead, FilesWrite,
			ProcessesList, TelemetryMetrics, TelemetryLogs, PreviewOpen},
		Viewer: {RootList, TerminalAttach, ProcessesList, TelemetryMetrics},
	}
	for _, r := range Roles {
		var got []Permission
		for _, p := range Permissions {
			if r.Allows(p) {
				got = append(got, p)
			}
		}
		if !slices.Equal(got, want[r]) {
			t.Errorf("%s may %v, want %v", r, got, want[r])
		}
	}
	if Role("admin").Allows(RootList) || Role("").Allows(RootList) {
		t.Error("an unknown role is allowed something")
	}
}

func TestDeniedMessages(t *testing.T) {
	vera := Identity{Name: "vera", Role: Viewer}
	for _, tt := range []struct {
		d    *Denied
		want string
	}{
		{Check(vera, TerminalInput), "permission denied: terminal.input needs role user or owner; vera is viewer"},
		{Check(Identity{Name: "ursula", Role: User}, ProcessesSignal), "permission denied: processes.signal needs role owner; ursula is user"},
		{Check(Identity{Role: Viewer}, TCPOpen), "permission denied: tcp.open needs role user or owner; this connection is viewer"},
		{&Denied{Permission: TerminalAttach, Identity: vera, Detail: "ahp-terminal:/t is not shared with vera (viewer)"},
			"permission denied: terminal.attach: ahp-terminal:/t is not shared with vera (viewer)"},
	} {
		if got := tt.d.Error(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
	if Check(Identity{Name: "o", Role: Owner}, Unlisted) != nil || Check(Identity{Name: "u", Role: User}, Unlisted) == nil {
		t.Error("unlisted: owners only")
	}
}

// TestDenyRules: a role block's or an entry's deny refuses a permission
// the role allows, naming the rule; it never widens (a viewer denied
// nothing still cannot create); ParsePermission knows every name but
// "unlisted".
func TestDenyRules(t *testing.T) {
	ci := Identity{Name: "ci", Role: User, Deny: Perms(TerminalCreate, FilesRead)}
	for p, want := range map[Permission]string{
		TerminalCreate: "permission denied: terminal.create is denied to ci by its tokens file entry",
		FilesRead:      "permission denied: files.read is denied to ci by its tokens file entry",
		TCPOpen:        "",
	} {
		got := ""
		if d := Check(ci, p); d != nil {
			got = d.Error()
		}
		if got != want || ci.Allows(p) != (want == "") {
			t.Errorf("%s: %q (allows %v), want %q", p, got, ci.Allows(p), want)
		}
	}
	limited := RoleLimits{User: Perms(FilesWrite)}.Apply(ci)
	if d := Check(limited, FilesWrite); d == nil || d.Error() != "permission denied: files.write is denied to role user by its role block" {
		t.Errorf("role deny: %v", d)
	}
	if v := (RoleLimits{User: Perms(FilesWrite)}).Apply(Identity{Name: "v", Role: Viewer}); v.RoleDeny != 0 || Check(v, TerminalCreate) == nil {
		t.Errorf("viewer: %+v", v)
	}
	if !slices.Equal(Perms(AuditRead, RootList).List(), []Permission{RootList, AuditRead}) {
		t.Errorf("PermSet.List: %v", Perms(AuditRead, RootList).List())
	}
	for _, p := range Permissions {
		got, err := ParsePermission(string(p))
		if (p == Unlisted) != (err != nil) || (err == nil && got != p) {
			t.Errorf("ParsePermission(%q) = %q, %v", p, got, err)
		}
	}
}
