package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRolesOwnFilesRefused (issue 32 review, item 2): through the real
// binary, whatever files.read says ("/"), a user's `sidecar cp` of the
// daemon's tokens file and of its audit file is refused naming the rule
// (exit 255, nothing written), as is her GET /web/files of the tokens
// file (403); her cp of another file in the same directory works, and
// the owner still downloads the audit file.
func TestRolesOwnFilesRefused(t *testing.T) {
	t.Parallel()
	etc := t.TempDir()
	tokens := filepath.Join(etc, "tokens.hcl")
	if err := os.WriteFile(tokens, []byte(rolesTokens()), 0o600); err != nil {
		t.Fatal(err)
	}
	auditFile := filepath.Join(etc, "audit.log")
	plain := filepath.Join(etc, "plain.txt")
	if err := os.WriteFile(plain, []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "auth {\n  tokens_file = "+strconv.Quote(tokens)+"\n}\naudit {\n  file = "+strconv.Quote(auditFile)+"\n}\nfiles {\n  read = [\"/\"]\n  write = [\"/\"]\n}\n")
	out := t.TempDir()
	cp := func(src string) (string, int) {
		_, errOut, code := s.run(t, "cp", "--token", ullaTok, "--cert-hash", s.hash, s.url+":"+src, filepath.Join(out, filepath.Base(src)))
		return errOut, code
	}
	for _, c := range []struct{ path, rule string }{{tokens, "auth.tokens_file"}, {auditFile, "audit.file"}} {
		errOut, code := cp(c.path)
		want := fmt.Sprintf("read %s refused: it is the daemon's own (%s): refused to role user", c.path, c.rule)
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("ulla's cp of %s: exit %d, stderr %q; want 1 and %q", c.path, code, errOut, want)
		}
		if _, err := os.Stat(filepath.Join(out, filepath.Base(c.path))); err == nil {
			t.Errorf("ulla's refused cp of %s left a copy", c.path)
		}
	}
	if errOut, code := cp(plain); code != 0 {
		t.Errorf("ulla's cp of %s: exit %d, stderr %q", plain, code, errOut)
	} else if b, _ := os.ReadFile(filepath.Join(out, "plain.txt")); string(b) != "plain\n" {
		t.Errorf("ulla's copy of plain.txt: %q", b)
	}

	tr := &http.Transport{TLSClientConfig: s.tlsConfig()}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: waitTimeout}
	get := func(tok, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+s.host+"/web/files?path="+url.QueryEscape(path), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(ullaTok, tokens); code != 403 || !strings.Contains(body, "read "+tokens+" refused: it is the daemon's own (auth.tokens_file): refused to role user") {
		t.Errorf("ulla's GET /web/files of the tokens file: %d %q", code, body)
	}
	if code, body := get(olgaTok, auditFile); code != 200 || !strings.Contains(body, `"action":"auth.success"`) {
		t.Errorf("olga's GET /web/files of the audit file: %d %q", code, body)
	}
}
