// Package tokensfile is the tokens file of auth.tokens_file
// (docs/operations.md "Identities"): named bearer tokens, each with a
// role, stored as a hash, never in clear.
//
//	token "alice" {
//	  role = "user"                      # owner | user | viewer
//	  hash = "sha256:<64 hex digits>"    # or "$2b$..." (bcrypt), "$argon2id$..."
//	  tcp_allow = ["127.0.0.1:5432"]     # optional: narrows the role's forwards
//	  deny = ["terminal.create"]         # optional: permissions refused to alice
//	}
//
// The principal is the block label. The file is refused when group or
// others may write it, and warned about (File.ModeWarning) when they may
// read it. A File is an auth.Authenticator over
// the file's current entries; Reload reads the file again (on SIGHUP, or
// when Watch sees it change) and keeps the previous entries when the new
// content is bad.
package tokensfile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/internal/fileperm"
)

// Method is the auth.Identity.Method of a tokens file identity.
const Method = "tokens_file"

// MaxFileBytes bounds how much of the tokens file is read: 1 MiB is
// thousands of entries.
const MaxFileBytes = 1 << 20

// MaxSlowChecks bounds the bcrypt and argon2id verifications running at
// once (each costs tens of milliseconds of CPU and, for argon2id, its
// memory parameter); more wait their turn, bounded by the caller's
// context.
const MaxSlowChecks = 4

// MaxVerified bounds the cache of slow hashes' matches: one token per
// entry in use, but bcrypt reads only a token's first 72 bytes, so any
// number of longer tokens match one entry; at the bound the cache is
// emptied (the next checks are slow again, nothing else changes).
const MaxVerified = 256

// Reserved principals: a tokens file entry cannot take the name of the
// single auth.token or of stdio.
var Reserved = []string{"token", "stdio"}

// Entry is one token of the file.
type Entry struct {
	Name string
	Role auth.Role
	// Hash is the stored form ("sha256:...", "$2b$...", "$argon2id$...").
	Hash string
	// Line is where the entry's block starts.
	Line int
	// Deny lists permissions refused to the entry though its role allows
	// them (auth.Identity.Deny).
	Deny auth.PermSet
	// TCPAllow, when not nil, narrows the entry's TCP destinations
	// (auth.Identity.TCPAllow; config.ParseAllowEntry syntax).
	TCPAllow *auth.TCPLimit

	sha    [sha256.Size]byte // kind sha256
	kind   hashKind
	argon  argonParams
	digest []byte // argon2id's expected key
}

type hashKind int

const (
	kindSHA256 hashKind = iota
	kindBcrypt
	kindArgon2id
)

type argonParams struct {
	time, memory uint32
	threads      uint8
	salt         []byte
}

// Set is the entries of one version of the file, by name.
type Set struct {
	entries []*Entry
}

// Names returns the principals of s, sorted.
func (s *Set) Names() []string {
	out := make([]string, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, e.Name)
	}
	slices.Sort(out)
	return out
}

// Entry returns name's entry, or nil.
func (s *Set) Entry(name string) *Entry {
	for _, e := range s.entries {
		if e.Name == name {
			return e
		}
	}
	return nil
}

// Changed returns the names of old whose entry is gone from s or whose
// hash, role, deny or tcp_allow differs in s: their open connections
// are revoked (they reconnect under the new limits).
func Changed(old, s *Set) []string {
	if old == nil {
		return nil
	}
	var out []string
	for _, e := range old.entries {
		n := s.Entry(e.Name)
		if n == nil || n.Hash != e.Hash || n.Role != e.Role || n.Deny != e.Deny || !sameLimit(n.TCPAllow, e.TCPAllow) {
			out = append(out, e.Name)
		}
	}
	slices.Sort(out)
	return out
}

// sameLimit reports whether a and b narrow alike (nil: not at all).
func sameLimit(a, b *auth.TCPLimit) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.Equal(a.Entries, b.Entries)
}

