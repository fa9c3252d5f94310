package files

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sidecar-dev/sidecar/rpc"
)

// Policy is which directories a principal may read and write under
// (config files.read, files.write). Paths are compared once symbolic links
// are resolved.
type Policy struct {
	Read, Write []string
}

// under reports whether p (absolute, clean) is dir or inside it.
func under(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// resolved is p with its symbolic links resolved as far as it exists:
// the longest existing prefix resolved, the rest appended.
func resolved(p string) string {
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// Check returns nil when p may be read (write false) or written, else a
// PermissionDenied error naming the path and the rule.
func (pol *Policy) Check(p string, write bool) *rpc.Error {
	dirs, verb, key := pol.Read, "read", "files.read"
	if write {
		dirs, verb, key = pol.Write, "write", "files.write"
	}
	r := resolved(p)
	for _, d := range dirs {
		if under(r, d) {
			return nil
		}
	}
	shown := p
	if r != p {
		shown = fmt.Sprintf("%s (%s)", p, r)
	}
	return rpc.Errorf(rpc.CodePermissionDenied, "%s %s not allowed by policy: not under %s %q", verb, shown, key, dirs)
}

// checkPath refuses a path that is not absolute and clean.
func checkPath(p string) *rpc.Error {
	if p == "" {
		return rpc.Missing("path")
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
		return rpc.Errorf(rpc.CodeInvalidParams, "invalid params: \"path\" %q must be absolute and clean", p)
	}
	return nil
}
