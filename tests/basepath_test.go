package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestBasePath: a daemon with listener.base_path = "/vm1" (a proxy that
// keeps its location's prefix) serves every endpoint under /vm1/ and
// nothing at the root: the CLI reaches it at https://HOST/vm1/ (auto,
// WebSocket, WebTransport) and wss://HOST/vm1/ahp; the old root paths
// answer 404 (but the probe, which seed 002 puts at the origin's root),
// and the common wrong URLs say which ones to use.
func TestBasePath(t *testing.T) {
	t.Parallel()
	s := startServerListener(t, "  base_path = \"/vm1/\"\n", "")
	if want := "wss://" + s.host + "/vm1/ahp"; s.url != want {
		t.Fatalf("attach line URL %s, want %s", s.url, want)
	}
	base := "https://" + s.host + "/vm1"
	t.Run("CLI", func(t *testing.T) {
		for _, tc := range []struct{ url, transport string }{
			{base + "/", "auto"},
			{base, "auto"},
			{base + "/", "websocket"},
			{base + "/", "webtransport"},
			{s.url, "auto"}, // wss://HOST/vm1/ahp
			{base + "/", "ahp"},
		} {
			out, errOut, code := s.run(t, append([]string{"ls", tc.url, "--transport", tc.transport}, s.connArgs()...)...)
			if code != 0 {
				t.Errorf("ls %s --transport %s: exit %d\nstdout: %s\nstderr: %s", tc.url, tc.transport, code, out, errOut)
			}
			out, errOut, code = s.run(t, append(append([]string{"run", tc.url, "--transport", tc.transport}, s.connArgs()...), "--", "echo", "under-vm1")...)
			if code != 0 || out != "under-vm1\n" {
				t.Errorf("run %s --transport %s: exit %d, stdout %q, stderr %q; want 0 and under-vm1", tc.url, tc.transport, code, out, errOut)
			}
		}
	})
	t.Run("wrong URLs", func(t *testing.T) {
		use := "https://" + s.host + "/vm1/ (transport-io, also the web page) or wss://" + s.host + "/vm1/ahp (plain AHP)"
		for _, tc := range []struct{ url, transport, want string }{
			// The base path without /ahp: the daemon redirects to its page.
			{"wss://" + s.host + "/vm1", "auto", s.host + " answered /vm1 with HTTP 307, not a WebSocket upgrade: for a sidecar under /vm1/ (its listener.base_path, or a proxy's location), use " + use},
			// The root, where a daemon without a base path answers.
			{"https://" + s.host + "/", "websocket", s.host + " has no endpoint /transport-io (HTTP 404): is it a sidecar? One answers at https://" + s.host + "/ (transport-io"},
			{"https://" + s.host + "/", "webtransport", s.host + " has no endpoint /transport-io (HTTP 404)"},
			{"https://" + s.host + "/", "auto", s.host + " has no endpoint /transport-io (HTTP 404)"},
			{"wss://" + s.host + "/ahp", "auto", s.host + " has no endpoint /ahp (HTTP 404)"},
			{"https://" + s.host + "/vm2/", "auto", s.host + " has no endpoint /vm2/transport-io (HTTP 404): for a sidecar under /vm2/"},
		} {
			_, errOut, code := s.run(t, append([]string{"ls", tc.url, "--transport", tc.transport}, s.connArgs()...)...)
			if code != 255 || !strings.Contains(errOut, tc.want) {
				t.Errorf("ls %s --transport %s: exit %d, stderr %q; want 255 and %q", tc.url, tc.transport, code, errOut, tc.want)
			}
		}
	})
	t.Run("HTTP", func(t *testing.T) {
		hc := s.httpClient(t)
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		origin := "https://" + s.host
		for _, tc := range []struct {
			method, path string
			status       int
			location     string
		}{
			{"GET", "/", 404, ""},
			{"GET", "/ahp", 404, ""},
			{"GET", "/transport-io", 404, ""},
			{"HEAD", "/.well-known/transport-io", http.StatusNoContent, ""}, // the origin's, for seed 002's clients
			{"POST", "/web/info", 404, ""},
			{"GET", "/vm1", http.StatusTemporaryRedirect, "/vm1/"},
			{"GET", "/vm1/", 200, ""},
			{"HEAD", "/vm1/.well-known/transport-io", http.StatusNoContent, ""},
			{"GET", "/vm1/ahp", http.StatusUnauthorized, ""}, // no token
			{"POST", "/vm1/web/info", 200, ""},
		} {
			req, err := http.NewRequest(tc.method, origin+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.method == "POST" {
				req.Header.Set("Origin", origin)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.path, err)
			}
			var info struct {
				CertHashes []string `json:"certHashes"`
			}
			if tc.path == "/vm1/web/info" {
				if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || len(info.CertHashes) != 1 || info.CertHashes[0] != s.hash {
					t.Errorf("/vm1/web/info: %+v, %v; want the pin %s", info, err, s.hash)
				}
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get("Location") != tc.location {
				t.Errorf("%s %s: %d Location %q, want %d %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Location"), tc.status, tc.location)
			}
		}
	})
}

// TestServeBasePathFlag: serve --base-path overrides listener.base_path
// (the attach line shows it), and an invalid one is a usage error (exit
// 2) that says what is wrong before anything listens.
func TestServeBasePathFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, "serve", "--listen", "127.0.0.1:0", "--token", "tok-basepathflag", "--state-dir", dir, "--base-path", "/team/vm2/")
	var m []string
	text, ok := p.stdout.waitMatch(waitTimeout, func(text string) bool {
		m = attachLine.FindStringSubmatch(text)
		return m != nil
	})
	if !ok {
		t.Fatalf("no attach line within %v\nstdout:\n%s\nstderr:\n%s", waitTimeout, text, tail(p.stderr.String(), 3000))
	}
	if want := "wss://" + m[2] + "/team/vm2/ahp"; m[1] != want {
		t.Errorf("attach line URL %s, want %s", m[1], want)
	}
	bad := start(t, "serve", "--listen", "127.0.0.1:0", "--token", "tok-basepathflag", "--state-dir", dir, "--base-path", "vm2")
	if code := bad.wait(t, waitTimeout); code != 2 || !strings.Contains(bad.stderr.String(), `--base-path: "vm2" must start with "/"`) {
		t.Errorf("--base-path vm2: exit %d, stderr %q; want 2 and what is wrong", code, bad.stderr.String())
	}
}
