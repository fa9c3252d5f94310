package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newKind is a file kind with the default config changed by tweak; its
// channels end at cleanup.
func newKind(t *testing.T, tweak func(*config.Files)) *Kind {
	t.Helper()
	cfg := config.Default()
	if tweak != nil {
		tweak(&cfg.Files)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	k, err := NewKind(adapters.Env{Config: cfg, Journal: journal.New(journal.Limits{}), Log: hclog.NewNullLogger(), Quotas: adapters.NewQuotas()})
	if err != nil {
		t.Fatal(err)
	}
	fk := k.(*Kind)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fk.Shutdown(ctx)
	})
	return fk
}

var alice = adapters.Caller{ClientID: "c1", Principal: "token:alice", Identity: auth.Identity{Name: "token:alice", Role: auth.User}, Conn: 1}

// call serves one request of the kind, its params given as JSON.
func call(k *Kind, c adapters.Caller, method, params string) (any, *rpc.Error) {
	for _, r := range k.Requests() {
		if r.Method == method {
			return r.Serve(context.Background(), c, json.RawMessage(params))
		}
	}
	return nil, rpc.Errorf(rpc.CodeMethodNotFound, "no %s", method)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func mustWrite(t *testing.T, p, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestRefusals: every refusal of files/open and files/put, with its code
// and exact message: bad params, paths outside the policy (also through
// a symbolic link), hostile entries (.., absolute, empty components,
// symbolic links leading out of the destination), and files that are
// not regular (directory, pipe, device, a partial file that is a link).
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	w := filepath.Join(dir, "w")
	for _, d := range []string{filepath.Join(dir, "sub"), filepath.Join(w, "d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(dir, "f"), "hello", 0o644)
	for _, p := range []string{filepath.Join(dir, "fifo"), filepath.Join(w, "fifo")} {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(w, "esc"):              "/etc",
		filepath.Join(w, "back"):             dir,
		filepath.Join(w, ".x"+PartialSuffix): filepath.Join(dir, "f"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	k := newKind(t, func(f *config.Files) { f.Read, f.Write = []string{dir, "/dev/null"}, []string{w} })
	const sumHello = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	open := func(extra string) string {
		return `{"channel":"ahp-file:/t1",` + extra + `}`
	}
	read := func(path string) string { return open(`"mode":"read","path":` + jsonString(path)) }
	readEntry := func(path, entry string) string {
		return open(`"mode":"read","path":` + jsonString(path) + `,"entry":` + jsonString(entry))
	}
	write := func(path, entry string) string {
		return open(`"mode":"write","size":5,"sha256":"` + sumHello + `","path":` + jsonString(path) + `,"entry":` + jsonString(entry))
	}
	for _, tt := range []struct {
		name, method, params string
		code                 int64
		msg                  string
	}{
		{"channel of another scheme", rpc.MethodFilesOpen, `{"channel":"ahp-tcp:/x","mode":"read","path":"/f"}`, rpc.CodeInvalidParams,
			fmt.Sprintf(`invalid params: "channel" must be ahp-file:/<id> (id of 1-%d characters without spaces)`, MaxID)},
		{"channel id with a space", rpc.MethodFilesOpen, `{"channel":"ahp-file:/a b","mode":"read","path":"/f"}`, rpc.CodeInvalidParams,
			fmt.Sprintf(`invalid params: "channel" must be ahp-file:/<id> (id of 1-%d characters without spaces)`, MaxID)},
		{"mode", rpc.MethodFilesOpen, open(`"mode":"append","path":"/f"`), rpc.CodeInvalidParams, `invalid params: "mode" must be "read" or "write"`},
		{"no path", rpc.MethodFilesOpen, open(`"mode":"read"`), rpc.CodeInvalidParams, `invalid params: "path" is required`},
		{"relative path", rpc.MethodFilesOpen, read("etc/passwd"), rpc.CodeInvalidParams, `invalid params: "path" "etc/passwd" must be absolute and clean`},
		{"unclean path", rpc.MethodFilesOpen, read(dir + "/sub/../f"), rpc.CodeInvalidParams, `invalid params: "path" "` + dir + `/sub/../f" must be absolute and clean`},
		{"read outside the policy", rpc.MethodFilesOpen, read("/etc/hostname"), rpc.CodePermissionDenied,
			`read /etc/hostname not allowed by policy: not under files.read ["` + dir + `" "/dev/null"]`},
		{"read a directory", rpc.MethodFilesOpen, read(dir + "/sub"), rpc.CodeInvalidParams, dir + "/sub is a directory, not a regular file: refused"},
		{"read a pipe", rpc.MethodFilesOpen, read(dir + "/fifo"), rpc.CodeInvalidParams, dir + "/fifo is a named pipe, not a regular file: refused"},
		{"read a device", rpc.MethodFilesOpen, read("/dev/null"), rpc.CodeInvalidParams, "/dev/null is a device, not a regular file: refused"},
		{"read a missing file", rpc.MethodFilesOpen, read(dir + "/nope"), rpc.CodeNotFound, dir + "/nope: no such file or directory"},
		{"entry with ..", rpc.MethodFilesOpen, readEntry(dir, "sub/../../f"), rpc.CodeInvalidParams, `refused entry of ` + dir + `: "sub/../../f" has a ".." component`},
		{"absolute entry", rpc.MethodFilesOpen, readEntry(dir, "/etc/passwd"), rpc.CodeInvalidParams, `refused entry of ` + dir + `: "/etc/passwd" is absolute`},
		{"entry with an empty component", rpc.MethodFilesOpen, readEntry(dir, "sub//f"), rpc.CodeInvalidParams, `refused entry of ` + dir + `: "sub//f" has an empty component`},
		{"entry with a NUL", rpc.MethodFilesOpen, readEntry(dir, "f\x00"), rpc.CodeInvalidParams, `refused entry of ` + dir + `: "f\x00" holds a NUL byte`},
		{"entry through a link out", rpc.MethodFilesOpen, write(w, "esc/passwd"), rpc.CodePermissionDenied,
			"refused entry esc/passwd of " + w + ": it leads out of the destination (a symbolic link)"},
		{"write without size", rpc.MethodFilesOpen, open(`"mode":"write","path":"` + w + `/x","sha256":"` + sumHello + `"`), rpc.CodeInvalidParams, `invalid params: "size" is required`},
		{"write a negative size", rpc.MethodFilesOpen, open(`"mode":"write","path":"` + w + `/x","size":-1,"sha256":"` + sumHello + `"`), rpc.CodeInvalidParams, `invalid params: "size" must not be negative`},
		{"write an uppercase sha256", rpc.MethodFilesOpen, open(`"mode":"write","path":"` + w + `/x","size":5,"sha256":"` + strings.ToUpper(sumHello) + `"`), rpc.CodeInvalidParams,
			`invalid params: "sha256" must be 64 lowercase hex digits`},
		{"write a short sha256", rpc.MethodFilesOpen, open(`"mode":"write","path":"` + w + `/x","size":5,"sha256":"abc"`), rpc.CodeInvalidParams, `invalid params: "sha256" must be 64 lowercase hex digits`},
		{"write outside the policy", rpc.MethodFilesOpen, write(dir, "f"), rpc.CodePermissionDenied,
			`write ` + dir + `/f not allowed by policy: not under files.write ["` + w + `"]`},
		{"write through a link out of the policy", rpc.MethodFilesOpen, write(w+"/back/sub", "x"), rpc.CodePermissionDenied,
			`write ` + w + `/back/sub/x (` + dir + `/sub/x) not allowed by policy: not under files.write ["` + w + `"]`},
		{"write onto a directory", rpc.MethodFilesOpen, write(w, "d"), rpc.CodeInvalidParams, w + "/d is a directory: refused, only a regular file is replaced"},
		{"write onto a pipe", rpc.MethodFilesOpen, write(w, "fifo"), rpc.CodeInvalidParams, w + "/fifo is a named pipe: refused, only a regular file is replaced"},
		{"partial file a link", rpc.MethodFilesOpen, write(w, "x"), rpc.CodeInvalidParams, w + "/.x" + PartialSuffix + " is a symbolic link: refused"},
		{"put of another type", rpc.MethodFilesPut, `{"path":"` + w + `","entry":"p","type":"fifo"}`, rpc.CodeInvalidParams, `invalid params: "type" must be "dir" or "symlink", got "fifo": refused`},
		{"put a link without entry", rpc.MethodFilesPut, `{"path":"` + w + `","type":"symlink","target":"d"}`, rpc.CodeInvalidParams, `invalid params: "entry" is required`},
		{"put a link to an absolute path", rpc.MethodFilesPut, `{"path":"` + w + `","entry":"l","type":"symlink","target":"/etc/passwd"}`, rpc.CodePermissionDenied,
			`refused entry of ` + w + `: symbolic link "l" points to the absolute path "/etc/passwd", outside the destination`},
		{"put a link climbing out", rpc.MethodFilesPut, `{"path":"` + w + `","entry":"d/l","type":"symlink","target":"../../x"}`, rpc.CodePermissionDenied,
			`refused entry of ` + w + `: symbolic link "d/l" points to "../../x", outside the destination`},
		{"put a link with an empty target", rpc.MethodFilesPut, `{"path":"` + w + `","entry":"l","type":"symlink"}`, rpc.CodePermissionDenied,
			`refused entry of ` + w + `: symbolic link "l" has an empty or invalid target`},
		{"put a directory with ..", rpc.MethodFilesPut, `{"path":"` + w + `","entry":"..","type":"dir"}`, rpc.CodeInvalidParams,
			`refused entry of ` + w + `: ".." has a ".." component`},
		{"put a directory through a link out", rpc.MethodFilesPut, `{"path":"` + w + `","entry":"esc/new","type":"dir"}`, rpc.CodePermissionDenied,
			"refused entry esc/new of " + w + ": it leads out of the destination (a symbolic link)"},
		{"put a directory outside the policy", rpc.MethodFilesPut, `{"path":"` + dir + `/new","type":"dir"}`, rpc.CodePermissionDenied,
			`write ` + dir + `/new not allowed by policy: not under files.write ["` + w + `"]`},
		{"stat outside the policy", rpc.MethodFilesStat, `{"path":"/etc"}`, rpc.CodePermissionDenied, `read /etc not allowed by policy: not under files.read ["` + dir + `" "/dev/null"]`},
		{"list outside the policy", rpc.MethodFilesList, `{"path":"/"}`, rpc.CodePermissionDenied, `read / not allowed by policy: not under files.read ["` + dir + `" "/dev/null"]`},
		{"list a relative path", rpc.MethodFilesList, `{"path":"."}`, rpc.CodeInvalidParams, `invalid params: "path" "." must be absolute and clean`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, e := call(k, alice, tt.method, tt.params)
			if e == nil {
				t.Fatalf("accepted: %+v", res)
			}
			if e.Code != tt.code || e.Message != tt.msg {
				t.Errorf("error %d %q\nwant  %d %q", e.Code, e.Message, tt.code, tt.msg)
			}
		})
	}
	// Nothing was created by a refusal, and no transfer is left open.
	for _, p := range []string{"/etc/new", filepath.Join(dir, "new"), filepath.Join(w, "l"), filepath.Join(w, "d", "l"), filepath.Join(w, "p")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists after a refusal: %v", p, err)
		}
	}
	if m := k.Metrics()[0]; m.Value != 0 {
		t.Errorf("%s = %v after refusals, want 0", m.Name, m.Value)
	}
}

// TestQuotas: transfers are counted per principal and in total, each
// refusal naming its rule; a transfer ended frees its place.
func TestQuotas(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "f"), "hello", 0o644)
	k := newKind(t, func(f *config.Files) { f.MaxPerPrincipal, f.MaxTotal = 2, 3 })
	n := 0
	openAs := func(c adapters.Caller) *rpc.Error {
		n++
		_, e := call(k, c, rpc.MethodFilesOpen, fmt.Sprintf(`{"channel":"ahp-file:/q%d","mode":"read","path":%s}`, n, jsonString(filepath.Join(dir, "f"))))
		return e
	}
	bob := adapters.Caller{ClientID: "c2", Principal: "token:bob", Identity: auth.Identity{Name: "token:bob", Role: auth.User}, Conn: 2}
	carol := adapters.Caller{ClientID: "c3", Principal: "token:carol", Identity: auth.Identity{Name: "token:carol", Role: auth.User}, Conn: 3}
	refused := func(c adapters.Caller, want string) {
		t.Helper()
		e := openAs(c)
		if e == nil || e.Code != rpc.CodePermissionDenied || e.Message != want {
			t.Errorf("open as %s: %v, want -32009 %q", c.Principal, e, want)
		}
	}
	for _, c := range []adapters.Caller{alice, alice} {
		if e := openAs(c); e != nil {
			t.Fatalf("open as %s: %v", c.Principal, e)
		}
	}
	refused(alice, "file transfer limit reached: 2 open for this token (files.max_per_principal); wait for one to end")
	if e := openAs(bob); e != nil {
		t.Fatalf("open as bob: %v", e)
	}
	if m := k.Metrics()[0]; m.Name != "file_transfers" || m.Value != 3 {
		t.Errorf("metric %s = %v, want file_transfers 3", m.Name, m.Value)
	}
	refused(carol, "file transfer limit reached: 3 open on this host (files.max_total); wait for one to end")
	// Bob's connection ends: his transfer's place is free for Carol.
	k.ConnEnded(bob.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for k.Metrics()[0].Value != 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("file_transfers %v after bob's connection ended, want 2", k.Metrics()[0].Value)
		case <-time.After(time.Millisecond):
		}
	}
	if e := openAs(carol); e != nil {
		t.Errorf("open as carol once bob's ended: %v", e)
	}
}

