package preview

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"reflect"
	"testing"
)

// TestScrubToken: the token leaves a request bound for an app in every
// form a reviewer sent it, repeated headers included; an app's own
// credentials, cookies and ?token= pass unchanged.
func TestScrubToken(t *testing.T) {
	const tok = "s3cr3t-T0KEN_value"
	basic := base64.StdEncoding.EncodeToString([]byte("u:" + tok))
	h := http.Header{
		"Authorization":       {"Bearer other", "Bearer " + tok, "Bearer\t" + tok, tok, "Basic " + basic, "Bearer" + tok},
		"Proxy-Authorization": {"Bearer " + tok},
		"X-Token":             {tok, "kept"},
		"Cookie":              {"a=1; t=" + tok + "; b=2", "only=" + tok},
		"Accept":              {"*/*"},
	}
	u, _ := url.Parse("http://localhost:1/p?token=" + tok + "&token=apps-own&ticket=" + url.QueryEscape(tok) + "&x=%7e&q=a%20" + tok)
	scrubToken(h, u, tok)
	want := http.Header{
		"Authorization": {"Bearer other"},
		"X-Token":       {"kept"},
		"Cookie":        {"a=1; b=2"},
		"Accept":        {"*/*"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("headers %v, want %v", h, want)
	}
	if u.RawQuery != "token=apps-own&x=%7e" {
		t.Errorf("query %q, want %q", u.RawQuery, "token=apps-own&x=%7e")
	}

	// Nothing of the token: untouched, byte for byte.
	h = http.Header{"Authorization": {"Bearer s3cr3t-T0KEN_valu"}}
	u, _ = url.Parse("http://localhost:1/p?token=s3cr3t&a=%41")
	scrubToken(h, u, tok)
	if h.Get("Authorization") != "Bearer s3cr3t-T0KEN_valu" || u.RawQuery != "token=s3cr3t&a=%41" {
		t.Errorf("a near miss was taken: %v %q", h, u.RawQuery)
	}
}

func TestContainsToken(t *testing.T) {
	for _, tc := range []struct {
		v, tok string
		want   bool
	}{
		{"abc", "abc", true}, {"xabcx", "abc", true}, {"ab", "abc", false},
		{"abd", "abc", false}, {"", "abc", false}, {"abc", "", false},
	} {
		if got := containsToken(tc.v, tc.tok); got != tc.want {
			t.Errorf("containsToken(%q, %q) = %v", tc.v, tc.tok, got)
		}
	}
}
