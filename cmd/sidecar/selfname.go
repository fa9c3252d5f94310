package main

import (
	"os"
	"os/exec"
	"path/filepath"
)

// selfName is how to run this binary again in a command line printed for
// a person to paste anywhere (serve's attach line, attach's reattach
// hint): "sidecar" when that name on $PATH is this very executable, else
// the executable's absolute path, symbolic links resolved. argv[0] is not
// it: "./bin/sidecar" fails from any other directory.
func selfName() string { return selfNameFrom(os.Executable, exec.LookPath) }

// selfNameFrom is selfName with os.Executable and exec.LookPath given
// (tests). When the executable cannot be found, it falls back to argv[0]
// made absolute, and to "sidecar" when argv[0] has no directory.
func selfNameFrom(executable func() (string, error), lookPath func(string) (string, error)) string {
	self, err := executable()
	if err != nil {
		if filepath.Base(os.Args[0]) == os.Args[0] {
			return "sidecar"
		}
		if self, err = filepath.Abs(os.Args[0]); err != nil {
			return os.Args[0]
		}
	}
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	if onPath, err := lookPath("sidecar"); err == nil && sameFile(onPath, self) {
		return "sidecar"
	}
	return self
}

// sameFile reports whether paths a and b name the same file (symbolic
// links followed).
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
