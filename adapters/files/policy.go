package files

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Policy is which directories a principal may read and write under
// (config files.read, files.write), and the daemon's own paths, refused
// whatever those say (config.OwnPaths). Paths are compared once symbolic
// links are resolved.
type Policy struct {
	Read, Write []string
	Own         []config.OwnPath
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

// Check returns nil when a caller of role may read p (write false: open,
// stat, list) or write it, else a PermissionDenied error naming the path
// and the rule: not under files.read or files.write, or one of the
// daemon's own paths (Own: refused to every role but owner for reading,
// to every role for writing; a directory's own paths are refused for
// listing too, while a listing of the directory holding an own file
// still shows its name).
func (pol *Policy) Check(p string, role auth.Role, write bool) *rpc.Error {
	dirs, verb, key := pol.Read, "read", "files.read"
	if write {
		dirs, verb, key = pol.Write, "write", "files.write"
	}
	r := resolved(p)
	shown := p
	if r != p {
		shown = fmt.Sprintf("%s (%s)", p, r)
	}
	if write || role != auth.Owner {
		for _, o := range pol.Own {
			d := resolved(o.Path)
			if r == d || (o.Dir && under(r, d)) {
				rule := o.Rule
				if o.Dir {
					rule = fmt.Sprintf("%s %s", o.Rule, o.Path)
				}
				return rpc.Errorf(rpc.CodePermissionDenied, "%s %s refused: it is the daemon's own (%s): refused to role %s", verb, shown, rule, roleName(role))
			}
		}
	}
	for _, d := range dirs {
		if under(r, d) {
			return nil
		}
	}
	return rpc.Errorf(rpc.CodePermissionDenied, "%s %s not allowed by policy: not under %s %q", verb, shown, key, dirs)
}

// roleName is role as a refusal says it ("none" for no role).
func roleName(role auth.Role) string {
	if role == "" {
		return "none"
	}
	return string(role)
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