// Parse decodes a tokens file's content (filename names it in errors).
// It is strict: an unknown block or attribute, a missing role or hash, an
// unknown role, a hash of no known kind, a duplicate name or SHA-256, a
// reserved name are errors naming file:line.
func Parse(src []byte, filename string) (*Set, error) {
	f, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	content, diags := f.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "token", LabelNames: []string{"name"}}}})
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	s := &Set{}
	var errs []error
	bad := func(r hcl.Range, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", r.Filename, r.Start.Line, fmt.Sprintf(format, args...)))
	}
	for _, blk := range content.Blocks {
		name := blk.Labels[0]
		e := &Entry{Name: name, Line: blk.DefRange.Start.Line}
		if msg := CheckName(name); msg != "" {
			bad(blk.LabelRanges[0], "token %q: %s", name, msg)
			continue
		}
		if prev := s.Entry(name); prev != nil {
			bad(blk.DefRange, "token %q is defined twice (first at line %d)", name, prev.Line)
			continue
		}
		bc, d := blk.Body.Content(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "role", Required: true}, {Name: "hash", Required: true},
			{Name: "deny"}, {Name: "tcp_allow"}}})
		if d.HasErrors() {
			errs = append(errs, diagError(d))
			continue
		}
		role, r1, ok1 := stringAttr(bc.Attributes["role"], bad)
		hash, r2, ok2 := stringAttr(bc.Attributes["hash"], bad)
		if !ok1 || !ok2 {
			continue
		}
		var err error
		if e.Role, err = auth.ParseRole(role); err != nil {
			bad(r1, "token %q: %v", name, err)
			continue
		}
		e.Hash = hash
		if err := e.parseHash(); err != nil {
			bad(r2, "token %q: %v", name, err)
			continue
		}
		if a := bc.Attributes["deny"]; a != nil {
			list, ok := stringList(a, bad)
			if !ok {
				continue
			}
			okAll := true
			for _, v := range list {
				p, err := auth.ParsePermission(v)
				if err != nil {
					bad(a.Expr.Range(), "token %q: deny: %v", name, err)
					okAll = false
					continue
				}
				e.Deny |= auth.Perms(p)
			}
			if !okAll {
				continue
			}
		}
		if a := bc.Attributes["tcp_allow"]; a != nil {
			list, ok := stringList(a, bad)
			if !ok {
				continue
			}
			okAll := true
			for _, v := range list {
				if _, err := config.ParseAllowEntry(v); err != nil {
					bad(a.Expr.Range(), "token %q: tcp_allow: %v", name, err)
					okAll = false
				}
			}
			if !okAll {
				continue
			}
			e.TCPAllow = &auth.TCPLimit{Entries: list} // set, even empty: refuse every destination
		}
		if e.kind == kindSHA256 {
			for _, o := range s.entries {
				if o.kind == kindSHA256 && o.sha == e.sha {
					bad(r2, "token %q has the same hash as token %q (line %d): one token, two names", name, o.Name, o.Line)
				}
			}
		}
		s.entries = append(s.entries, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// stringList reads a's value as a list of strings.
func stringList(a *hcl.Attribute, bad func(hcl.Range, string, ...any)) ([]string, bool) {
	v, d := a.Expr.Value(nil)
	if d.HasErrors() || v.IsNull() || !(v.Type().IsTupleType() || v.Type().IsListType()) {
		bad(a.Expr.Range(), "%s must be a list of strings", a.Name)
		return nil, false
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, ev := it.Element()
		if ev.IsNull() || ev.Type() != cty.String {
			bad(a.Expr.Range(), "%s must be a list of strings", a.Name)
			return nil, false
		}
		out = append(out, ev.AsString())
	}
	return out, true
}

func stringAttr(a *hcl.Attribute, bad func(hcl.Range, string, ...any)) (string, hcl.Range, bool) {
	v, d := a.Expr.Value(nil)
	if d.HasErrors() || v.Type() != cty.String || v.IsNull() {
		bad(a.Expr.Range(), "%s must be a string", a.Name)
		return "", a.Expr.Range(), false
	}
	return v.AsString(), a.Expr.Range(), true
}

// CheckName returns why name cannot be a principal ("" if it can): 1 to
// 64 bytes of letters, digits and ._@+-, and not a reserved name.
func CheckName(name string) string {
	if name == "" || len(name) > 64 {
		return "a name is 1 to 64 bytes"
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._@+-", c)) {
			return fmt.Sprintf("a name has only letters, digits and ._@+- (found %q)", c)
		}
	}
	if slices.Contains(Reserved, name) {
		return "the name is reserved (the single auth.token is \"token\", a stdio client \"stdio\")"
	}
	return ""
}

