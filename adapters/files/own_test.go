package files

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TestOwnPathsRefused (issue 32 review, item 2): the daemon's own paths
// (auth.token_file, audit.file, terminal.record_dir, state_dir…) are
// refused to a user whatever files.read and files.write say, through a
// symbolic link too, for open, stat, list, put and the HTTP download,
// each refusal naming the rule; a listing of the directory holding the
// token file still shows its name; an owner reads them but may not
// write them.
func TestOwnPathsRefused(t *testing.T) {
	etc, work := t.TempDir(), t.TempDir()
	tokenFile := filepath.Join(etc, "token")
	auditFile := filepath.Join(etc, "audit.log")
	recDir := filepath.Join(etc, "rec")
	stateDir := filepath.Join(etc, "state")
	mustWrite(t, tokenFile, "owner-secret\n", 0o600)
	mustWrite(t, auditFile, "{}\n", 0o600)
	for _, d := range []string{recDir, stateDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(recDir, "t1.cast"), "rec", 0o600)
	mustWrite(t, filepath.Join(stateDir, "tls.key"), "key", 0o600)
	link := filepath.Join(work, "innocent")
	if err := os.Symlink(tokenFile, link); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Files.Read, cfg.Files.Write = []string{"/"}, []string{"/"}
	cfg.Auth.TokenFile, cfg.Audit.File, cfg.Terminal.RecordDir, cfg.StateDir = tokenFile, auditFile, recDir, stateDir
	kk, err := NewKind(adapters.Env{Config: cfg, Journal: journal.New(journal.Limits{}), Log: hclog.NewNullLogger(), Quotas: adapters.NewQuotas()})
	if err != nil {
		t.Fatal(err)
	}
	k := kk.(*Kind)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		k.Shutdown(ctx)
	})
	olga := adapters.Caller{ClientID: "o1", Principal: "olga", Identity: auth.Identity{Name: "olga", Role: auth.Owner}, Conn: 5}
	refused := func(what string, e *rpc.Error, want string) {
		t.Helper()
		if e == nil || e.Code != rpc.CodePermissionDenied || e.Message != want {
			t.Errorf("%s: %v\nwant -32009 %q", what, e, want)
		}
	}
	tokRule := "it is the daemon's own (auth.token_file): refused to role "
	_, e := call(k, alice, rpc.MethodFilesOpen, `{"channel":"ahp-file:/r1","path":`+jsonString(tokenFile)+`,"mode":"read"}`)
	refused("a user reads the token file", e, "read "+tokenFile+" refused: "+tokRule+"user")
	_, e = call(k, alice, rpc.MethodFilesOpen, `{"channel":"ahp-file:/r2","path":`+jsonString(link)+`,"mode":"read"}`)
	refused("a user reads it through a link", e, "read "+link+" ("+tokenFile+") refused: "+tokRule+"user")
	_, e = call(k, alice, rpc.MethodFilesStat, `{"path":`+jsonString(tokenFile)+`,"sha256":true}`)
	refused("a user stats it", e, "read "+tokenFile+" refused: "+tokRule+"user")
	_, e = call(k, alice, rpc.MethodFilesOpen, `{"channel":"ahp-file:/r3","path":`+jsonString(auditFile)+`,"mode":"read"}`)
	refused("a user reads the audit file", e, "read "+auditFile+" refused: it is the daemon's own (audit.file): refused to role user")
	_, e = call(k, alice, rpc.MethodFilesList, `{"path":`+jsonString(recDir)+`}`)
	refused("a user lists record_dir", e, "read "+recDir+" refused: it is the daemon's own (terminal.record_dir "+recDir+"): refused to role user")
	_, e = call(k, alice, rpc.MethodFilesOpen, `{"channel":"ahp-file:/r4","path":`+jsonString(filepath.Join(stateDir, "tls.key"))+`,"mode":"read"}`)
	refused("a user reads the state dir's key", e, "read "+filepath.Join(stateDir, "tls.key")+" refused: it is the daemon's own (state_dir "+stateDir+"): refused to role user")
	_, e = call(k, alice, rpc.MethodFilesOpen, `{"channel":"ahp-file:/w1","path":`+jsonString(filepath.Join(recDir, "t2.cast"))+`,"mode":"write","size":1}`)
	refused("a user writes into record_dir", e, "write "+filepath.Join(recDir, "t2.cast")+" refused: it is the daemon's own (terminal.record_dir "+recDir+"): refused to role user")
	_, e = call(k, alice, rpc.MethodFilesPut, `{"path":`+jsonString(filepath.Join(stateDir, "sub"))+`,"type":"dir"}`)
	refused("a user makes a directory in state_dir", e, "write "+filepath.Join(stateDir, "sub")+" refused: it is the daemon's own (state_dir "+stateDir+"): refused to role user")
	_, _, _, e = k.OpenDownload(alice.Identity, tokenFile)
	refused("a user downloads the token file", e, "read "+tokenFile+" refused: "+tokRule+"user")

	// The directory holding the token file lists, its name shown.
	res, e := call(k, alice, rpc.MethodFilesList, `{"path":`+jsonString(etc)+`}`)
	if e != nil {
		t.Fatalf("a user lists the token file's directory: %v", e)
	}
	var names []string
	for _, en := range res.(rpc.FilesListResult).Entries {
		names = append(names, en.Name)
	}
	if want := []string{"audit.log", "rec", "state", "token"}; !slices.Equal(names, want) {
		t.Errorf("listing: %q, want %q", names, want)
	}

	// An owner reads them, and may not write them.
	st, e := call(k, olga, rpc.MethodFilesStat, `{"path":`+jsonString(tokenFile)+`,"sha256":true}`)
	if e != nil || st.(rpc.FileInfo).SHA256 != sum([]byte("owner-secret\n")) {
		t.Errorf("an owner stats the token file: %v %v", st, e)
	}
	_, e = call(k, olga, rpc.MethodFilesOpen, `{"channel":"ahp-file:/w2","path":`+jsonString(tokenFile)+`,"mode":"write","size":1}`)
	refused("an owner writes the token file", e, "write "+tokenFile+" refused: "+tokRule+"owner")
	if b, _ := os.ReadFile(tokenFile); string(b) != "owner-secret\n" {
		t.Errorf("token file now %q", b)
	}
}
