// Package tests holds the end-to-end tests of sidecar: every test starts
// the real binary (built once in TestMain) with its own configuration and
// state directory, and talks to it over loopback only.
package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// sidecarBin is the binary built by TestMain.
var sidecarBin string

// clientCache is the XDG_CACHE_HOME of every command the tests start
// (cleanEnv), in TestMain's directory.
var clientCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sidecar-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests:", err)
		os.Exit(2)
	}
	sidecarBin = filepath.Join(dir, "sidecar")
	clientCache = filepath.Join(dir, "cache")
	build := exec.Command("go", "build", "-o", sidecarBin, "./cmd/sidecar")
	build.Dir = ".." // the module root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "tests: building sidecar:", err)
		_ = os.RemoveAll(dir)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}