// parseHash reads e.Hash.
func (e *Entry) parseHash() error {
	h := e.Hash
	switch {
	case strings.HasPrefix(h, "sha256:"):
		x := strings.TrimPrefix(h, "sha256:")
		b, err := hex.DecodeString(x)
		if err != nil || len(b) != sha256.Size {
			return fmt.Errorf("a sha256: hash is 64 hex digits (sidecar token hash prints one)")
		}
		e.kind = kindSHA256
		copy(e.sha[:], b)
	case strings.HasPrefix(h, "$2a$"), strings.HasPrefix(h, "$2b$"), strings.HasPrefix(h, "$2y$"):
		if _, err := bcrypt.Cost([]byte(h)); err != nil {
			return fmt.Errorf("bad bcrypt hash: %v", err)
		}
		e.kind = kindBcrypt
	case strings.HasPrefix(h, "$argon2id$"):
		p, key, err := parseArgon2id(h)
		if err != nil {
			return fmt.Errorf("bad argon2id hash: %v", err)
		}
		e.kind, e.argon, e.digest = kindArgon2id, p, key
	default:
		return fmt.Errorf("hash must start with sha256:, $2a$/$2b$/$2y$ (bcrypt) or $argon2id$ (never the token in clear)")
	}
	return nil
}

// argon2id bounds: a file asking for more is refused at load.
const (
	maxArgonMemoryKiB = 1 << 20 // 1 GiB
	maxArgonTime      = 16
)

// parseArgon2id reads the PHC string
// $argon2id$v=19$m=65536,t=3,p=4$<salt>$<key> (base64 without padding).
func parseArgon2id(h string) (argonParams, []byte, error) {
	var p argonParams
	parts := strings.Split(h, "$")
	if len(parts) != 6 || parts[2] != "v=19" {
		return p, nil, errors.New(`want $argon2id$v=19$m=M,t=T,p=P$SALT$KEY`)
	}
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return p, nil, fmt.Errorf("parameter %q is not a number", kv)
		}
		switch k {
		case "m":
			p.memory = uint32(n)
		case "t":
			p.time = uint32(n)
		case "p":
			if n > 255 {
				return p, nil, fmt.Errorf("p=%d is over 255", n)
			}
			p.threads = uint8(n)
		default:
			return p, nil, fmt.Errorf("unknown parameter %q", k)
		}
	}
	if p.memory == 0 || p.time == 0 || p.threads == 0 {
		return p, nil, errors.New("m, t and p must all be set and positive")
	}
	if p.memory > maxArgonMemoryKiB || p.time > maxArgonTime {
		return p, nil, fmt.Errorf("m is at most %d KiB and t at most %d", maxArgonMemoryKiB, maxArgonTime)
	}
	var err error
	if p.salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil || len(p.salt) < 8 {
		return p, nil, errors.New("the salt is not base64 of at least 8 bytes")
	}
	key, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(key) < 16 {
		return p, nil, errors.New("the key is not base64 of at least 16 bytes")
	}
	return p, key, nil
}

// HashSHA256 returns the sha256: line of token ("sha256:" and 64 hex
// digits): what `sidecar token hash` prints.
func HashSHA256(token string) string {
	d := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(d[:])
}

