// Package fileperm is the rule, like ssh's for a private key, for the
// daemon's files that hold secrets or evidence (the tokens file, the
// audit file, the recordings' directory): a file others may write is
// refused where it grants access (the tokens file), and one others may
// read is warned about (docs/operations.md "Identities", "Audit").
package fileperm

import (
	"fmt"
	"io/fs"
	"os"
)

// Check returns, for the file or directory path whose info is fi, an
// error when group or others may write it (writable is refused) and a
// warning ("" when none) when group or others may read it. Neither for
// what is not a regular file or a directory (a pipe, /dev/stdin).
// Both name the mode and the chmod that fixes it.
func Check(path string, fi fs.FileInfo) (warning string, err error) {
	m := fi.Mode()
	if !m.IsRegular() && !m.IsDir() {
		return "", nil
	}
	fix := fixFor(fi)
	perm := m.Perm()
	if perm&0o022 != 0 {
		return "", fmt.Errorf("%s may be written by others (mode %04o): chmod %s %s", path, perm, fix, path)
	}
	if perm&0o077 != 0 {
		return fmt.Sprintf("%s may be read by others (mode %04o): chmod %s %s", path, perm, fix, path), nil
	}
	return "", nil
}

// Warn returns a warning ("" when none) when path exists and group or
// others may read, write or enter it: for files the daemon creates
// private (0600, 0700) but keeps as they are when they exist.
func Warn(path string) string {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return ""
	}
	return fmt.Sprintf("%s may be read or written by others (mode %04o), kept as it is: chmod %s %s", path, fi.Mode().Perm(), fixFor(fi), path)
}

// Private returns an error when path, whose info is fi, is a regular
// file or a directory that group or others may read, write or enter
// (ssh's rule for a private key, the client's --token-file): it names
// the mode and the chmod that fixes it. nil for a pipe, /dev/stdin and
// the like.
func Private(path string, fi fs.FileInfo) error {
	m := fi.Mode()
	if (!m.IsRegular() && !m.IsDir()) || m.Perm()&0o077 == 0 {
		return nil
	}
	return fmt.Errorf("%s may be read or written by others (mode %04o): chmod %s %s", path, m.Perm(), fixFor(fi), path)
}

// fixFor is the mode a private fi should have: 600, 700 for a directory.
func fixFor(fi fs.FileInfo) string {
	if fi.IsDir() {
		return "700"
	}
	return "600"
}
