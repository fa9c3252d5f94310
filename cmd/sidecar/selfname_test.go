package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSelfName: the command printed for a person to paste starts with
// "sidecar" only when that name on $PATH is this executable (a symbolic
// link to it included); otherwise with the executable's absolute path,
// links resolved, never argv[0] as typed (./bin/sidecar).
func TestSelfName(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "sidecar")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link-to-sidecar")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	onPath := filepath.Join(dir, "path")
	if err := os.Mkdir(onPath, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "sidecar"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(onPath, "sidecar")); err != nil {
		t.Fatal(err)
	}
	realExe, err := filepath.EvalSymlinks(exe)
	if err != nil {
		t.Fatal(err)
	}
	lookIn := func(dir string) func(string) (string, error) {
		return func(name string) (string, error) {
			p := filepath.Join(dir, name)
			_, err := os.Stat(p)
			return p, err
		}
	}
	tests := []struct {
		name       string
		executable string
		path       string // the directory $PATH holds
		want       string
	}{
		{"sidecar on $PATH is this executable", exe, onPath, "sidecar"},
		{"started through a link, $PATH has the same file", link, onPath, "sidecar"},
		{"another sidecar on $PATH", exe, other, realExe},
		{"none on $PATH", exe, t.TempDir(), realExe},
		{"started through a link, none on $PATH", link, t.TempDir(), realExe},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := selfNameFrom(func() (string, error) { return tt.executable, nil }, lookIn(tt.path))
			if got != tt.want {
				t.Errorf("selfName = %q, want %q", got, tt.want)
			}
		})
	}
	// The real thing: the test binary is not on $PATH as "sidecar".
	t.Setenv("PATH", t.TempDir())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(self); selfName() != want || !filepath.IsAbs(want) {
		t.Errorf("selfName() = %q, want the absolute %q", selfName(), want)
	}
}
