package tokensfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/sidecar-dev/sidecar/auth"
)

// Hashes of alice-secret (SHA-256), bob-secret (bcrypt, cost 4) and
// carol-secret (argon2id, m=64 KiB, t=1, p=1), made with
// golang.org/x/crypto.
const (
	aliceSHA = "sha256:0c848abb03307b06cf70cd4e29c157dc81af5e94ab3eb1d0c59a120269572376"
	bobBcr   = "$2a$04$7B.bZzTdxofqoLgqnUJPgeKFxhi9QpZ/ICJeTCMbCuv8RbTaOiDYi"
	carolArg = "$argon2id$v=19$m=64,t=1,p=1$MDEyMzQ1Njc4OWFiY2RlZg$vIFadOax0JljVPtm3xOcKbIABTsJ8lPs8z3i5vbdCVY"
)

func entry(name, role, hash string) string {
	return "token \"" + name + "\" {\n  role = \"" + role + "\"\n  hash = \"" + hash + "\"\n}\n"
}

var threeKinds = entry("alice", "user", aliceSHA) + entry("bob", "viewer", bobBcr) + entry("carol", "owner", carolArg)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHashSHA256: the sha256: line of a token (what `sidecar token hash`
// prints) is the one alice's entry holds.
func TestHashSHA256(t *testing.T) {
	if got := HashSHA256("alice-secret"); got != aliceSHA {
		t.Fatalf("HashSHA256 = %s, want %s", got, aliceSHA)
	}
}

// TestAuthenticateEachKind: each hash kind lets its token in as its
// entry's identity; a wrong, empty or hash-as-token credential is
// refused as unauthorized.
func TestAuthenticateEachKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	write(t, path, threeKinds)
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		tok  string
		want auth.Identity
	}{
		{"alice-secret", auth.Identity{Name: "alice", Role: auth.User, Method: Method}},
		{"bob-secret", auth.Identity{Name: "bob", Role: auth.Viewer, Method: Method}},
		{"carol-secret", auth.Identity{Name: "carol", Role: auth.Owner, Method: Method}},
		{"bob-secret", auth.Identity{Name: "bob", Role: auth.Viewer, Method: Method}}, // cached
	} {
		got, err := f.Authenticate(ctx, c.tok)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.tok, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "alice", "alice-secret ", aliceSHA, bobBcr, "dave-secret"} {
		if _, err := f.Authenticate(ctx, bad); err != auth.ErrUnknown {
			t.Errorf("%q: %v, want %v", bad, err, auth.ErrUnknown)
		}
	}
}

// TestParseErrors: a bad file is refused with file:line and what is
// wrong, for each kind of mistake.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		what, src, want string
	}{
		{"syntax", "token \"a\" {\n", "t.hcl:1:"},
		{"unknown block", "user \"a\" {}\n", "t.hcl:1: Unsupported block type"},
		{"unknown attribute", "token \"a\" {\n role = \"user\"\n hash = \"" + aliceSHA + "\"\n token = \"x\"\n}\n", "t.hcl:4: Unsupported argument"},
		{"no hash", "token \"a\" {\n role = \"user\"\n}\n", "t.hcl:1: Missing required argument"},
		{"no label", "token {\n}\n", "t.hcl:1: Missing name for token"},
		{"bad role", "\n" + entry("a", "admin", aliceSHA), `t.hcl:3: token "a": unknown role "admin"`},
		{"clear token", entry("a", "user", "alice-secret"), `t.hcl:3: token "a": hash must start with sha256:`},
		{"short sha256", entry("a", "user", "sha256:00"), "t.hcl:3: token \"a\": a sha256: hash is 64 hex digits"},
		{"bad bcrypt", entry("a", "user", "$2b$04$short"), `t.hcl:3: token "a": bad bcrypt hash`},
		{"argon2i", entry("a", "user", "$argon2i$v=19$m=64,t=1,p=1$MDEyMzQ1Njc4OWFiY2RlZg$vIFadOax0JljVPtm3xOcKbIABTsJ8lPs8z3i5vbdCVY"), "hash must start with"},
		{"huge argon2id", entry("a", "user", "$argon2id$v=19$m=99999999,t=1,p=1$MDEyMzQ1Njc4OWFiY2RlZg$vIFadOax0JljVPtm3xOcKbIABTsJ8lPs8z3i5vbdCVY"), "bad argon2id hash: m is at most"},
		{"duplicate name", entry("a", "user", aliceSHA) + entry("a", "user", bobBcr), `t.hcl:5: token "a" is defined twice (first at line 1)`},
		{"duplicate hash", entry("a", "user", aliceSHA) + entry("b", "user", aliceSHA), `t.hcl:7: token "b" has the same hash as token "a"`},
		{"reserved", entry("token", "user", aliceSHA), `t.hcl:1: token "token": the name is reserved`},
		{"bad name", entry("a b", "user", aliceSHA), `t.hcl:1: token "a b": a name has only`},
		{"number role", "token \"a\" {\n role = 3\n hash = \"" + aliceSHA + "\"\n}\n", "t.hcl:2: role must be a string"},
	} {
		_, err := Parse([]byte(c.src), "t.hcl")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.what, err, c.want)
		}
	}
	if s, err := Parse(nil, "t.hcl"); err != nil || len(s.Names()) != 0 {
		t.Errorf("empty file: %v %v", s, err)
	}
}

