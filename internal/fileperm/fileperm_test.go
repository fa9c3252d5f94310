package fileperm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck: 0600 passes; 0640 and 0604 warn; 0620 and 0602 are
// refused; a directory's fix is chmod 700; Warn speaks of any group or
// other bit and of nothing missing.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode       os.FileMode
		warn, fail bool
	}{{0o600, false, false}, {0o400, false, false}, {0o640, true, false}, {0o604, true, false}, {0o620, false, true}, {0o602, false, true}, {0o666, false, true}} {
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(p)
		w, err := Check(p, fi)
		if (w != "") != tc.warn || (err != nil) != tc.fail {
			t.Errorf("mode %04o: warning %q, error %v", tc.mode, w, err)
		}
		if err != nil && !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("mode %04o: %v does not say chmod 600", tc.mode, err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(dir)
	if w, err := Check(dir, fi); err != nil || !strings.Contains(w, "chmod 700 "+dir) {
		t.Errorf("a 0755 directory: %q %v", w, err)
	}
	if w := Warn(dir); !strings.Contains(w, "(mode 0755)") {
		t.Errorf("Warn of a 0755 directory: %q", w)
	}
	if w := Warn(filepath.Join(dir, "missing")); w != "" {
		t.Errorf("Warn of a missing file: %q", w)
	}
}

// TestPrivate: any group or other bit is refused, naming the mode and
// the chmod; 0600 passes.
func TestPrivate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode os.FileMode
		want string
	}{{0o600, ""}, {0o640, p + " may be read or written by others (mode 0640): chmod 600 " + p}, {0o602, p + " may be read or written by others (mode 0602): chmod 600 " + p}} {
		if err := os.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if err := Private(p, fi); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("mode %04o: %q, want %q", c.mode, got, c.want)
		}
	}
}
