package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/auth/tokensfile"
)

// TestIdentityLimitsCLI (issue 32, "a CI job forwards one port without a
// shell"): a user entry of the tokens file with its own tcp_allow (one
// port) and deny (terminal.create, files.*): its forward -L to that port
// carries bytes, to another port within tcp.allow and the role is
// refused naming the entry's rule; `sidecar run` and `cp` are refused
// naming the entry; ulla, a user without those limits, still runs.
func TestIdentityLimitsCLI(t *testing.T) {
	t.Parallel()
	allowed, other := echoListener(t), echoListener(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src.txt")
	if err := os.WriteFile(src, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const ciTok = "ci-secret-limits"
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	tokens := rolesTokens() + fmt.Sprintf("token \"ci\" {\n  role = \"user\"\n  hash = %q\n  tcp_allow = [\"127.0.0.1:%d\"]\n  deny = [\"terminal.create\", \"files.read\", \"files.write\"]\n}\n",
		tokensfile.HashSHA256(ciTok), allowed)
	if err := os.WriteFile(path, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "auth {\n  tokens_file = "+strconv.Quote(path)+"\n}\ntcp {\n  allow = [\"127.0.0.1/32\"]\n}\n"+
		fmt.Sprintf("files {\n  read = [%q]\n  write = [%q]\n}\n", dir, dir))
	flags := func(tok string) []string { return []string{"--token", tok, "--cert-hash", s.hash} }
	run := func(tok string, args ...string) (string, string, int) {
		return s.run(t, append(append(args[:1:1], flags(tok)...), args[1:]...)...)
	}

	fwd := start(t, append(append([]string{"forward"}, flags(ciTok)...), s.url, "-L", fmt.Sprintf("127.0.0.1:0:127.0.0.1:%d", allowed), "-L", fmt.Sprintf("127.0.0.1:0:127.0.0.1:%d", other))...)
	checkNarrowedForward(t, fwd, "ci", allowed, other)
	fwd.stderr.waitFor(t, "ci's refused forward", 0, fmt.Sprintf("open failed: connect to 127.0.0.1:%d not allowed by policy: permission denied: tcp.open for ci is limited to the tcp_allow of its tokens file entry (127.0.0.1:%d)", other, allowed))

	_, errOut, code := run(ciTok, "run", s.url, "--", "echo", "hi")
	if code != 255 || !strings.Contains(errOut, "sidecar: cannot start echo: permission denied: terminal.create is denied to ci by its tokens file entry (code -32009)") {
		t.Errorf("ci's run: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = run(ciTok, "cp", s.url+":"+src, filepath.Join(t.TempDir(), "x"))
	if code != 1 || !strings.Contains(errOut, "permission denied: files.read is denied to ci by its tokens file entry") {
		t.Errorf("ci's cp from the host: exit %d, stderr %q", code, errOut)
	}
	_, errOut, code = run(ciTok, "cp", src, s.url+":"+filepath.Join(dir, "ci-up"))
	if code != 1 || !strings.Contains(errOut, "is denied to ci by its tokens file entry") {
		t.Errorf("ci's cp to the host: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "ci-up")); err == nil {
		t.Error("ci's cp wrote the file")
	}
	if out, errOut, code := run(ullaTok, "run", s.url, "--", "sh", "-c", "echo $((6*7))"); code != 0 || out != "42\n" {
		t.Errorf("ulla's run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestProcessesCommandLineOwnerOnly (review 32, item 6): processes/list
// gives a process's commandLine to an owner only: a user's or a viewer's
// listing names the command but not its arguments, which may carry what
// another identity typed into its unshared terminal.
func TestProcessesCommandLineOwnerOnly(t *testing.T) {
	t.Parallel()
	s := startServerRoles(t, "")
	olga := s.dialMC(t, "ahp", olgaTok, "o1")
	olga.mustCall("createTerminal", map[string]any{"channel": "ahp-terminal:/pw", "command": []string{"sleep", "313.5"}})
	for _, c := range []struct {
		tok, id, want string
	}{{olgaTok, "o2", "sleep 313.5"}, {ullaTok, "u1", ""}, {veraTok, "v1", ""}} {
		cl := s.dialMC(t, "ahp", c.tok, c.id)
		var found bool
		deadline := time.Now().Add(waitTimeout)
		for !found && time.Now().Before(deadline) {
			m := cl.mustCall("processes/list", map[string]any{"sortBy": "start", "limit": 1000})
			var res struct {
				Processes []struct {
					PID         int    `json:"pid"`
					Command     string `json:"command"`
					CommandLine string `json:"commandLine"`
				} `json:"processes"`
			}
			if err := json.Unmarshal(m.Result, &res); err != nil {
				t.Fatal(err)
			}
			for _, p := range res.Processes {
				if p.Command != "sleep" || p.PID == 0 {
					continue
				}
				if c.want == "" && p.CommandLine != "" {
					t.Errorf("%s sees commandLine %q of pid %d", c.id, p.CommandLine, p.PID)
				}
				if c.want != "" && p.CommandLine == c.want {
					found = true
				}
				if c.want == "" {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s: no sleep process listed (want commandLine %q)", c.id, c.want)
		}
	}
}
