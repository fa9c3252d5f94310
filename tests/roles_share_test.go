package tests

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestRolesShareAttach (issue 32): sharing through sidecar attach with
// real identities. The owner olga shares her shell read-only with the
// viewer vera and read-write with the user ulla: vera's attach shows the
// output live, says once that the terminal is read-only and sends
// nothing that reaches the shell; ulla's input reaches it (its output is
// the shell's); ls shows the holder, the shares and who is attached how;
// revoking ulla's share ends her attach at once with the host's reason
// (exit 255, no reconnect) and her next attach is refused. The refusals
// are logged once with the identity, and an audit refusal is audited as
// permission.denied.
func TestRolesShareAttach(t *testing.T) {
	t.Parallel()
	s := startServerRoles(t, "")
	const uri = "ahp-terminal:/olgas"
	olga := s.dialMC(t, "ahp", olgaTok, "o1")
	olga.mustCall("createTerminal", map[string]any{"channel": uri})
	olga.mustCall("subscribe", termCh("olgas"))
	share := func(who, access string) {
		out, errOut, code := s.run(t, "share", s.url, "olgas", "--with", who, "--"+access, "--token", olgaTok, "--cert-hash", s.hash)
		if code != 0 {
			t.Fatalf("share --with %s --%s: exit %d\n%s%s", who, access, code, out, errOut)
		}
	}
	share("vera", "read-only")
	share("ulla", "read-write")

	attachAs := func(tok string) *ptyProc {
		return startInPTY(t, "attach", s.url, "olgas", "--token", tok, "--cert-hash", s.hash)
	}
	vera := attachAs(veraTok)
	readOnly := fmt.Sprintf("sidecar: %s is read-only for you: you see its output, and what you type is not sent (permission denied: terminal.claim needs role user or owner; vera is viewer); ~. detaches", uri)
	vera.out.waitFor(t, "vera's read-only notice", 0, readOnly)
	ulla := attachAs(ullaTok)
	ulla.out.waitFor(t, "ulla's attach", 0, "XPROMPT>")

	// Output reaches vera live; her keystrokes never reach the shell.
	if r, _ := olga.dispatch(uri, inputAction("echo from-$((6*7))-olga\r")); r != "" {
		t.Fatalf("olga's input rejected: %s", r)
	}
	vera.out.waitFor(t, "olga's command's output at vera's", 0, "from-42-olga")
	vera.typeText(t, "echo vera-$((6*7))\r")
	// The host has refused it (logged once, with her identity) before
	// ulla types.
	s.p.stderr.waitFor(t, "vera's refused input logged", 0, `"permission":"terminal.input","principal":"vera"`)
	// ulla's command runs in the shell: its output is computed there.
	ulla.typeText(t, "echo ulla-$((6*7))\r")
	for _, p := range []*ptyProc{vera, ulla} {
		p.out.waitFor(t, "ulla's command's output", 0, "ulla-42")
	}
	olga.waitOutput(uri, "ulla-42")
	for _, p := range []*ptyProc{vera, ulla} {
		if out := p.out.String(); strings.Contains(out, "vera-42") {
			t.Errorf("vera's keystrokes reached the shell:\n%q", out)
		}
	}
	if n := strings.Count(vera.out.String(), "read-only for you"); n != 1 {
		t.Errorf("vera was told %d times that the terminal is read-only, want once:\n%q", n, vera.out.String())
	}

	// ls shows the holder, the shares and who is attached how.
	out, errOut, code := s.run(t, "ls", s.url, "--token", olgaTok, "--cert-hash", s.hash)
	if code != 0 {
		t.Fatalf("ls: exit %d %s", code, errOut)
	}
	row := regexp.MustCompile(`(?m)^olgas\s+sh\s+olga\s+vera:read-only,ulla:read-write\s+client:o1\s+(\S+)\s+attached$`).FindStringSubmatch(out)
	if row == nil {
		t.Fatalf("ls does not show the terminal's holder and shares:\n%s", out)
	}
	attached := strings.Split(row[1], ",")
	var who []string
	for _, a := range attached {
		who = append(who, a[strings.IndexByte(a, '(')+1:])
	}
	if got := strings.Join(who, " "); len(attached) != 3 || !strings.Contains(row[1], "o1(olga:read-write)") || !strings.Contains(got, "vera:read-only)") || !strings.Contains(got, "ulla:read-write)") {
		t.Errorf("ls ATTACHED %q, want o1(olga:read-write), vera read-only and ulla read-write", row[1])
	}
	// vera's ls (a viewer may list) shows the shared terminal too.
	if out, _, code := s.run(t, "ls", s.url, "--token", veraTok, "--cert-hash", s.hash); code != 0 || !strings.Contains(out, "olgas ") {
		t.Errorf("vera's ls: exit %d\n%s", code, out)
	}

	// Revoking ulla's share ends her attach at once, with the reason.
	out, errOut, code = s.run(t, "share", s.url, "olgas", "--with", "ulla", "--revoke", "--token", olgaTok, "--cert-hash", s.hash)
	if want := "WITH  ACCESS\nvera  read-only\n"; code != 0 || out != want {
		t.Fatalf("share --revoke: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	ended := fmt.Sprintf("sidecar: detached from %s: permission denied: terminal.attach: %s is no longer shared with ulla (user): the share was revoked", uri, uri)
	ulla.out.waitFor(t, "ulla's attach ending", 0, ended)
	select {
	case <-ulla.done:
	case <-vera.done:
		t.Fatal("vera's attach ended with ulla's share")
	}
	if code := exitCode(ulla.err); code != 255 {
		t.Errorf("ulla's attach exited %d, want 255", code)
	}
	if n := strings.Count(ulla.out.String(), "reconnect"); n != 0 {
		t.Errorf("ulla's attach tried to reconnect:\n%q", ulla.out.String())
	}
	// Attaching again is refused.
	again := startInPTY(t, "attach", s.url, "olgas", "--token", ullaTok, "--cert-hash", s.hash)
	again.out.waitFor(t, "ulla's second attach refused", 0, "permission denied: terminal.attach: "+uri+" is not shared with ulla (user)")
	<-again.done
	if code := exitCode(again.err); code != 255 {
		t.Errorf("ulla's second attach exited %d, want 255", code)
	}
	// The catalogue follows the shares: ulla's ls no longer lists the
	// terminal (nor its title), vera's still does.
	listed := func(tok string) []string {
		t.Helper()
		out, errOut, code := s.run(t, "ls", s.url, "--json", "--token", tok, "--cert-hash", s.hash)
		var st struct{ Terminals []struct{ Resource string } }
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
			t.Fatalf("ls --json: exit %d, %v, stderr %q\n%s", code, err, errOut, out)
		}
		var res []string
		for _, ti := range st.Terminals {
			res = append(res, ti.Resource)
		}
		return res
	}
	if got := listed(ullaTok); len(got) != 0 {
		t.Errorf("ulla's ls after the revoke lists %v, want nothing", got)
	}
	if got := listed(veraTok); !slices.Equal(got, []string{uri}) {
		t.Errorf("vera's ls after ulla's revoke lists %v, want %s", got, uri)
	}

	// Each refusal is logged once per identity and permission, with the
	// identity: vera's two refused commands (and her claim) are one line.
	lines := 0
	for l := range strings.SplitSeq(s.p.stderr.String(), "\n") {
		if strings.Contains(l, `"@message":"permission denied"`) && strings.Contains(l, `"principal":"vera"`) && strings.Contains(l, `"permission":"terminal.input"`) {
			lines++
			if !strings.Contains(l, `"role":"viewer"`) || !strings.Contains(l, `"error":"permission denied: terminal.input needs role user or owner; vera is viewer"`) {
				t.Errorf("refusal log line lacks the identity or the message: %s", l)
			}
		}
	}
	if lines != 1 {
		t.Errorf("vera's refused input logged %d times, want once", lines)
	}
	// Every refusal is audited as permission.denied with the identity:
	// vera's input (each one, though the log says it once), and the
	// audit channel's (ulla is not an owner).
	s.p.stderr.waitFor(t, "vera's audited input refusal", 0, `"@module":"sidecar.audit","@message":"permission.denied","action":"permission.denied","principal":"vera","role":"viewer","permission":"terminal.input","target":"ahp-terminal:/olgas"}`)
	_, errOut, code = s.run(t, "logs", s.url, "--audit", "--token", ullaTok, "--cert-hash", s.hash)
	if code != 1 || !strings.Contains(errOut, "permission denied: audit.read needs role owner; ulla is user") {
		t.Errorf("ulla's logs --audit: exit %d, stderr %q", code, errOut)
	}
	s.p.stderr.waitFor(t, "the audited refusal", 0, `"@module":"sidecar.audit","@message":"permission.denied","action":"permission.denied","principal":"ulla","role":"user"`)
}