// TestReload: an edit's new token works at once, the removed one is
// refused, the changed names go to OnReload; a bad edit keeps the
// previous tokens and says why.
func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	write(t, path, threeKinds)
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var told []string
	f.OnReload(func(changed []string) { told = append(told, changed...) })
	ctx := context.Background()
	// alice removed, bob's role changed, dave added, carol kept.
	write(t, path, entry("bob", "user", bobBcr)+entry("carol", "owner", carolArg)+entry("dave", "user", HashSHA256("dave-secret")))
	changed, err := f.Reload()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changed, []string{"alice", "bob"}) || !slices.Equal(told, changed) {
		t.Fatalf("changed %v (told %v), want [alice bob]", changed, told)
	}
	if id, err := f.Authenticate(ctx, "dave-secret"); err != nil || id.Name != "dave" {
		t.Fatalf("new token: %+v %v", id, err)
	}
	if _, err := f.Authenticate(ctx, "alice-secret"); err != auth.ErrUnknown {
		t.Fatalf("removed token: %v", err)
	}
	if id, _ := f.Authenticate(ctx, "bob-secret"); id.Role != auth.User {
		t.Fatalf("bob's new role: %+v", id)
	}
	write(t, path, entry("eve", "god", aliceSHA))
	if _, err := f.Reload(); err == nil || !strings.Contains(err.Error(), path+":2:") {
		t.Fatalf("bad reload: %v", err)
	}
	if id, err := f.Authenticate(ctx, "dave-secret"); err != nil || id.Name != "dave" {
		t.Fatalf("after a bad reload, the previous tokens: %+v %v", id, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reload(); err == nil {
		t.Fatal("a missing file reloaded")
	}
	if _, err := f.Authenticate(ctx, "dave-secret"); err != nil {
		t.Fatalf("after a missing file, the previous tokens: %v", err)
	}
}

// TestWatch: an editor's rename over the file reloads it (within the
// test's bound), and the revoked name is told.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.hcl")
	write(t, path, threeKinds)
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloaded := make(chan []string, 4)
	if err := f.Watch(ctx, 10*time.Millisecond, func(changed []string, err error) {
		if err != nil {
			t.Errorf("reload: %v", err)
		}
		reloaded <- changed
	}); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".tokens.hcl.swp")
	write(t, tmp, entry("bob", "viewer", bobBcr)+entry("carol", "owner", carolArg))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	select {
	case changed := <-reloaded:
		if !slices.Equal(changed, []string{"alice"}) {
			t.Fatalf("changed %v, want [alice]", changed)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reload within 5 s of the rename")
	}
	if _, err := f.Authenticate(ctx, "alice-secret"); err != auth.ErrUnknown {
		t.Fatalf("after the rename, alice: %v", err)
	}
}

