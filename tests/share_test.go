package tests

import (
	"regexp"
	"strings"
	"testing"
)

// TestShareCommand (issue 32): sidecar share through the real binary,
// as the owner (the one identity a network client has today): a share
// with an identity and one with a role are printed after each change,
// ls shows the holder, the shares and each attached client's identity
// and access, --revoke removes one, and a terminal or a share that is
// not there exits 4; a usage error exits 2.
func TestShareCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	rc := s.dialRaw(t)
	rc.initialize("share-owner")
	rc.mustCall("createTerminal", map[string]any{"channel": "ahp-terminal:/shared", "command": []string{"sleep", "300"}})
	rc.mustCall("subscribe", map[string]any{"channel": "ahp-terminal:/shared"})
	run := func(args ...string) (string, string, int) {
		return s.run(t, append(append([]string{args[0], s.url}, args[1:]...), s.connArgs()...)...)
	}

	out, errOut, code := run("share", "shared", "--with", "alice", "--read-only")
	if want := "WITH   ACCESS\nalice  read-only\n"; code != 0 || out != want {
		t.Errorf("share --with alice: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errOut, want)
	}
	out, errOut, code = run("share", "ahp-terminal:/shared", "--role", "viewer", "--read-write")
	if want := "WITH         ACCESS\nalice        read-only\nrole viewer  read-write\n"; code != 0 || out != want {
		t.Errorf("share --role viewer: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errOut, want)
	}

	out, errOut, code = run("ls")
	if code != 0 {
		t.Fatalf("ls: exit %d, stderr %q", code, errOut)
	}
	if !regexp.MustCompile(`^TERMINAL +TITLE +HOLDER +SHARED +CLAIM +ATTACHED +STATUS\n`).MatchString(out) {
		t.Errorf("ls header:\n%s", out)
	}
	row := regexp.MustCompile(`(?m)^shared\s+sleep\s+(\S+)\s+alice:read-only,role=viewer:read-write\s+client:share-owner\s+share-owner\((\S+):read-write\)\s+attached$`)
	m := row.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ls does not show the terminal's holder, shares and attached client:\n%s", out)
	}
	if m[1] != m[2] {
		t.Errorf("holder %q, attached as %q: the same identity created and attached", m[1], m[2])
	}
	out, _, _ = run("ls", "--json")
	for _, want := range []string{`"holder": "` + m[1] + `"`, `"principal": "alice"`, `"role": "viewer"`, `"access": "write"`, `"attachedBy": [`} {
		if !strings.Contains(out, want) {
			t.Errorf("ls --json lacks %s:\n%s", want, out)
		}
	}

	out, errOut, code = run("share", "shared", "--with", "alice", "--revoke")
	if want := "WITH         ACCESS\nrole viewer  read-write\n"; code != 0 || out != want {
		t.Errorf("share --revoke: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errOut, want)
	}
	_, errOut, code = run("share", "shared", "--with", "alice", "--revoke")
	if want := "sidecar: ahp-terminal:/shared is not shared with alice\n"; code != 4 || errOut != want {
		t.Errorf("revoking a share that is not there: exit %d, stderr %q; want 4 and %q", code, errOut, want)
	}
	_, errOut, code = run("share", "t-nope", "--with", "alice", "--read-only")
	if want := "sidecar: no terminal ahp-terminal:/t-nope on this host (sidecar ls " + s.url + " lists them)\n"; code != 4 || errOut != want {
		t.Errorf("share t-nope: exit %d, stderr %q; want 4 and %q", code, errOut, want)
	}
	_, errOut, code = run("share", "shared", "--with", "alice", "--role", "user", "--read-only")
	if code != 2 || !strings.Contains(errOut, "give exactly one of --with NAME and --role ROLE") {
		t.Errorf("share --with and --role: exit %d, stderr %q; want 2", code, errOut)
	}
	_, errOut, code = run("share", "shared", "--with", "alice")
	if code != 2 || !strings.Contains(errOut, "give exactly one of --read-only, --read-write and --revoke") {
		t.Errorf("share without an access: exit %d, stderr %q; want 2", code, errOut)
	}
}
