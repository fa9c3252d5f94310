package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnitVerifies runs systemd-analyze verify on
// systemd/sidecar.service (ExecStart pointed at the binary under test, as
// verify checks that it exists): no error and no warning, so an unknown or
// misspelt key, which systemd only warns about and ignores, fails too.
// Without systemd-analyze it skips (fails under CI=true: .ci/run installs
// systemd).
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		msg := "no systemd-analyze (apt-get install systemd): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	unit, err := os.ReadFile("../systemd/sidecar.service")
	if err != nil {
		t.Fatal(err)
	}
	const execLine = "ExecStart=/usr/local/bin/sidecar "
	if !strings.Contains(string(unit), execLine) {
		t.Fatalf("the unit has no %q line", execLine)
	}
	f := filepath.Join(t.TempDir(), "sidecar.service")
	if err := os.WriteFile(f, []byte(strings.Replace(string(unit), execLine, "ExecStart="+sidecarBin+" ", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "verify", f)
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