// names is a directory of the given names read in batches as os.File's
// Readdirnames does.
type names struct{ left []string }

func (d *names) Readdirnames(n int) ([]string, error) {
	if len(d.left) == 0 {
		return nil, nil
	}
	b := d.left[:min(n, len(d.left))]
	d.left = d.left[len(b):]
	return b, nil
}

// TestPageNames: a page is the smallest limit names after the cursor, in
// byte order, whatever order the directory gives them in, and the names
// held never pass 2×limit+listBatch, however big the directory.
func TestPageNames(t *testing.T) {
	all := make([]string, 20_000)
	for i := range all {
		all[i] = fmt.Sprintf("n%05d", (i*7919)%len(all)) // every name once, out of order
	}
	sorted := slices.Sorted(slices.Values(all))
	for _, tt := range []struct {
		cursor string
		limit  int
	}{{"", 1000}, {"", 1}, {"n09999", 7}, {"n19990", 1000}, {"n19999", 5}, {"", 25_000}} {
		t.Run(fmt.Sprintf("%s+%d", tt.cursor, tt.limit), func(t *testing.T) {
			got, more, held, err := pageNames(&names{slices.Clone(all)}, tt.cursor, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			i, _ := slices.BinarySearch(sorted, tt.cursor)
			if i < len(sorted) && sorted[i] == tt.cursor {
				i++
			}
			want := sorted[i:min(i+tt.limit, len(sorted))]
			if !slices.Equal(got, want) || more != (i+tt.limit < len(sorted)) {
				t.Errorf("%d names %v…, more %v; want %d names from %v, more %v", len(got), got[:min(3, len(got))], more, len(want), want[:min(1, len(want))], !more)
			}
			if bound := 2*tt.limit + listBatch; held > bound {
				t.Errorf("held %d names, bound %d", held, bound)
			}
		})
	}
}

// TestListPages: files/list pages through a directory of 2,500 names
// 1,000 at a time (its bound, also when asked for more), then by a
// smaller limit, each page's next its last name, and every entry
// described (a symbolic link with its target).
func TestListPages(t *testing.T) {
	dir := t.TempDir()
	for i := range 2500 {
		mustWrite(t, filepath.Join(dir, fmt.Sprintf("f%04d", i)), strings.Repeat("x", i%10), 0o640)
	}
	if err := os.Symlink("f0001", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	k := newKind(t, nil)
	list := func(cursor string, limit int) rpc.FilesListResult {
		t.Helper()
		res, e := call(k, alice, rpc.MethodFilesList, fmt.Sprintf(`{"path":%s,"cursor":%s,"limit":%d}`, jsonString(dir), jsonString(cursor), limit))
		if e != nil {
			t.Fatal(e)
		}
		return res.(rpc.FilesListResult)
	}
	var got []string
	cursor := ""
	for page := 0; ; page++ {
		res := list(cursor, 5000)
		if want := min(MaxListEntries, 2501-len(got)); len(res.Entries) != want {
			t.Fatalf("page %d: %d entries, want %d", page, len(res.Entries), want)
		}
		for _, e := range res.Entries {
			got = append(got, e.Name)
		}
		if res.Next == "" {
			break
		}
		if res.Next != got[len(got)-1] {
			t.Fatalf("next %q, want the last name %q", res.Next, got[len(got)-1])
		}
		cursor = res.Next
	}
	if len(got) != 2501 || !slices.IsSorted(got) || got[0] != "f0000" || got[2500] != "link" {
		t.Fatalf("%d names, sorted %v, first %q last %q", len(got), slices.IsSorted(got), got[0], got[len(got)-1])
	}
	res := list("f2497", 2)
	want := []rpc.FileInfo{
		{Name: "f2498", Type: rpc.FileRegular, Size: 8, FileMode: 0o640},
		{Name: "f2499", Type: rpc.FileRegular, Size: 9, FileMode: 0o640},
	}
	for i := range res.Entries {
		res.Entries[i].MtimeNs = 0
	}
	if !slices.Equal(res.Entries, want) || res.Next != "f2499" {
		t.Errorf("page after f2497 by 2: %+v next %q", res.Entries, res.Next)
	}
	res = list("f2499", 2)
	if len(res.Entries) != 1 || res.Entries[0].Type != rpc.FileSymlink || res.Entries[0].Target != "f0001" || res.Next != "" {
		t.Errorf("last page: %+v next %q", res.Entries, res.Next)
	}
}

// openWriter opens path for writing (files/open) as alice and returns
// its result and the writer the channel was given, driven directly here
// as the channel would (no subscriber: the channel does not read it).
func openWriter(t *testing.T, k *Kind, path string, data []byte, resume bool) (rpc.FilesOpenResult, *writer) {
	t.Helper()
	res, e := call(k, alice, rpc.MethodFilesOpen, fmt.Sprintf(`{"channel":"ahp-file:/w%d","mode":"write","path":%s,"size":%d,"sha256":"%s","fileMode":%d,"mtimeNs":1700000000123456789,"resume":%v}`,
		time.Now().UnixNano(), jsonString(path), len(data), sum(data), 0o4751, resume))
	if e != nil {
		t.Fatal(e)
	}
	k.mu.Lock()
	w := k.writing[filepath.Join(filepath.Dir(path), PartialName(filepath.Base(path)))]
	k.mu.Unlock()
	if w == nil {
		t.Fatal("no writer for", path)
	}
	return res.(rpc.FilesOpenResult), w
}

// outcome is what the writer's stream says once the client's end came.
func outcome(t *testing.T, w *writer) string {
	t.Helper()
	if err := w.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	buf := make([]byte, 7)
	for {
		n, err := w.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// TestWrite: a file lands under its partial name and is renamed onto the
// target only once the stated size and SHA-256 match, with its mode and
// mtime; a short file keeps its partial file (which a resume continues
// from its end, stating its prefix's SHA-256), a wrong sum discards it,
// and a byte past the stated size is refused. A new transfer of the same
// target while one is open is refused.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	k := newKind(t, nil)
	target := filepath.Join(dir, "t.bin")
	part := filepath.Join(dir, PartialName("t.bin"))
	data := []byte(strings.Repeat("0123456789", 1000))

	res, w := openWriter(t, k, target, data, true)
	if res.Offset != 0 || res.Size != int64(len(data)) || res.PrefixSHA256 != "" {
		t.Fatalf("open: %+v", res)
	}
	if _, e := call(k, alice, rpc.MethodFilesOpen, fmt.Sprintf(`{"channel":"ahp-file:/again","mode":"write","path":%s,"size":1,"sha256":"%s"}`, jsonString(target), sum([]byte("x")))); e == nil || e.Code != rpc.CodeAlreadyExists || e.Message != target+" is being written by another transfer" {
		t.Errorf("a second transfer of the target: %v", e)
	}
	if _, err := w.Write(data[:3000]); err != nil {
		t.Fatal(err)
	}
	if got, want := outcome(t, w), "t.bin: 3000 bytes received, 10000 stated; the partial file is kept"; got != want {
		t.Errorf("short: %q, want %q", got, want)
	}
	_ = w.Close()
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the target exists after a short transfer: %v", err)
	}
	if st, err := os.Stat(part); err != nil || st.Size() != 3000 {
		t.Fatalf("partial file: %v, %v", st, err)
	}

	// Resume: the partial file's 3,000 bytes are kept, their SHA-256 said.
	res, w = openWriter(t, k, target, data, true)
	if res.Offset != 3000 || res.PrefixSHA256 != sum(data[:3000]) {
		t.Fatalf("resume: offset %d prefix %s, want 3000 %s", res.Offset, res.PrefixSHA256, sum(data[:3000]))
	}
	if n, err := w.Write(data[3000 : len(data)-1]); err != nil || n != len(data)-3001 {
		t.Fatal(n, err)
	}
	if n, err := w.Write(data[len(data)-1:]); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if n, err := w.Write([]byte("!")); err == nil || err.Error() != "more than the 10000 bytes stated for t.bin" || n != 0 {
		t.Errorf("a byte too many: %d, %v", n, err)
	}
	if got := outcome(t, w); got != "" {
		t.Errorf("complete: %q, want no reason", got)
	}
	_ = w.Close()
	got, err := os.ReadFile(target)
	if err != nil || string(got) != string(data) {
		t.Fatalf("target: %d bytes, %v", len(got), err)
	}
	st, err := os.Stat(target)
	if err != nil || st.Mode() != os.ModeSetuid|0o751 || st.ModTime().UnixNano() != 1700000000123456789 {
		t.Errorf("target: %v", st.Mode())
	}
	if _, err := os.Stat(part); !os.IsNotExist(err) {
		t.Errorf("partial file left: %v", err)
	}

	// Without resume a partial file starts again; a wrong sum discards it.
	mustWrite(t, part, "stale", 0o600)
	other := []byte(strings.Repeat("x", len(data)))
	res, w = openWriter(t, k, target, data, false)
	if res.Offset != 0 {
		t.Fatalf("open without resume: offset %d", res.Offset)
	}
	if _, err := w.Write(other); err != nil {
		t.Fatal(err)
	}
	if got, want := outcome(t, w), fmt.Sprintf("t.bin: SHA-256 %s of the bytes received differs from the %s stated; the partial file is discarded", sum(other), sum(data)); got != want {
		t.Errorf("wrong sum: %q\nwant %q", got, want)
	}
	_ = w.Close()
	if st, err := os.Stat(part); err != nil || st.Size() != 0 {
		t.Errorf("partial file after a wrong sum: %v, %v", st, err)
	}
	if got, _ := os.ReadFile(target); string(got) != string(data) {
		t.Error("the target changed after a failed transfer")
	}
}

// TestWriteDiskFull: a partial file that cannot be written (/dev/full
// stands for a full disk) ends the transfer with the reason as its
// outcome, naming ENOSPC, at once (not a reset that a client takes for a
// lost connection); the rest of the client's bytes are dropped, and the
// partial file is not left to keep the disk full.
func TestWriteDiskFull(t *testing.T) {
	dir := t.TempDir()
	k := newKind(t, nil)
	target := filepath.Join(dir, "t.bin")
	data := []byte(strings.Repeat("0123456789", 1000))
	_, w := openWriter(t, k, target, data, false)
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.f.Close()
	w.f = full
	for _, b := range [][]byte{data[:4000], data[4000:]} {
		if n, err := w.Write(b); n != len(b) || err != nil {
			t.Fatalf("Write: %d, %v; want %d, nil (dropped once failed)", n, err, len(b))
		}
	}
	const want = "t.bin: writing the partial file: no space left on device (ENOSPC); the partial file is discarded"
	if got := outcome(t, w); got != want {
		t.Errorf("outcome %q, want %q", got, want)
	}
	_ = w.Close()
	for _, p := range []string{target, filepath.Join(dir, PartialName("t.bin"))} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists: %v", p, err)
		}
	}
}

