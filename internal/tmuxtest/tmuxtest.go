// Package tmuxtest runs a private tmux server for tests: a terminal
// emulator independent of the sidecar's own (adapters/pty's vt), whose
// screens capture-pane reads back, to check that what the sidecar draws
// is what a real terminal shows.
package tmuxtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Server is a tmux server of its own (socket in Dir, no config file).
type Server struct {
	t    testing.TB
	sock string
	env  []string
	// Dir is a short temporary directory (a unix socket's path is at most
	// 107 bytes) that the test may use for its files; removed at cleanup.
	Dir string
}

// Start starts a server for t, whose commands run with env (nil: the
// test's environment) and TERM=xterm-256color. Without tmux it skips t,
// or fails it under CI (CI installs tmux: .ci/run). The server is killed
// at t's cleanup.
func Start(t testing.TB, env []string) *Server {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tmux is not installed (.ci/run installs it)")
		}
		t.Skip("tmux is not installed")
	}
	dir, err := os.MkdirTemp("", "tmux")
	if err != nil {
		t.Fatal(err)
	}
	if env == nil {
		env = os.Environ()
	}
	s := &Server{t: t, sock: filepath.Join(dir, "s"), env: append(env, "TERM=xterm-256color"), Dir: dir}
	t.Cleanup(func() {
		_, _ = s.Run("kill-server")
		_ = os.RemoveAll(dir)
	})
	return s
}

// Run runs tmux with args on this server and returns its output.
func (s *Server) Run(args ...string) (string, error) {
	cmd := exec.Command("tmux", append([]string{"-S", s.sock, "-f", "/dev/null"}, args...)...)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Must is Run that fails the test on an error.
func (s *Server) Must(args ...string) string {
	s.t.Helper()
	out, err := s.Run(args...)
	if err != nil {
		s.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return out
}

// Capture returns pane name's visible screen, with its attributes as SGR
// sequences, then fields (a display-message format: cursor, modes). An
// SGR at the end of a line, which changes no cell shown, is left out:
// capture-pane trims trailing blanks but not the attributes they were
// written with, so blanks a program wrote and blanks never written would
// differ.
func (s *Server) Capture(name, fields string) string {
	s.t.Helper()
	lines := strings.Split(s.Must("capture-pane", "-p", "-e", "-t", name), "\n")
	for i, l := range lines {
		lines[i] = trailingSGR.ReplaceAllString(l, "")
	}
	return strings.Join(lines, "\n") + s.Must("display-message", "-p", "-t", name, fields)
}

var trailingSGR = regexp.MustCompile(`(\x1b\[[0-9;:]*m)+$`)
