package tests

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestRefusalsLoggedBounded (issue 16 case 3): a client retrying a wrong
// token, or sending a refused 100 kB Origin, in a loop is logged at a
// bounded rate, each refusal once a second in full and the rest counted
// ("… more like it", count), with the Origin cut to 200 bytes: every
// request is counted, in a bounded amount of log. Before, each was a line
// with the whole Origin.
func TestRefusalsLoggedBounded(t *testing.T) {
	s := startServer(t, "")
	hc := s.httpClient(t)
	url := "https://" + s.host + "/ahp"
	const n = 100
	hugeOrigin := "https://" + strings.Repeat("o", 100000) + ".test"
	send := func(token, origin string, want int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		req.Header.Set("Authorization", "Bearer "+token)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}
	for range n {
		send("wrong-"+s.token, "", http.StatusUnauthorized)
		send(s.token, hugeOrigin, http.StatusForbidden)
	}
	// Every refusal is counted once its second ends.
	type tally struct{ full, counted, bytes int }
	var got map[string]*tally
	text, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool {
		got = map[string]*tally{"WebSocket upgrade refused": {}, "browser origin refused": {}}
		sc := bufio.NewScanner(strings.NewReader(text))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var line struct {
				Message string `json:"@message"`
				Count   int    `json:"count"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			msg, more := strings.CutSuffix(line.Message, ": more like it")
			tl := got[msg]
			if tl == nil {
				continue
			}
			tl.bytes += len(sc.Bytes())
			if more {
				tl.counted += line.Count
			} else {
				tl.full++
			}
		}
		for _, tl := range got {
			if tl.full+tl.counted != n {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("refusals not all counted within %v: %+v\n%s", waitTimeout, got, tail(text, 3000))
	}
	for msg, tl := range got {
		if tl.full > n/10 || tl.bytes > 8192 {
			t.Errorf("%s: %d lines in full, %d bytes of log for %d refusals", msg, tl.full, tl.bytes, n)
		}
	}
}