// TestWriteNeedsFilesWrite: files/open "write" checks files.write on
// top of the request's files.read: a viewer's is refused -32009 naming
// it (the host refuses a viewer's files.read before).
func TestWriteNeedsFilesWrite(t *testing.T) {
	k := newKind(t, nil)
	vera := adapters.Caller{ClientID: "v1", Identity: auth.Identity{Name: "vera", Role: auth.Viewer}, Conn: 9}
	_, e := call(k, vera, rpc.MethodFilesOpen, `{"channel":"ahp-file:/w","path":"/tmp/x","mode":"write","size":1}`)
	if e == nil || e.Code != rpc.CodePermissionDenied || e.Message != "permission denied: files.write needs role user or owner; vera is viewer" {
		t.Fatalf("a viewer's write: %v", e)
	}
}

// TestDownloadNeedsFilesRead: the HTTP download (web/download) checks the
// identity's role as files/open "read" does: a viewer is refused,
// naming files.read; a user reads the file.
func TestDownloadNeedsFilesRead(t *testing.T) {
	k := newKind(t, nil)
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, _, e := k.OpenDownload(auth.Identity{Name: "vera", Role: auth.Viewer}, p)
	if e == nil || e.Code != rpc.CodePermissionDenied || e.Message != "permission denied: files.read needs role user or owner; vera is viewer" {
		t.Fatalf("a viewer's download: %v", e)
	}
	f, fi, release, e := k.OpenDownload(auth.Identity{Name: "ulla", Role: auth.User}, p)
	if e != nil {
		t.Fatalf("a user's download: %v", e)
	}
	defer release()
	defer f.Close()
	if fi.Size() != 4 {
		t.Errorf("size %d", fi.Size())
	}
}