// TestWatchKeepsEmptied: a change that leaves the file with no entry (a
// rewrite in place read between its truncate and its write) is not
// applied: everyone's token still works and the error says so; an
// explicit Reload (SIGHUP) applies it.
func TestWatchKeepsEmptied(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.hcl")
	write(t, path, threeKinds)
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		changed []string
		err     error
	}
	reloaded := make(chan result, 4)
	if err := f.Watch(ctx, 10*time.Millisecond, func(changed []string, err error) {
		reloaded <- result{changed, err}
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-reloaded:
		if !errors.Is(r.err, ErrEmptied) || !strings.Contains(r.err.Error(), path) || r.changed != nil {
			t.Fatalf("emptied file: changed %v, err %v; want ErrEmptied naming %s", r.changed, r.err, path)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reload within 5 s of the truncate")
	}
	for _, tok := range []string{"alice-secret", "bob-secret", "carol-secret"} {
		if _, err := f.Authenticate(ctx, tok); err != nil {
			t.Fatalf("after an emptied file, %s: %v", tok, err)
		}
	}
	changed, err := f.Reload()
	if err != nil || !slices.Equal(changed, []string{"alice", "bob", "carol"}) {
		t.Fatalf("explicit reload of an empty file: %v %v", changed, err)
	}
	if _, err := f.Authenticate(ctx, "alice-secret"); err != auth.ErrUnknown {
		t.Fatalf("after the explicit reload, alice: %v", err)
	}
}

// TestFileMode: a tokens file group or others may write is refused at
// load and at reload (the tokens in use kept); one they may read loads,
// with a warning naming the mode.
func TestFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	write(t, path, threeKinds)
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "may be written by others (mode 0666): chmod 600 "+path) {
		t.Fatalf("a 0666 tokens file: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if w := f.ModeWarning(); !strings.Contains(w, "may be read by others (mode 0644)") {
		t.Fatalf("a 0644 tokens file: warning %q", w)
	}
	if err := os.Chmod(path, 0o620); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reload(); err == nil || !strings.Contains(err.Error(), "may be written by others") {
		t.Fatalf("reload of a 0620 tokens file: %v", err)
	}
	if _, err := f.Authenticate(context.Background(), "alice-secret"); err != nil {
		t.Fatalf("after a refused reload, alice: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if w := f.ModeWarning(); w != "" {
		t.Fatalf("a 0600 tokens file: warning %q", w)
	}
}

// TestChain: the static token is the owner "token", the tokens file's
// names follow; a JWT-shaped credential goes to the JWT authenticator
// alone; a failure to decide is returned as it is.
func TestChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	write(t, path, threeKinds)
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	jwt := auth.Func(func(context.Context, string) (auth.Identity, error) { return auth.Identity{}, auth.ErrExpired })
	c := &auth.Chain{Tokens: []auth.Authenticator{auth.NewStatic("the-token"), f}, JWT: jwt}
	ctx := context.Background()
	if id, err := c.Authenticate(ctx, "the-token"); err != nil || id != (auth.Identity{Name: "token", Role: auth.Owner, Method: "token"}) {
		t.Fatalf("static: %+v %v", id, err)
	}
	if id, err := c.Authenticate(ctx, "alice-secret"); err != nil || id.Name != "alice" {
		t.Fatalf("file: %+v %v", id, err)
	}
	if _, err := c.Authenticate(ctx, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"); err != auth.ErrExpired {
		t.Fatalf("JWT: %v, want expired", err)
	}
	if _, err := c.Authenticate(ctx, "nobody"); err != auth.ErrUnknown {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := (&auth.Chain{}).Authenticate(ctx, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"); err != auth.ErrUnknown {
		t.Fatalf("JWT without an authenticator: %v", err)
	}
	if _, err := auth.NewStatic("").Authenticate(ctx, ""); err != auth.ErrUnknown {
		t.Fatalf("empty static: %v", err)
	}
}

// TestVerifiedBound: the cache of slow matches holds at most MaxVerified
// tokens, even when many distinct tokens match one bcrypt entry (bcrypt
// reads only the first 72 bytes).
func TestVerifiedBound(t *testing.T) {
	long := strings.Repeat("k", 72)
	h, err := bcrypt.GenerateFromPassword([]byte(long), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	write(t, path, entry("dave", "user", string(h)))
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxVerified + 20 {
		id, err := f.Authenticate(context.Background(), long+strconv.Itoa(i))
		if err != nil || id.Name != "dave" {
			t.Fatalf("token %d: %+v %v", i, id, err)
		}
		f.mu.Lock()
		n := len(f.verified)
		f.mu.Unlock()
		if n > MaxVerified {
			t.Fatalf("%d cached, bound %d", n, MaxVerified)
		}
	}
}

// TestFileBound: a tokens file over MaxFileBytes is refused, not read
// whole.
func TestFileBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	write(t, path, entry("a", "user", aliceSHA)+"#"+strings.Repeat("x", MaxFileBytes)+"\n")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "over 1048576 bytes") {
		t.Fatalf("Load of a file over the bound: %v", err)
	}
}