// Authenticate returns the entry whose hash token matches, or nil. The
// SHA-256 entries are all compared, in constant time; the slow hashes
// run only when no SHA-256 entry matched, at most MaxSlowChecks at once.
func (s *Set) authenticate(ctx context.Context, token string, sem chan struct{}) (*Entry, error) {
	d := sha256.Sum256([]byte(token))
	var found *Entry
	for _, e := range s.entries {
		if e.kind == kindSHA256 && subtle.ConstantTimeCompare(d[:], e.sha[:]) == 1 {
			found = e
		}
	}
	if found != nil {
		return found, nil
	}
	for _, e := range s.entries {
		if e.kind == kindSHA256 {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		ok := e.check(token)
		<-sem
		if ok {
			return e, nil
		}
	}
	return nil, nil
}

func (e *Entry) check(token string) bool {
	switch e.kind {
	case kindBcrypt:
		return bcrypt.CompareHashAndPassword([]byte(e.Hash), []byte(token)) == nil
	case kindArgon2id:
		k := argon2.IDKey([]byte(token), e.argon.salt, e.argon.time, e.argon.memory, e.argon.threads, uint32(len(e.digest)))
		return subtle.ConstantTimeCompare(k, e.digest) == 1
	}
	return false
}

// File is the tokens file at a path: an auth.Authenticator over its
// current entries (the last good version).
type File struct {
	path string
	cur  atomic.Pointer[Set]
	sem  chan struct{}

	// verified caches the slow hashes' answers: SHA-256 of a token →
	// its entry, for the current set (cleared by each reload), at most
	// MaxVerified.
	mu       sync.Mutex
	verified map[[sha256.Size]byte]*Entry

	// onReload is told each good reload's changed names (Changed).
	reloadMu sync.Mutex
	onReload func(changed []string)
}

// Load reads the tokens file at path: an error (naming file:line) when
// it cannot be read or is bad.
func Load(path string) (*File, error) {
	f := &File{path: path, sem: make(chan struct{}, MaxSlowChecks), verified: map[[sha256.Size]byte]*Entry{}}
	s, err := f.read()
	if err != nil {
		return nil, err
	}
	f.cur.Store(s)
	return f, nil
}

// Path is the file's path.
func (f *File) Path() string { return f.path }

// Current returns the entries in use.
func (f *File) Current() *Set { return f.cur.Load() }

func (f *File) read() (*Set, error) {
	b, err := f.readBytes()
	if err != nil {
		return nil, err
	}
	return Parse(b, f.path)
}

func (f *File) readBytes() ([]byte, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	defer fh.Close()
	if fi, err := fh.Stat(); err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", f.path, err)
	} else if _, err := fileperm.Check(f.path, fi); err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(fh, MaxFileBytes+1)); err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", f.path, err)
	}
	if buf.Len() > MaxFileBytes {
		return nil, fmt.Errorf("tokens file %s: over %d bytes", f.path, MaxFileBytes)
	}
	return buf.Bytes(), nil
}

// MaxSettleReads bounds the reads of a change-triggered reload waiting
// for the file to settle (two reads, settle apart, that agree): a file
// still changing after that many is reloaded as last read.
const MaxSettleReads = 10

// ErrEmptied is the error of a change-triggered reload whose file has no
// entry while the entries in use are not empty (a file rewritten in
// place, truncated then written, read in between; or emptied by
// mistake): it is not applied, since it would revoke everyone. Reload
// (SIGHUP) applies it.
var ErrEmptied = errors.New("the file has no token while tokens are in use: not applied on a change (it would revoke everyone); send SIGHUP to apply it")

// settledRead reads the file until two reads settle apart agree, at
// most MaxSettleReads times, and parses the last.
func (f *File) settledRead(ctx context.Context, settle time.Duration) (*Set, error) {
	prev, err := f.readBytes()
	for i := 1; i < MaxSettleReads; i++ {
		t := time.NewTimer(settle)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		cur, err2 := f.readBytes()
		if err == nil && err2 == nil && bytes.Equal(prev, cur) {
			break
		}
		prev, err = cur, err2
	}
	if err != nil {
		return nil, err
	}
	return Parse(prev, f.path)
}

// ModeWarning returns why the file's mode is loose ("" when it is not,
// or cannot be read): group or others may read it (one they may write
// is refused at each read).
func (f *File) ModeWarning() string {
	fi, err := os.Stat(f.path)
	if err != nil {
		return ""
	}
	w, _ := fileperm.Check(f.path, fi)
	return w
}

// OnReload sets fn to be told, after each good reload, the names whose
// entry was removed or changed (hash or role): the caller revokes their
// connections. It runs on the reloading goroutine.
func (f *File) OnReload(fn func(changed []string)) {
	f.reloadMu.Lock()
	f.onReload = fn
	f.reloadMu.Unlock()
}