// TestWriteCommit: a write opened without sha256 takes it from
// files/commit, before or after the client's end of stream: the file is
// renamed into place once both are in, and a wrong sum discards it. A
// commit names a write channel of the caller's connection with a valid
// sum, stated once.
func TestWriteCommit(t *testing.T) {
	dir := t.TempDir()
	k := newKind(t, nil)
	data := []byte(strings.Repeat("abcdefghij", 100000))
	open := func(name, ch string) *writer {
		t.Helper()
		target := filepath.Join(dir, name)
		if _, e := call(k, alice, rpc.MethodFilesOpen, fmt.Sprintf(`{"channel":%q,"mode":"write","path":%s,"size":%d}`, ch, jsonString(target), len(data))); e != nil {
			t.Fatal(e)
		}
		k.mu.Lock()
		w := k.byChan[ch]
		k.mu.Unlock()
		if w == nil {
			t.Fatal("no writer on", ch)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		return w
	}
	commit := func(ch, sum string) *rpc.Error {
		_, e := call(k, alice, rpc.MethodFilesCommit, fmt.Sprintf(`{"channel":%q,"sha256":%q}`, ch, sum))
		return e
	}

	// The sum before the end of stream.
	w := open("a.bin", "ahp-file:/c1")
	if e := commit("ahp-file:/c1", sum(data)); e != nil {
		t.Fatal(e)
	}
	if e := commit("ahp-file:/c1", sum(data)); e != nil {
		t.Errorf("the same sum again: %v", e)
	}
	if e := commit("ahp-file:/c1", sum(nil)); e == nil || e.Code != rpc.CodeInvalidParams || !strings.Contains(e.Message, "differs from the "+sum(data)+" already stated") {
		t.Errorf("another sum: %v", e)
	}
	if got := outcome(t, w); got != "" {
		t.Errorf("committed before the end: %q, want no reason", got)
	}
	_ = w.Close()
	if got, err := os.ReadFile(filepath.Join(dir, "a.bin")); err != nil || string(got) != string(data) {
		t.Fatalf("a.bin: %d bytes, %v", len(got), err)
	}

	// The end of stream first: nothing happens until the sum comes.
	w = open("b.bin", "ahp-file:/c2")
	if err := w.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.result:
		t.Fatal("an outcome before the sum was stated")
	default:
	}
	if e := commit("ahp-file:/c2", sum(data)); e != nil {
		t.Fatal(e)
	}
	if got := outcome(t, w); got != "" {
		t.Errorf("committed after the end: %q, want no reason", got)
	}
	_ = w.Close()
	if got, err := os.ReadFile(filepath.Join(dir, "b.bin")); err != nil || string(got) != string(data) {
		t.Fatalf("b.bin: %d bytes, %v", len(got), err)
	}

	// A wrong sum discards the partial file; the target never appears.
	w = open("c.bin", "ahp-file:/c3")
	wrong := sum([]byte("other"))
	if e := commit("ahp-file:/c3", wrong); e != nil {
		t.Fatal(e)
	}
	if got, want := outcome(t, w), fmt.Sprintf("c.bin: SHA-256 %s of the bytes received differs from the %s stated; the partial file is discarded", sum(data), wrong); got != want {
		t.Errorf("wrong sum: %q\nwant %q", got, want)
	}
	_ = w.Close()
	if _, err := os.Stat(filepath.Join(dir, "c.bin")); !os.IsNotExist(err) {
		t.Errorf("c.bin exists after a wrong sum: %v", err)
	}

	// Refusals.
	for _, tt := range []struct {
		ch, sum string
		code    int64
		msg     string
	}{
		{"ahp-file:/c9", sum(data), rpc.CodeNotFound, "ahp-file:/c9: no file being written on this channel of this connection"},
		{"ahp-file:/c1", "ABC", rpc.CodeInvalidParams, `invalid params: "sha256" must be 64 lowercase hex digits`},
		{"ahp-file:/c1", strings.ToUpper(sum(data)), rpc.CodeInvalidParams, `invalid params: "sha256" must be 64 lowercase hex digits`},
	} {
		if e := commit(tt.ch, tt.sum); e == nil || int64(e.Code) != tt.code || e.Message != tt.msg {
			t.Errorf("commit %s %s: %v, want %d %s", tt.ch, tt.sum, e, tt.code, tt.msg)
		}
	}
}