// TestEntryLimits: an entry's deny and tcp_allow reach its identity;
// an unknown permission, a bad tcp_allow entry or a non-list is an error
// naming file:line; a change to either (none and empty differ: empty
// refuses every destination) counts as a change, so the name is revoked.
func TestEntryLimits(t *testing.T) {
	limited := func(extra string) string {
		return "token \"ci\" {\n  role = \"user\"\n  hash = \"" + aliceSHA + "\"\n" + extra + "}\n"
	}
	const deny3 = "  deny = [\"terminal.create\", \"files.read\", \"files.write\"]\n"
	src := limited("  tcp_allow = [\"127.0.0.1:5432\"]\n" + deny3)
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	write(t, path, src)
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	id, err := f.Authenticate(context.Background(), "alice-secret")
	if err != nil || id.Name != "ci" || id.Role != auth.User ||
		!slices.Equal(id.Deny.List(), []auth.Permission{auth.TerminalCreate, auth.FilesRead, auth.FilesWrite}) ||
		id.TCPAllow == nil || !slices.Equal(id.TCPAllow.Entries, []string{"127.0.0.1:5432"}) {
		t.Fatalf("ci: %+v %v", id, err)
	}
	if d := auth.Check(id, auth.TerminalCreate); d == nil || d.Error() != "permission denied: terminal.create is denied to ci by its tokens file entry" {
		t.Fatalf("terminal.create: %v", d)
	}
	if d := auth.Check(id, auth.TCPOpen); d != nil {
		t.Fatalf("tcp.open: %v", d)
	}

	for _, c := range []struct{ what, extra, want string }{
		{"unknown permission", "  deny = [\"terminal.create\", \"terminal.fly\"]\n", `t.hcl:4: token "ci": deny: unknown permission "terminal.fly" (one of root.list, terminal.create,`},
		{"unlisted", "  deny = [\"unlisted\"]\n", `t.hcl:4: token "ci": deny: unknown permission "unlisted"`},
		{"deny not a list", "  deny = \"terminal.create\"\n", "t.hcl:4: deny must be a list of strings"},
		{"bad tcp_allow", "  tcp_allow = [\"localhost:80\"]\n", `t.hcl:4: token "ci": tcp_allow: "localhost:80" is neither`},
		{"tcp_allow numbers", "  tcp_allow = [80]\n", "t.hcl:4: tcp_allow must be a list of strings"},
	} {
		if _, err := Parse([]byte(limited(c.extra)), "t.hcl"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.what, err, c.want)
		}
	}

	parse := func(src string) *Set {
		t.Helper()
		s, err := Parse([]byte(src), "t.hcl")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := parse(src)
	for _, c := range []struct {
		what, extra string
		changed     bool
	}{
		{"same", "  tcp_allow = [\"127.0.0.1:5432\"]\n" + deny3, false},
		{"one more deny", "  tcp_allow = [\"127.0.0.1:5432\"]\n  deny = [\"terminal.create\", \"files.read\", \"files.write\", \"tunnel.listen\"]\n", true},
		{"no deny", "  tcp_allow = [\"127.0.0.1:5432\"]\n", true},
		{"another port", "  tcp_allow = [\"127.0.0.1:5433\"]\n" + deny3, true},
		{"empty tcp_allow", "  tcp_allow = []\n" + deny3, true},
		{"no tcp_allow", deny3, true},
	} {
		got := Changed(base, parse(limited(c.extra)))
		if (len(got) == 1 && got[0] == "ci") != c.changed || len(got) > 1 {
			t.Errorf("%s: changed %v, want changed=%v", c.what, got, c.changed)
		}
	}
}

// TestSlowChecksBound: at most MaxSlowChecks slow verifications run at
// once. With every slot taken, a token that needs one (bob's, bcrypt)
// waits its turn, and the wait ends with the caller's context; a SHA-256
// entry's token needs no slot and passes meanwhile; once a slot is free
// the waiting check runs and matches.
func TestSlowChecksBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.hcl")
	write(t, path, threeKinds)
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cap(f.sem) != MaxSlowChecks {
		t.Fatalf("%d slots, want MaxSlowChecks (%d)", cap(f.sem), MaxSlowChecks)
	}
	for range MaxSlowChecks { // every slot held, as by slow checks under way
		f.sem <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := f.Authenticate(ctx, "bob-secret"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a slow check with every slot taken: %v, want it to wait until the context ends", err)
	}
	if got, err := f.Authenticate(context.Background(), "alice-secret"); err != nil || got.Name != "alice" {
		t.Fatalf("a SHA-256 token with every slot taken: %+v %v, want alice at once", got, err)
	}
	done := make(chan error, 1)
	go func() {
		got, err := f.Authenticate(context.Background(), "bob-secret")
		if err == nil && got.Name != "bob" {
			err = errors.New("matched " + got.Name)
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a slow check ran with every slot taken: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	<-f.sem // one check ends
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the waiting check, once a slot was free: %v, want bob", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting check did not run within 10 s of a free slot")
	}
	if n := len(f.sem); n != MaxSlowChecks-1 {
		t.Errorf("%d slots held after the check, want %d (its own given back)", n, MaxSlowChecks-1)
	}
}