// Reload reads the file again. A bad file (or one that cannot be read)
// keeps the entries in use and returns why; a good one replaces them and
// returns the names removed or changed (also given to OnReload's fn).
func (f *File) Reload() ([]string, error) {
	s, err := f.read()
	if err != nil {
		return nil, err
	}
	return f.apply(s, false)
}

// apply makes s the entries in use, unless keepNonEmpty and s would
// empty a non-empty set (ErrEmptied).
func (f *File) apply(s *Set, keepNonEmpty bool) ([]string, error) {
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	if keepNonEmpty && len(s.entries) == 0 && len(f.cur.Load().entries) > 0 {
		return nil, fmt.Errorf("tokens file %s: %w", f.path, ErrEmptied)
	}
	old := f.cur.Swap(s)
	f.mu.Lock()
	clear(f.verified)
	f.mu.Unlock()
	changed := Changed(old, s)
	if f.onReload != nil && len(changed) > 0 {
		f.onReload(changed)
	}
	return changed, nil
}

// Authenticate implements auth.Authenticator: the identity of the entry
// whose hash token matches (Method "tokens_file"), or auth.ErrUnknown.
func (f *File) Authenticate(ctx context.Context, token string) (auth.Identity, error) {
	if token == "" {
		return auth.Identity{}, auth.ErrUnknown
	}
	s := f.cur.Load()
	key := sha256.Sum256([]byte(token))
	f.mu.Lock()
	e := f.verified[key]
	f.mu.Unlock()
	if e == nil || s.Entry(e.Name) != e {
		var err error
		if e, err = s.authenticate(ctx, token, f.sem); err != nil {
			return auth.Identity{}, err
		}
		if e != nil && e.kind != kindSHA256 {
			f.mu.Lock()
			if len(f.verified) >= MaxVerified {
				clear(f.verified)
			}
			if f.cur.Load() == s {
				f.verified[key] = e
			}
			f.mu.Unlock()
		}
	}
	if e == nil {
		return auth.Identity{}, auth.ErrUnknown
	}
	return auth.Identity{Name: e.Name, Role: e.Role, Method: Method, Deny: e.Deny, TCPAllow: e.TCPAllow}, nil
}

// Watch reloads the file whenever its directory reports a change to it
// (a write, or an editor's rename over it), until ctx ends; log is told
// each reload's outcome (err nil: changed is what was revoked). Events
// are coalesced for settle (100 ms when 0) so that a write in several
// parts reloads once; then the file is read until two reads settle
// apart agree (at most MaxSettleReads), and a content with no entry is
// not applied while entries are in use (ErrEmptied). A deleted file
// keeps the entries in use (its reload fails).
func (f *File) Watch(ctx context.Context, settle time.Duration, log func(changed []string, err error)) error {
	if settle <= 0 {
		settle = 100 * time.Millisecond
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("tokens file: watch: %w", err)
	}
	abs, err := filepath.Abs(f.path)
	if err != nil {
		_ = w.Close()
		return err
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		_ = w.Close()
		return fmt.Errorf("tokens file: watch %s: %w", filepath.Dir(abs), err)
	}
	base := filepath.Base(abs)
	go func() {
		defer w.Close()
		var fire <-chan time.Time
		var t *time.Timer
		for {
			select {
			case <-ctx.Done():
				if t != nil {
					t.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Base(ev.Name) != base || ev.Op == fsnotify.Chmod {
					continue
				}
				if t == nil {
					t = time.NewTimer(settle)
				} else {
					t.Reset(settle)
				}
				fire = t.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log(nil, fmt.Errorf("tokens file: watch: %w", err))
			case <-fire:
				fire = nil
				s, err := f.settledRead(ctx, settle)
				if ctx.Err() != nil {
					return
				}
				var changed []string
				if err == nil {
					changed, err = f.apply(s, true)
				}
				log(changed, err)
			}
		}
	}()
	return nil
}

// diagError turns HCL diagnostics into one error of "file:line: what"
// lines.
func diagError(diags hcl.Diagnostics) error {
	var errs []error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		if r := d.Subject; r != nil {
			msg = fmt.Sprintf("%s:%d: %s", r.Filename, r.Start.Line, msg)
		}
		errs = append(errs, errors.New(msg))
	}
	return errors.Join(errs...)
}
